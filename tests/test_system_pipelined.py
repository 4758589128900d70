"""The cocotb system testbench with the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py) in every device: RTL devices
behind their flit links under the golden host on Icarus, each device's shadow following the engine's commit
ports (tb/system_pipe.py), every message and cache compared as with the serializing DCOH
(tests/test_system_rtl.py).  ``make sim DCOH_PIPE=1`` runs the same testbench longer.

Also shows that the comparison fails with this shadow: with ``SIM_BREAK=cmd_data`` the internal-cache BFM
returns a wrong line to the DCOH's ``cmd``, the RTL forwards it, and the run must stop on a data mismatch."""

from pathlib import Path

import pytest

from tb.run_system import build, run
from tb.seed import env_seed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"          # shares the converted Verilog with make sim DCOH_PIPE=1
SEED = env_seed(3)


@pytest.fixture(scope="module")
def icarus_pipelined():
    return build("icarus", 2, BUILD, pipelined_dcoh=True)


def test_pipelined_system_short_profile(icarus_pipelined, tmp_path):
    runner, build_dir, params = icarus_pipelined
    s = run(runner, build_dir, params, SEED, 150, tmp_path / "summary.json", think=2)
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')} (reproduce: make sim SEED={SEED} DEVICES=2 " \
                                    "SIM=icarus DCOH_PIPE=1)"
    assert s["transactions"] >= 150 and s["latency_cycles"]
    commits = s["commits"]
    # the shadow followed every kind of commit: accesses, completions, responses, snoops answered at C, by the
    # answer lane and after a probe
    for kind in ("access", "completion", "response", "snoop_c", "snoop_lane", "snoop_probe"):
        assert commits.get(kind, 0) > 0, (SEED, kind, commits)
    assert not any(s["dispatch"].values()), s["dispatch"]       # (no serializing engine here)


def test_pipelined_system_scoreboard_catches_a_corrupted_line(icarus_pipelined, tmp_path, monkeypatch):
    from test_system_rtl import catches_a_corrupted_line
    catches_a_corrupted_line(icarus_pipelined, tmp_path, monkeypatch)


# ---------------------------------------------------------------- make regress (pytest -m slow)
@pytest.mark.slow        # the races of tests/test_races.py and the traces Hypothesis found, each replayed
def test_pipelined_system_replays_the_race_and_hypothesis_traces(icarus_pipelined, tmp_path):
    from test_system_rtl import _hypothesis_traces, _race_traces, _replay
    _replay(icarus_pipelined, tmp_path, _race_traces() + _hypothesis_traces())


# The edges of tests/test_system_rtl.py: one work entry and two or three CQIDs, a snoop filter of one set of
# four ways, so that snoops wait for the work entry and back-invalidations for a second CQID all the time.
EDGES = {"work1-tracker2": dict(work=1, tracker=2),
         "work1-tracker3-sf1x4": dict(work=1, tracker=3, sf_sets=1, sf_ways=4)}


@pytest.mark.slow        # ~2 min each: a Verilog conversion and an Icarus build per size
@pytest.mark.parametrize("name", sorted(EDGES))
def test_pipelined_system_at_work_table_and_tracker_edges(name, tmp_path):
    runner, build_dir, params = build("icarus", 2, ROOT / "build" / f"sim_{name}", dcoh=EDGES[name],
                                      pipelined_dcoh=True)
    s = run(runner, build_dir, params, SEED, 150, tmp_path / "summary.json", host="host_dir=exact")
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')}"
    assert s["counters"]["work_peak"] == EDGES[name]["work"], s["counters"]      # the table was full
    assert s["commits"].get("back_invalidation", 0) > 0, s["commits"]
