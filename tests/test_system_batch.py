"""The batched system testbench (tb/system_batch.py) on Verilator: the checks hold, the run does not
depend on how often Python looks (K), and its checks fail when their input is broken on purpose.

Slow (a Verilator build of the batched devices takes 2-4 minutes): ``make regress`` (pytest -m slow).
Its RTL blocks are tested in make test: tests/test_rtl_caches.py (the caches and their traffic),
tests/test_stamped.py (the stamped queues)."""

from pathlib import Path

import pytest

from tb.run_system import build, run
from tb.seed import env_seed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"
SEED = env_seed(3)
SAME = ("cycles", "transactions", "messages", "cache_hits", "latency_cycles", "dispatch", "coverage", "host",
        "coalescing")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batched_system():
    return build("verilator", 2, BUILD, batched=True)


def test_batched_system_is_clean_and_the_same_for_any_k(batched_system, tmp_path):
    runner, build_dir, params = batched_system
    out = {}
    for k in (2, 8):
        s = run(runner, build_dir, params, SEED, 400, tmp_path / f"summary_{k}.json", batch=k)
        assert not s.get("violations"), f"seed {SEED} K={k}: {s.get('error')}"
        assert s["transactions"] > 100 and s["batch"]["late"] == 0, (s["transactions"], s["batch"])
        out[k] = s
    diff = [key for key in SAME if out[2].get(key) != out[8].get(key)]
    assert not diff, f"seed {SEED}: K=2 and K=8 differ in {diff}"
    # without the flit monitor the devices record no flit-only cycles: nothing else may change (the
    # flit kinds and slot formats in the coverage come from the monitor)
    s = run(runner, build_dir, params, SEED, 400, tmp_path / "summary_noflits.json", flit_monitor=False, batch=8)
    assert not s.get("violations"), f"seed {SEED} K=8, no flit monitor: {s.get('error')}"
    diff = [key for key in SAME if key != "coverage" and s.get(key) != out[8].get(key)]
    diff += [] if s["coverage"]["state_event"] == out[8]["coverage"]["state_event"] else ["coverage.state_event"]
    assert not diff, f"seed {SEED}: K=8 with and without the flit monitor differ in {diff}"


@pytest.mark.parametrize("broken, words", [("mirror", ("cache",)), ("flit", ("flit breaks a link rule", "CRC"))])
def test_batched_system_checks_fail_on_a_broken_input(batched_system, tmp_path, monkeypatch, broken, words):
    runner, build_dir, params = batched_system
    monkeypatch.setenv("SIM_BREAK", broken)
    s = run(runner, build_dir, params, SEED, 400, tmp_path / "summary.json", batch=8)
    assert s.get("violations") == 1, f"SIM_BREAK={broken} went unnoticed"
    assert f"seed {SEED}" in s["error"] and all(w in s["error"] for w in words), s["error"]
