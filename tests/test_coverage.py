"""Coverage against its denominator (models/coverage.py): the universes come from the defining tables, and a
run's closure counts hits, holes and keys outside the universe correctly."""

from models import coverage as cov
from models.config import Config
from cxl.coherence import REQUEST_START, RESPONSE_TABLE, SNOOP_TABLE
from models.system import run


def test_universe_is_the_declared_transitions():
    u = cov.state_event_universe()
    assert len(u) == len(SNOOP_TABLE) + len(REQUEST_START) + len(RESPONSE_TABLE)
    assert {"M / SnpInv", "I / RdShared", "IS_AD / GO-S", "IS_D / SnpData"} <= u


def test_closure_counts_hits_holes_and_outsiders():
    u = {"a", "b", "c"}
    r = cov.closure({"a": 3, "b": 0, "x": 1}, u)
    assert r == {"hit": 1, "total": 3, "holes": ["b", "c"], "outside": ["x"]}


def test_model_run_hits_only_declared_pairs_and_counts_request_starts():
    """A golden-model run (models.system.run, as `make model`): every (state, event) its devices count is
    declared, request starts are counted, and the summary's closure agrees with its counts."""
    s = run(Config(devices=2), transactions=400, seed=5)
    c = s["coverage"]["closure"]["state_event"]
    assert c["outside"] == [], c["outside"]
    assert c["hit"] == len(s["coverage"]["state_event"]) >= 20
    assert {"I / RdShared", "I / RdOwn"} <= set(s["coverage"]["state_event"])
    assert c["total"] == len(cov.state_event_universe()) and len(c["holes"]) == c["total"] - c["hit"]


def test_closure_report_of_flits():
    flits = {"upstream H0": 2, "upstream G0": 5, "downstream control LLCRD": 1, "upstream all-data": 1}
    r = cov.closure_report({}, flits)
    assert r["slot_formats"]["hit"] == 2
    assert "upstream protocol" not in r["flit_kinds"]["holes"]
    assert "downstream protocol" in r["flit_kinds"]["holes"]
    assert r["flit_kinds"]["outside"] == [] and r["slot_formats"]["outside"] == []


def test_host_behaviour_reaches_the_snoop_filter_miss_path_of_every_snoop_class():
    """With the default host (finite directory, its own traffic snooping every device) each snoop class
    reaches devices that do not hold the line (state I: the DCOH's snoop-filter-miss answer) in a plain
    timed run; the exact directory without host traffic sends none there (only races could)."""
    miss = {"I / SnpData", "I / SnpInv", "I / SnpCur"}
    s = run(Config(devices=2), transactions=2000, seed=5)
    assert miss <= set(s["coverage"]["state_event"]), sorted(miss - set(s["coverage"]["state_event"]))
    assert s["host"]["back_invalidations"] > 0 and s["host"]["host_read_current"] > 0
    old = run(Config(devices=2, host_dir="exact", host_traffic=0), transactions=2000, seed=5)
    assert not miss & set(old["coverage"]["state_event"])


def test_union_of_model_runs_covers_each_run():
    cfgs = [(Config(devices=2), ""), (Config(devices=2, clean_evict_pull=1), "clean_evict_pull=1")]
    r = cov.model_union(cfgs, [1, 2], 400)
    assert len(r["runs"]) == 4 and r["hit"] >= max(x["hit"] for x in r["runs"])
    assert r["hit"] + len(r["holes"]) == r["total"] and r["outside"] == []
