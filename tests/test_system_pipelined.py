"""The cocotb system testbench with the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py) in every device: RTL devices
behind their flit links under the golden host on Icarus, each device's shadow following the engine's commit
ports (tb/system_pipe.py), every message and cache compared as with the serializing DCOH
(tests/test_system_rtl.py).  ``make sim DCOH_PIPE=1`` runs the same testbench longer.

Also shows that the comparison fails with this shadow: with ``SIM_BREAK=cmd_data`` the internal-cache BFM
returns a wrong line to the DCOH's ``cmd``, the RTL forwards it, and the run must stop on a data mismatch.

The batched testbench (tb/system_batch.py, the native Verilator driver) runs the same shadows from the
devices' records: clean, the same run for any K, and failing when a record is hidden from a shadow or the
caches' mirror is broken on purpose."""

from pathlib import Path

import pytest

from tb.run_system import DEFAULT_BATCH, PIPELINE_BATCH, build, run
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


# ---------------------------------------------------------------- the batched testbench
COMMIT_KINDS = ("access", "completion", "response", "snoop_c", "snoop_lane", "snoop_probe", "back_invalidation")


@pytest.fixture(scope="module")
def native_pipelined():
    runner, build_dir, _ = build("verilator", 2, BUILD, batched=True, pipelined_dcoh=True)
    return runner, build_dir


def _batched(native_pipelined, tmp_path, name, transactions=400, seed=SEED, **kw):
    runner, build_dir = native_pipelined
    return run(runner, build_dir, None, seed, transactions, tmp_path / f"{name}.json", **kw)


def test_pipelined_batched_system_is_clean_and_the_same_for_any_k(native_pipelined, tmp_path):
    from test_system_batch import SAME
    out = {}
    for name, kw in (("k2", dict(batch=2)), ("k9", dict(batch=DEFAULT_BATCH)),
                     ("k4_pipelined", dict(batch=PIPELINE_BATCH, pipeline=True))):
        s = _batched(native_pipelined, tmp_path, name, **kw)
        assert not s.get("violations"), f"seed {SEED} {name}: {s.get('error')} (reproduce: make sim " \
                                        f"SEED={SEED} DEVICES=2 TRANSACTIONS=400 DCOH_PIPE=1)"
        assert s["transactions"] >= 400 and s["batch"]["late"] == 0, (name, s["transactions"], s["batch"])
        for kind in COMMIT_KINDS:           # the shadows followed every kind of commit
            assert s["commits"].get(kind, 0) > 0, (SEED, name, kind, s["commits"])
        assert s["snoops_behind_rsp"] > 0, f"seed {SEED} {name}: no snoop entered the link behind an H2D Rsp"
        assert not any(s["dispatch"].values()), s["dispatch"]       # (no serializing engine here)
        out[name] = s
    for name in ("k9", "k4_pipelined"):
        diff = [key for key in SAME + ("commits",) if out["k2"].get(key) != out[name].get(key)]
        assert not diff, f"seed {SEED}: K=2 and {name} differ in {diff}"


@pytest.mark.parametrize("broken, words", [("freed", ("cache", "CQID", "line")), ("mirror", ("cache",)),
                                           ("flit", ("flit breaks a link rule", "CRC"))])
def test_pipelined_batched_checks_fail_on_a_broken_input(native_pipelined, tmp_path, monkeypatch, broken, words):
    """``freed``: one completion hidden from a shadow; its next step on that CQID or line must disagree."""
    monkeypatch.setenv("SIM_BREAK", broken)
    s = _batched(native_pipelined, tmp_path, "broken")
    assert s.get("violations") == 1, f"SIM_BREAK={broken} went unnoticed"
    assert f"seed {SEED}" in s["error"] and any(w in s["error"] for w in words), s["error"]


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


@pytest.mark.slow        # make regress: make sim's size, and the edges, at the batched testbench's speed
@pytest.mark.parametrize("seed", [1, 2])
def test_pipelined_batched_four_devices(tmp_path, seed):
    runner, build_dir, _ = build("verilator", 4, BUILD, batched=True, pipelined_dcoh=True)
    s = run(runner, build_dir, None, seed, 20000, tmp_path / "s.json", batch=DEFAULT_BATCH)
    assert not s.get("violations"), f"seed {seed}: {s.get('error')} (reproduce: make sim SEED={seed} DCOH_PIPE=1)"
    assert s["transactions"] >= 20000


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EDGES))
def test_pipelined_batched_at_work_table_and_tracker_edges(name, tmp_path):
    """The edges above, 4 devices x 3 000 transactions: the work table full, back-invalidations waiting for a
    second CQID, every message still compared one for one."""
    runner, build_dir, _ = build("verilator", 4, ROOT / "build" / f"sim_{name}", dcoh=EDGES[name], batched=True,
                                 pipelined_dcoh=True)
    s = run(runner, build_dir, None, SEED, 3000, tmp_path / "s.json", host="host_dir=exact")
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')}"
    assert s["transactions"] >= 3000
    assert s["counters"]["work_peak"] == EDGES[name]["work"], s["counters"]
    assert s["commits"].get("back_invalidation", 0) > 0, s["commits"]


@pytest.mark.slow
def test_pipelined_batched_slow_caches(tmp_path):
    """Slow internal caches (tb/rtl_caches.py ``stall_bits=3``), 4 devices, 20 000 transactions: snoops taken
    while the caches hold the engine up (its snoop path goes on beside a waiting command)."""
    runner, build_dir, _ = build("verilator", 4, BUILD / "cache-stall3", batched=True, cache_stall=3,
                                 pipelined_dcoh=True)
    s = run(runner, build_dir, None, SEED, 20000, tmp_path / "slow.json", batch=DEFAULT_BATCH)
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')}"
    assert s["transactions"] >= 20000
    assert s["snoops_while_held"] > 0, f"seed {SEED}: no snoop was taken while the caches held the DCOH up"
