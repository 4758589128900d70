"""Exhaustive exploration of the smallest configuration: every interleaving, no violation, no deadlock."""

from models.explore import QUICK, explore


def test_quick_configuration_is_clean():
    name, make, lines, kinds, variants, budget = QUICK
    r = explore(make(), lines=lines, cpu_kinds=kinds, variants=variants, budget=budget)
    assert r["first_violation"] is None, r["first_violation"]
    assert r["first_deadlock"] is None, r["first_deadlock"]
    assert r["complete"]
    assert r["states"] > 1000          # it really explored (guards against an empty search)
