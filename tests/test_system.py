"""The timed system simulation: summary format, reproducibility from the seed, invariants on several
seeds and shapes, and the forward-progress watchdog."""

import json

import pytest

from models.config import Config
from models.system import ForwardProgressError, System, main, randbelow, run


def test_summary_format_and_counts(tmp_path):
    out = tmp_path / "summary.json"
    assert main(["--devices", "4", "--transactions", "3000", "--seed", "7", "--out", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["engine"] == "model" and s["simulator"] is None
    assert s["devices"] == 4 and s["transactions"] >= 3000 and s["violations"] == 0 and s["seed"] == 7
    assert {"RdShared", "RdOwn", "DirtyEvict"} <= set(s["latency_cycles"])
    for v in s["latency_cycles"].values():
        assert 0 < v["p50"] <= v["p99"]


def test_same_seed_same_run():
    a = run(Config(devices=2), 1500, seed=3)
    b = run(Config(devices=2), 1500, seed=3)
    for k in ("cycles", "messages", "latency_cycles", "coalescing", "counters"):
        assert a[k] == b[k]
    assert run(Config(devices=2), 1500, seed=4)["cycles"] != a["cycles"]


@pytest.mark.parametrize("seed, cfg", [
    (11, dict(devices=8, caches=3)),
    (12, dict(devices=2, sf_sets=1, sf_ways=2, max_outstanding=2, credits=1)),   # tiny: evictions, stalls
    (13, dict(devices=3, coalesce_window=16, coalesce_block=8)),
    (14, dict(devices=16, caches=1, sf_sets=4, sf_ways=1)),
])
def test_invariants_hold_across_shapes(seed, cfg):
    s = run(Config(**cfg), 3000, seed=seed)
    assert s["violations"] == 0 and s["transactions"] >= 3000
    assert s["arbiter_max_passed"] <= Config(**cfg).starvation_bound + 2


def test_coalescing_saves_messages_with_a_window():
    none = run(Config(devices=4, coalesce_window=0), 4000, seed=5)["coalescing"]
    wide = run(Config(devices=4, coalesce_window=64, coalesce_block=8), 4000, seed=5)["coalescing"]
    assert none["saved"] <= wide["saved"] and wide["saved"] > 0
    assert wide["messages_out"] < wide["invalidations_in"]


def test_watchdog_names_every_outstanding_request():
    sysm = System(Config(devices=2, watchdog=100), timed=True)
    from models.dcoh import CpuOp
    sysm.devices[0].accept(CpuOp("load", 0, 0x40), 0)
    sysm.settle()
    sysm.now = 500                      # nobody delivered anything: the request is 500 cycles old
    sysm.devices[0].now = 500
    with pytest.raises(ForwardProgressError, match=r"(?s)older than 100.*dev0 CQID 0 RdShared line 0x40"):
        sysm.watchdog()


@pytest.mark.parametrize("seed, cfg, host", [
    (21, dict(devices=8, caches=3), "host_dir_sets=1,host_dir_ways=1,host_traffic=0.3"),
    (22, dict(devices=2, sf_sets=1, sf_ways=2, max_outstanding=2, credits=1), "host_snoop_scope=holders,host_traffic=0.5"),
    (23, dict(devices=16, caches=1, sf_sets=4, sf_ways=1), "host_dir_sets=2,host_dir_ways=2,host_traffic=1"),
])
def test_host_directory_and_traffic_keep_the_invariants(seed, cfg, host):
    """Tiny host directories (every read back-invalidates) and heavy host traffic, timed, checked after
    every step: no violation, no stall, and the host really evicted and accessed."""
    s = run(Config(**cfg).with_overrides(host), 2000, seed=seed)
    assert s["violations"] == 0 and s["transactions"] >= 2000
    assert s["host"]["back_invalidations"] > 100 and s["host"]["host_write"] > 0


def test_finite_work_table_holds_snoops_and_back_invalidations():
    """Config.work_entries: the golden model with one work entry per device (the RTL DCOH's ``work``) runs
    clean with every invariant on, fills the table (``work_peak``), and sends different messages than the
    unbounded model on the same seed (so the limit is reached and obeyed, not merely set).  A work entry
    made while the table is full raises (models/dcoh.py ``_new_work``)."""
    small = dict(devices=2, sf_sets=2, sf_ways=2, max_outstanding=4, coalesce_window=8)
    capped = run(Config(**small, work_entries=1), 600, 3)
    free = run(Config(**small), 600, 3)
    assert capped["violations"] == 0 and capped["counters"]["work_peak"] == 1
    assert "work_peak" not in free["counters"]
    assert capped["latency_cycles"] != free["latency_cycles"]


def test_randbelow_draws_what_the_generator_would():
    """The workload's compiled draw gives the numbers ``random.Random._randbelow`` gives, and leaves the
    generator where it would (so a seed's accesses are those it always was)."""
    import random
    for seed in range(4):
        ours, theirs = random.Random(seed), random.Random(seed)
        for n in (1, 2, 3, 7, 8, 9, 16, 255, 256, 1000, 4097):
            for _ in range(20):
                assert randbelow(ours.getrandbits, n) == theirs._randbelow(n), (seed, n)
        assert ours.random() == theirs.random()
