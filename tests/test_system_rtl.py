"""The cocotb system testbench's short profile (make test): RTL devices under the golden host on
Icarus, every message and cache compared with the shadow golden model.  The long runs are
``make sim`` (4 devices, 20k transactions) and ``make regress`` (>= 10^6 transactions over seeds).

Also shows that the scoreboard can fail: with ``SIM_BREAK=cmd_data`` the internal-cache BFM returns
a wrong line to the DCOH's ``cmd`` (as a corrupted datapath would), the RTL forwards it, and the run
must stop on a data mismatch naming its seed.

Access traces replayed with the RTL's timing (``system_trace``): the races of tests/test_races.py, and
the traces Hypothesis found on the golden model (tb/traces/hypothesis.json, written by
``python -m tb.hypothesis_traces``).  The first few of each replay in make test, the others in
make regress (``pytest -m slow``)."""

import re
from pathlib import Path

import pytest

from tb.run_system import build, run
from tb.run_system import main as run_system_main
from tb.system_top import parse_dcoh
from tb.seed import env_seed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"          # shares the converted Verilog with make sim
SEED = env_seed(3)
# The broken-RTL run is a check of the scoreboard, not a random test: a seed known to reach the corrupted
# line in 400 transactions, whatever SEED says.
BREAK_SEED = 3


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


# The data-before-GO transitions and the snoops held while a GO'd read waits for its data: the RTL link
# gives the H2D Rsp and Data channels no order, so these are reached only because the testbench lets a GO
# wait for the data the host sent first, and keeps the lag the host gives late data (tb/system_tb.py
# DeviceSide._next_h2d).  Fractions raised from the defaults so that a short run takes them.
_REORDER_HOST = "host_data_first=0.5,host_data_late=0.5,host_data_lag=200,host_traffic=0.3"
_DATA_FIRST = {"IS_AD / Data", "IM_AD / Data"}
_HELD_FOR_DATA = {f"{s} / {e}" for s in ("IS_D", "IM_D", "SM_D") for e in ("SnpData", "SnpInv", "SnpCur")}


def test_system_rtl_takes_data_before_go_and_holds_snoops_for_late_data(icarus_system, tmp_path):
    runner, build_dir, params = icarus_system
    s = run(runner, build_dir, params, SEED, 100, tmp_path / "summary.json", think=2, host=_REORDER_HOST)
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')} (reproduce: make sim SEED={SEED} DEVICES=2 " \
                                    f"HOST={_REORDER_HOST})"
    assert s["host"]["data_first"] > 0 and s["host"]["data_late"] > 0, s["host"]
    hit = set(s["coverage"]["state_event"])
    assert _DATA_FIRST & hit, f"seed {SEED}: no read took its data before its GO: {sorted(hit)}"
    assert _HELD_FOR_DATA & hit, f"seed {SEED}: no snoop reached a read waiting for late data: {sorted(hit)}"


def test_system_scoreboard_catches_a_corrupted_line(icarus_system, tmp_path, monkeypatch):
    catches_a_corrupted_line(icarus_system, tmp_path, monkeypatch)


def catches_a_corrupted_line(system, tmp_path, monkeypatch):
    """``SIM_BREAK=cmd_data`` on the built ``system``: the run stops on a data mismatch naming its seed."""
    runner, build_dir, params = system
    monkeypatch.setenv("SIM_BREAK", "cmd_data")
    s = run(runner, build_dir, params, BREAK_SEED, 400, tmp_path / "summary.json", think=2)
    assert s.get("violations") == 1, "a corrupted line reached the host unnoticed"
    assert f"seed {BREAK_SEED}" in s["error"] and ("data" in s["error"] or "cache" in s["error"]), s["error"]


def test_system_flit_checker_catches_a_bad_flit(icarus_system, tmp_path, monkeypatch):
    """The flit monitor runs in its own process (tb/flit_checker.py): a flit it sees with a wrong CRC must
    still fail the run, naming the flit's cycle, device and wire."""
    runner, build_dir, params = icarus_system
    monkeypatch.setenv("SIM_BREAK", "flit")
    s = run(runner, build_dir, params, BREAK_SEED, 30, tmp_path / "summary.json", think=2)
    assert s.get("violations") == 1, "a flit with a bad CRC went unnoticed"
    assert f"seed {BREAK_SEED} cycle " in s["error"] and "dev0: downstream flit breaks a link rule" in s["error"] \
        and "CRC" in s["error"], s["error"]


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


def _replay(icarus_system, tmp_path, traces):
    """Replays each trace on the Icarus system (``system_trace``), one simulation each: a reset does
    not clear the SF memory.  Returns the summaries."""
    import json
    runner, build_dir, params = icarus_system
    out = []
    for t in traces:
        path = tmp_path / f"{t['name']}.json"
        path.write_text(json.dumps({"name": t["name"], "ops": t["ops"]}))
        s = run(runner, build_dir, params, SEED, 0, tmp_path / "summary.json", think=2,
                testcase="system_trace", trace=path)
        assert not s.get("violations"), s.get("error")
        assert s["trace"] == t["name"] and s["transactions"] >= 1, f"{t['name']}: no request reached the host"
        out.append(s)
    return out


# make test has little time left under its 10-minute limit (~6 s per replay): the first few traces of
# each kind replay there, the others in make regress (pytest -m slow).
QUICK_RACES, QUICK_HYPOTHESIS = 3, 1


def test_system_replays_the_race_traces(icarus_system, tmp_path):
    traces = _race_traces()
    assert len(traces) >= 5
    _replay(icarus_system, tmp_path, traces[:QUICK_RACES])


@pytest.mark.slow
def test_system_replays_the_other_race_traces(icarus_system, tmp_path):
    _replay(icarus_system, tmp_path, _race_traces()[QUICK_RACES:])


# ---------------------------------------------------------------- traces found by Hypothesis
HYPOTHESIS_TRACES = ROOT / "tb" / "traces" / "hypothesis.json"     # python -m tb.hypothesis_traces


def _hypothesis_traces():
    import json
    traces = json.loads(HYPOTHESIS_TRACES.read_text())
    assert traces, f"{HYPOTHESIS_TRACES} is empty"
    return traces


def _check_trace(t, devices=2):
    """A trace is valid ``system_trace`` input for the RTL system: dev/cache in range, kinds the
    cache port takes, every write a distinct value."""
    from models.dcoh import CpuOp
    from tb.system_top import DEFAULT_DCOH
    assert t["name"] and t["ops"]
    writes = []
    for d, k, kind, line, value, variant in t["ops"]:
        assert 0 <= d < devices and 0 <= k < DEFAULT_DCOH["caches"], (t["name"], d, k)
        assert kind in CpuOp.KINDS and variant in (0, 1) and line >= 0, (t["name"], kind, variant, line)
        if kind in ("store", "itomwr", "wrinv"):
            writes.append(value)
    assert len(set(writes)) == len(writes), f"{t['name']}: a value written twice"


def test_hypothesis_trace_generator_works(tmp_path):
    """The generator (tb/hypothesis_traces.py) with a tiny budget: it runs, it is reproducible, and
    what it writes is valid input for system_trace; so is the committed file."""
    import json
    from tb import hypothesis_traces as ht
    out = tmp_path / "h.json"
    chosen, found = ht.generate(examples=15, seed=7, keep=3, out=out)
    assert len(found) >= 5 and 1 <= len(chosen) <= 3
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(chosen))
    assert len({t["name"] for t in written}) == len(written)
    for t in written:
        _check_trace(t)
        assert ht.run_trace(t["ops"], ht.config())["coverage"] == t["coverage"]   # the model agrees
    assert ht.generate(examples=15, seed=7, keep=3)[0] == chosen               # same seed, same traces
    for t in _hypothesis_traces():
        _check_trace(t)


def test_system_replays_hypothesis_traces(icarus_system, tmp_path):
    """The first trace of tb/traces/hypothesis.json (the widest (state, event) coverage) on the RTL
    system; the others: the slow test below."""
    _replay(icarus_system, tmp_path, _hypothesis_traces()[:QUICK_HYPOTHESIS])


@pytest.mark.slow
def test_system_replays_the_other_hypothesis_traces(icarus_system, tmp_path):
    _replay(icarus_system, tmp_path, _hypothesis_traces()[QUICK_HYPOTHESIS:])


@pytest.mark.slow
def test_system_fails_at_once_on_a_dead_link(tmp_path):
    """Every flit corrupted (BER 0.02): a link end gives up after its retry limit, and the testbench stops
    in that cycle naming the end and the cause (the RTL's ``error`` status bit), not on the watchdog
    (20 000 cycles without a finished transaction)."""
    runner, build_dir, params = build("icarus", 1, ROOT / "build" / "sim_ber", ber=0.02)
    s = run(runner, build_dir, params, 1, 50, tmp_path / "summary.json", flit_monitor=False)
    assert s.get("violations") == 1, "a dead link went unnoticed"
    assert "RTL error" in s["error"] and "RETRY_LIMIT" in s["error"] and s["cycles"] < 10000, s["error"]


# The system at the edges of the snoop filter's sizes (the defaults are 16 sets x 2 ways, whose pseudo-LRU
# is one bit): one set of 4 ways, two of 8, so that the tree's inner nodes choose the victims and the
# snoop filter overflows all the time; the shadow has the same sizes, so every message is still compared.
# The host's directory is exact here: a finite one of the devices' geometry (the default) evicts first and
# leaves the devices' own filters few victims to choose.
SF_EDGES = {"sf1x4": dict(sf_sets=1, sf_ways=4), "sf2x8": dict(sf_sets=2, sf_ways=8)}


@pytest.mark.slow        # ~1 min each: a Verilog conversion and an Icarus build per size (make regress)
@pytest.mark.parametrize("name", sorted(SF_EDGES))
def test_system_at_snoop_filter_edges(name, tmp_path):
    runner, build_dir, params = build("icarus", 2, ROOT / "build" / f"sim_{name}", dcoh=SF_EDGES[name])
    s = run(runner, build_dir, params, SEED, 150, tmp_path / "summary.json", host="host_dir=exact")
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')}"
    # the edge was reached: snoop-filter victims (back-invalidation work) again and again
    assert s["dispatch"].get("WORK", 0) >= 50, (SEED, s["dispatch"])


# The system at the edges of the work table and the tracker (the defaults are 8 and 16): the RTL holds a
# snoop that needs a work entry while all are in use, and a rescan that needs one for a back-invalidation
# (or a second CQID) waits.  The shadow has the same sizes (Config.work_entries, max_outstanding), so it
# holds and waits exactly there, and every message is still compared one for one.
# With seed 3 the first run parts from a shadow with no work limit at a snoop the RTL holds (cycle 388),
# the second at a back-invalidation the RTL's rescan cannot start (cycle 603: another CQID).
WORK_EDGES = {"work1-tracker2": dict(work=1, tracker=2),
              "work1-tracker3-sf1x4": dict(work=1, tracker=3, sf_sets=1, sf_ways=4)}


@pytest.mark.slow        # ~1 min each (make regress)
@pytest.mark.parametrize("name", sorted(WORK_EDGES))
def test_system_at_work_table_and_tracker_edges(name, tmp_path):
    edge = WORK_EDGES[name]
    runner, build_dir, params = build("icarus", 2, ROOT / "build" / f"sim_{name}", dcoh=edge)
    s = run(runner, build_dir, params, SEED, 150, tmp_path / "summary.json", host="host_dir=exact")
    assert not s.get("violations"), f"seed {SEED}: {s.get('error')}"
    assert s["counters"]["work_peak"] == edge["work"], s["counters"]      # the shadows filled the table
    # ... and the limit mattered: a shadow with none parts from the RTL (a snoop the RTL held, or an access
    # that waited, for a full work table)
    s = run(runner, build_dir, params, SEED, 150, tmp_path / "unbounded.json",
            host="host_dir=exact,work_entries=0")
    assert s.get("violations") == 1 and f"seed {SEED}" in s["error"], (SEED, s.get("error"))


def test_dcoh_parameters_on_the_command_line(capsys):
    """``make sim DCOH=...``: names and integer values are checked before anything is built, and each bad
    one is named (a good set goes to build(), which the edge runs above use)."""
    assert parse_dcoh(" work=1, tracker=2 ") == {"work": 1, "tracker": 2} and parse_dcoh("") == {}
    for text, named in (("wrk=1", "'wrk=1'"), ("work=x", "work='x'"), ("work", "'work'")):
        with pytest.raises(ValueError, match=re.escape(named)):
            parse_dcoh(text)
        with pytest.raises(SystemExit):
            run_system_main(["--dcoh", text, "--transactions", "1"])
        assert f"--dcoh: {named}" in capsys.readouterr().err
