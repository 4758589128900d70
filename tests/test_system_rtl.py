"""The cocotb system testbench's short profile (make test): RTL devices under the golden host on
Icarus, every message and cache compared with the shadow golden model.  The long runs are
``make sim`` (4 devices, 20k transactions) and ``make regress`` (>= 10^6 transactions over seeds).

Also shows that the scoreboard can fail: with ``SIM_BREAK=cmd_data`` the internal-cache BFM returns
a wrong line to the DCOH's ``cmd`` (as a corrupted datapath would), the RTL forwards it, and the run
must stop on a data mismatch naming its seed."""

import os
from pathlib import Path

import pytest

from tb.run_system import build, run

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"          # shares the converted Verilog with make sim
SEED = int(os.environ.get("SYSTEM_SEED", "3"))


@pytest.fixture(scope="module")
def icarus_system():
    return build("icarus", 2, BUILD)


def test_system_short_profile(icarus_system, tmp_path):
    runner, build_dir, params = icarus_system
    s = run(runner, build_dir, params, SEED, 60, tmp_path / "summary.json", think=2)
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')} (reproduce: make sim SEED={SEED} DEVICES=2)"
    assert s["engine"] == "rtl" and s["transactions"] >= 60
    assert s["latency_cycles"], "no request completed"
    cov = s["coverage"]
    assert len(cov["state_event"]) >= 5 and any(k.startswith("upstream H") for k in cov["flits"])


def test_system_scoreboard_catches_a_corrupted_line(icarus_system, tmp_path, monkeypatch):
    runner, build_dir, params = icarus_system
    monkeypatch.setenv("SIM_BREAK", "cmd_data")
    s = run(runner, build_dir, params, SEED, 400, tmp_path / "summary.json", think=2)
    assert s.get("violations") == 1, "a corrupted line reached the host unnoticed"
    assert f"seed {SEED}" in s["error"] and ("data" in s["error"] or "cache" in s["error"]), s["error"]


def _race_traces(devices=2, caches=2):
    """The CPU accesses of every race in tests/test_races.py (recorded by tests/scenario.py), as
    system_tb traces.  The races were built on the model with their own timing; on the RTL system the
    same accesses run with the RTL's timing, checked by the same scoreboard."""
    import inspect
    import scenario as scenario_mod
    import test_races
    traces = []
    for name, race in inspect.getmembers(test_races, inspect.isfunction):
        if not name.startswith("test_"):
            continue
        made = []
        orig = scenario_mod.Scenario.__init__

        def record(self, **cfg):
            orig(self, **cfg)
            made.append(self)
        scenario_mod.Scenario.__init__ = record
        try:
            race()
        finally:
            scenario_mod.Scenario.__init__ = orig
        ops = [list(m[1:]) for s in made for m in s.trace if m[0] == "cpu"]
        if ops and all(d < devices and k < caches for d, k, *_ in ops):
            traces.append({"name": name, "ops": ops})
    return traces


def test_system_replays_the_race_traces(icarus_system, tmp_path):
    import json
    traces = _race_traces()
    assert len(traces) >= 5
    runner, build_dir, params = icarus_system
    for t in traces:                     # one simulation each: a reset does not clear the SF memory
        path = tmp_path / f"{t['name']}.json"
        path.write_text(json.dumps(t))
        s = run(runner, build_dir, params, SEED, 0, tmp_path / "summary.json", think=2,
                testcase="system_trace", trace=path)
        assert not s.get("violations"), s.get("error")
        assert s["trace"] == t["name"] and s["transactions"] >= 1, f"{t['name']}: no request reached the host"
