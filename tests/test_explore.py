"""Exhaustive exploration of the smallest configuration: every interleaving, no violation, no deadlock."""

from models.explore import CONFIGS, QUICK, explore


def test_quick_configuration_is_clean():
    name, make, lines, kinds, variants, budget, host_kinds = QUICK
    r = explore(make(), lines=lines, cpu_kinds=kinds, variants=variants, budget=budget, host_kinds=host_kinds)
    assert r["first_violation"] is None, r["first_violation"]
    assert r["first_deadlock"] is None, r["first_deadlock"]
    assert r["complete"]
    assert r["states"] > 1000          # it really explored (guards against an empty search)


def _explore(name, budget):
    _, make, lines, kinds, variants, _, host_kinds = next(c for c in CONFIGS if c[0] == name)
    r = explore(make(), lines=lines, cpu_kinds=kinds, variants=variants, budget=budget, host_kinds=host_kinds)
    assert r["first_violation"] is None, r["first_violation"]
    assert r["first_deadlock"] is None, r["first_deadlock"]
    assert r["complete"] and r["states"] > 1000
    return r


def test_host_accesses_at_tiny_size():
    """Every interleaving of two accesses (device or host: read, read_current, write) on one line: each
    snoop class reaches a device that does not hold the line, outside any race of device requests."""
    r = _explore("2dev-1cache-1line-hostaccess", budget=2)
    assert {"I / SnpData", "I / SnpInv", "I / SnpCur", "S / SnpData", "S / SnpCur", "M / SnpCur"} <= set(r["state_event"])


def test_one_way_host_directory_back_invalidates_at_tiny_size():
    """A 1-set 1-way host directory over two lines, every interleaving of two accesses: a read of the
    second line back-invalidates the first, and every invariant (host-directory inclusion too) holds."""
    r = _explore("2dev-1cache-2line-hostdir1x1", budget=2)
    assert r["max_back_invalidations"] >= 1
    assert {"M / SnpInv", "S / SnpInv"} <= set(r["state_event"])


def test_host_pulling_clean_evictions_at_tiny_size():
    """A host that pulls every CleanEvict's clean data (GO_WritePull instead of GO_WritePull_Drop), every
    interleaving of three accesses on one line: the evicting device sends its clean copy, and the racing
    snoop cases (the line already gone: Bogus data) hold every invariant."""
    r = _explore("2dev-1cache-1line-cleanpull", budget=3)
    assert {"EI_A / GO_WritePull", "II_A / GO_WritePull"} <= set(r["state_event"]), r["state_event"]
