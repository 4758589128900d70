"""`make report` (models/report.py) and the CXL.cache timing model under it (models/cxl_timing.py):
results.json keeps the keys the issue fixes, every parameter has a source, the report is reproducible
from its seed, and the CXL timing agrees with the golden model and keeps its invariants.

Ref: docs/sources.md §2.7 (1.079 ns per 68B flit, 63.0 GB/s), §4.1 (simulator defaults used as port,
interconnect and home-agent latencies), §1.6 (4096 CQIDs).
"""

import json
import math
import re
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cxl.messages import Channel
from models import cxl_timing as C
from models import fabric_params as FP
from models import rdma as R
from models.link import Msg
from models import report
from models.config import Config
from models.flit import efficiency
from models.nvlink_polling import NvlinkParams
from models.pcie_polling import PcieParams

COMPARISON_MD = Path(__file__).resolve().parent.parent / "docs" / "comparison.md"

SMALL = 8          # samples for report runs in tests (each run takes a few seconds)
REQUIRED = {"sync_p50_ns", "sync_p99_ns", "atomics_mops", "bandwidth_gbs", "payload_efficiency"}


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    out = tmp_path_factory.mktemp("report_a")
    res = report.build(str(out), seed=1, samples=SMALL, plots=True)
    return out, res


# ---------------------------------------------------------------- results.json and report.md
def test_results_json_has_the_required_keys(run_a):
    out, _ = run_a
    res = json.loads((out / "results.json").read_text())
    for side in ("cxl", "rdma"):
        assert REQUIRED <= set(res[side]), f"{side} lacks {REQUIRED - set(res[side])}"
        for k in REQUIRED:
            assert isinstance(res[side][k], (int, float)) and res[side][k] > 0
    assert res["parameters"]
    for name, v in res["parameters"].items():
        assert set(v) >= {"value", "unit", "source"}, name
        assert v["source"].strip(), f"{name} has no source"


def test_every_default_parameter_has_a_source(run_a):
    _, res = run_a
    names = set(res["parameters"])
    for f in fields(C.CxlParams):
        assert f"cxl.{f.name}" in names
    for f in fields(R.RdmaParams):
        assert f"rdma.{f.name}" in names
    for f in fields(PcieParams):
        assert f"pcie_host_polling.{f.name}" in names
    for f in fields(NvlinkParams):
        assert f"nvlink_polling.{f.name}" in names
    listed = set(re.findall(r"^\| \[(P\d+)\] \|", COMPARISON_MD.read_text(), re.M))
    for k, v in res["parameters"].items():
        src = v["source"].lower()
        assert re.search(r"facts §\d|article|assumption|derived|golden model|pytorch|model time|\[p\d+\]", src), \
            f"{k}: source names neither the facts, the article, a listed source, nor says 'assumption': {v['source']}"
        for ref in re.findall(r"\[(P\d+)\]", v["source"]):
            assert ref in listed, f"{k} cites [{ref}], which docs/comparison.md does not list"
    assert "measured by bench/dcoh_bench.py" in res["parameters"]["cxl.dcoh_cycles"]["source"]


def test_report_md_has_the_claims_table_plots_and_parameter_table(run_a):
    out, res = run_a
    md = (out / "report.md").read_text()
    assert "| metric | article CXL | article RDMA | model CXL | model RDMA | verdict |" in md
    for needle in ("152", "2700", "8.3", "0.9", "72", "38", "90-150", "3000-5000", "4096 B page", "0.92",
                   "0.57", "2.4"):
        assert needle in md, needle
    assert "| parameter | value | unit | source |" in md
    assert "What each article number would need" in md
    for png in ("latency_cdf.png", "throughput_vs_devices.png", "efficiency_vs_size.png", "sensitivity.png"):
        assert (out / png).stat().st_size > 1000
    assert len(res["claims"]) >= 9 and all(r["verdict"] for r in res["claims"])


def test_report_is_reproducible_from_its_seed(run_a, tmp_path):
    out, _ = run_a
    report.build(str(tmp_path / "b"), seed=1, samples=SMALL, plots=False)
    assert (tmp_path / "b" / "results.json").read_text() == (out / "results.json").read_text()
    # (that another seed gives other samples is checked on the samplers, in tests/test_rdma.py)


def test_makefile_has_a_report_target():
    mk = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    assert re.search(r"^report:", mk, re.M) and "models.report" in mk
    assert re.search(r"^\.PHONY:.*\breport\b", mk, re.M)


# ---------------------------------------------------------------- CXL timing against the golden model
# The golden model's own time base: its default latencies, and DCOH cycles as the golden model assumes
# them (probe and window from Config, no rx/tx pipeline) instead of the RTL's measured counts.
# The golden model has no home-agent occupancy, no link bandwidth limit and no jitter.
GOLDEN = C.CxlParams(port_ns=24 - 2 * C.FLIT_NS, interconnect_ns=0.0, host_ns=10.0, tick_ns=1.0,
                     dcoh_cycles={"probe": Config.probe_latency, "coalesce_window": Config.coalesce_window,
                                  "rx": 0, "tx": 0, "link": 0},
                     host_occupancy_ns=0.0, link_gbs=math.inf, jitter_ns=0.0)


def test_time_base_reproduces_the_golden_model_config():
    cfg = C.golden_config(GOLDEN, 4)
    d = Config()
    assert (cfg.link_latency, cfg.host_latency, cfg.probe_latency, cfg.coalesce_window) == \
        (d.link_latency, d.host_latency, d.probe_latency, d.coalesce_window)
    assert C.FLIT_NS == pytest.approx(1.079, abs=5e-4) and round(C.LINK_GBS, 1) == 63.0


def test_directed_flows_match_the_golden_models_message_counts():
    # RdShared miss: request up, GO + data down (host latency on the way back)
    assert C.read_miss_ns(GOLDEN) == 2 * 24 + 10
    # Writer's RdOwn over S copies: 4 hops, 2 host lookups, the readers' coalescing window + probe;
    # the same 122 cycles `make sim` reports as RdOwn p50 with default Config
    lat, wlat = C.sync_latencies(GOLDEN, 4, 5, seed=1)
    assert set(wlat) == {4 * 24 + 2 * 10 + 4 + 2}


def test_payload_efficiency_comes_from_models_flit():
    e = efficiency("streaming_reads", 1024)
    assert C.payload_efficiency() == (e["data_efficiency"], e["efficiency"])
    assert C.message_efficiency(64 * 64) == pytest.approx(64 * 64 / (68 * efficiency("streaming_writes", 64)["flits"]))


def test_dcoh_cycles_is_one_named_dict_and_validated():
    assert set(C.DCOH_CYCLES) == {"probe", "coalesce_window", "rx", "tx", "link"}
    rtl = json.loads(C.RTL_CYCLES_FILE.read_text())          # the RTL's measured counts feed the model
    assert C.DCOH_CYCLES["probe"] == rtl["snoop_hit_inv_latency"] + Config.probe_latency
    assert (C.DCOH_CYCLES["rx"], C.DCOH_CYCLES["tx"], C.DCOH_CYCLES["link"]) == \
        (rtl["rx_fill"], rtl["tx_miss"], rtl["link_one_way"])
    with pytest.raises(ValueError, match="dcoh_cycles"):
        C.CxlParams(dcoh_cycles={"probe": 1})
    with pytest.raises(ValueError, match="outstanding"):
        C.CxlParams(outstanding=5000)


cxl_params = st.builds(
    C.CxlParams,
    port_ns=st.floats(0, 120), interconnect_ns=st.floats(0, 30), host_ns=st.floats(0, 80),
    clock_mhz=st.sampled_from([500.0, 1000.0, 2000.0]),
    dcoh_cycles=st.fixed_dictionaries({"probe": st.integers(0, 8), "coalesce_window": st.integers(0, 8),
                                       "rx": st.integers(0, 8), "tx": st.integers(0, 8),
                                       "link": st.integers(0, 8)}),
    spin_ns=st.floats(1, 50), tick_ns=st.just(0.5),
)


def _ticks_ns(p):
    cfg = C.golden_config(p, 2)
    t = p.tick_ns
    return (cfg.link_latency * t, cfg.host_latency * t, (cfg.probe_latency + cfg.coalesce_window) * t)


@settings(max_examples=15)
@given(cxl_params, st.integers(2, 5), st.integers(0, 1000))
def test_cxl_sync_latency_is_at_least_the_sum_of_its_fixed_parts(p, n, seed):
    # A reader sees the new value only after: the writer's RdOwn (hop), SnpInv to it (host + hop) and its
    # invalidation (DCOH), the reader's RdShared reaching the host after the writer's GO has left it,
    # SnpData to the writer (host + hop), the M data back (DCOH + hop), and the data to the reader
    # (host + hop): at least 6 hops, 3 host lookups and 2 DCOH snoop services.
    hop, host, dcoh = _ticks_ns(p)
    lat, wlat = C.sync_latencies(p, n, 3, seed=seed)
    floor = 6 * hop + 3 * host + 2 * dcoh
    assert min(lat) >= floor - 1e-9
    assert min(wlat) >= 4 * hop + 2 * host + dcoh - 1e-9


@settings(max_examples=10)
@given(cxl_params, st.integers(2, 6))
def test_cxl_atomics_never_exceed_one_handoff_per_host_snoop_round_trip(p, n):
    hop, host, dcoh = _ticks_ns(p)
    x = C.atomic_throughput(p, n, ops=60, seed=1)
    assert x <= 1e9 / (2 * hop + host + dcoh) * (1 + 1e-9)


@given(cxl_params, st.integers(1, 4096))
def test_cxl_bulk_never_exceeds_the_link_rate(p, outstanding):
    q = p.with_(outstanding=outstanding)
    b = C.bulk_bandwidth(q, read_ns=2 * C.hop_ns(q) + q.host_ns)
    assert 0 < b["gbs"] <= C.LINK_GBS * (64 / 68)
    assert b["gbs"] <= q.host_mem_gbs and b["gbs"] <= outstanding * 64 / b["read_rtt_ns"] + 1e-9


@given(st.integers(1, 1 << 16), st.integers(1, 1 << 16))
def test_cxl_wire_bytes_are_monotonic_in_size(a, b):
    a, b = min(a, b), max(a, b)
    wire = lambda n: n / C.message_efficiency(n)
    assert wire(a) <= wire(b) + 1e-6
    assert C.message_efficiency(b) <= 64 / 68


# ---------------------------------------------------------------- the four fabrics in results.json
FABRIC_KEYS = {"sync_p50_ns", "sync_p99_ns", "flag_round_trip_p50_ns", "atomics_mops", "bandwidth_gbs"}


def test_results_json_has_every_fabric_with_its_five_figures(run_a):
    out, _ = run_a
    res = json.loads((out / "results.json").read_text())
    assert set(res["fabrics"]) == {"cxl", "rdma", "pcie_host_polling", "nvlink_polling"}
    for name, figs in res["fabrics"].items():
        assert set(figs) == FABRIC_KEYS, name
        assert all(isinstance(v, (int, float)) and v > 0 for v in figs.values()), name
        assert figs["sync_p50_ns"] <= figs["sync_p99_ns"]
        sp = res["fabric_spread"][name]
        assert all(sp[k][0] <= sp[k][1] <= sp[k][2] for k in sp), name
    # the CXL and RDMA entries are the same runs as the headline figures
    for side in ("cxl", "rdma"):
        for k in ("sync_p50_ns", "sync_p99_ns", "atomics_mops", "bandwidth_gbs"):
            assert res["fabrics"][side][k] == pytest.approx(res[side][k], rel=1e-3), (side, k)
    assert (out / "fabrics.png").stat().st_size > 1000
    assert res["preset"] == "measured" and res["overrides"] == {}


def test_the_verdict_table_names_fabrics_and_regimes_for_every_claim(run_a):
    out, res = run_a
    rows = res["fabric_verdicts"]
    titles = [r["claim"] for r in rows]
    for needle in ("152 ns", "2.7 µs", "8.3 M/s", "0.9 M/s", "72 GB/s", "38 GB/s", "0.9 s", "2.4 s"):
        assert any(needle in t for t in titles), needle
    labels = {"CXL.cache", "RDMA WRITE + polling", "PCIe host polling", "NVLink polling"}
    for r in rows:
        assert set(r["holds_on"]) <= labels and set(r["holds_on"]) <= set(r["checked_on"])
        # a claim that holds nowhere it is checked says what would make it hold
        if set(r["holds_on"]) != set(r["checked_on"]):
            assert r["would_need"], r["claim"]
    # the table's holds_on agrees with the figures: NVLink is the one fabric above 72 GB/s
    bw = next(r for r in rows if r["claim"].startswith("CXL bandwidth"))
    assert "NVLink polling" in bw["holds_on"] and "RDMA WRITE + polling" not in bw["holds_on"]
    md = (out / "report.md").read_text()
    assert "## Verdict per claim: which fabric, which regime" in md and "## Four fabrics" in md


def test_a_preset_changes_only_what_it_names(tmp_path):
    p = FP.load(preset="simulator")
    assert (p.cxl.port_ns, p.cxl.interconnect_ns) == (62.0, 15.0)
    assert p.overrides() == {"cxl": {"port_ns": 62.0, "interconnect_ns": 15.0}}
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"preset": "nvl-pair", "pcie_host_polling": {"rtt_min_ns": 400, "rtt_max_ns": 600},
                             "cxl": {"link_gbs": "inf"}}))
    q = FP.load(str(f))
    assert q.preset == "nvl-pair" and q.nvlink_polling.links == 12
    assert (q.pcie_host_polling.rtt_min_ns, q.pcie_host_polling.rtt_max_ns) == (400.0, 600.0)
    assert math.isinf(q.cxl.link_gbs) and q.cxl.port_ns == C.CxlParams().port_ns


@pytest.mark.parametrize("content, key", [
    ({"cxl": {"port_nss": 1.0}}, "cxl.port_nss"),
    ({"cxl": {"port_ns": "fast"}}, "cxl.port_ns"),
    ({"cxl": {"port_ns": -5}}, "cxl.port_ns"),
    ({"nvlink_polling": {"links": 2.5}}, "nvlink_polling.links"),
    ({"pcie_host_polling": {"rtt_min_ns": 900}}, "pcie_host_polling.rtt_min_ns"),
    ({"rdma": {"mps": 100}}, "rdma.mps"),
    ({"rdma": [1, 2]}, "rdma"),
    ({"infiniband": {}}, "infiniband"),
    ({"preset": "fastest"}, "preset"),
])
def test_bad_parameter_files_give_a_clear_error_naming_the_key(tmp_path, content, key):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(content))
    with pytest.raises(FP.ParamError) as e:
        FP.load(str(f))
    assert str(e.value).startswith(f"{f}: {key}")


def test_unreadable_or_malformed_parameter_files_are_named(tmp_path, capsys):
    with pytest.raises(FP.ParamError, match="cannot read"):
        FP.load(str(tmp_path / "missing.json"))
    f = tmp_path / "broken.json"
    f.write_text("{\"cxl\": {")
    with pytest.raises(FP.ParamError, match="not valid JSON"):
        FP.load(str(f))
    # the command line turns it into a usage error, before anything runs
    with pytest.raises(SystemExit):
        report.main(["--out", str(tmp_path / "r"), "--params", str(f)])
    assert "broken.json: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_makefile_passes_report_args():
    mk = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    assert re.search(r"^REPORT_ARGS\s*\?=", mk, re.M) and "$(REPORT_ARGS)" in mk


# ---------------------------------------------------------------- CXL timing: occupancy, bandwidth, jitter
BARE = dict(jitter_ns=0.0, host_occupancy_ns=0.0, spin_ns=0.25, interconnect_ns=0.0, port_ns=40.0)


def test_timed_links_without_costs_are_the_golden_models_links():
    # "unloaded": no occupancy, no bandwidth limit, no jitter -> the same run as the plain golden model
    p = C.CxlParams(**C.PRESETS["unloaded"])
    timed = C.GoldenSim(C.golden_config(p, 4), p)
    plain = C.GoldenSim(C.golden_config(p, 4))
    assert isinstance(timed.sys.links[0], C.TimedLink) and not isinstance(plain.sys.links[0], C.TimedLink)
    for sim in (timed, plain):
        sim.issue(0, "load", C.FLAG)
        sim.settle()
    assert timed.now == plain.now > 0


def test_doubling_the_port_latency_raises_the_cxl_round_trips_by_their_hop_count():
    a, b = C.CxlParams(**BARE), C.CxlParams(**dict(BARE, port_ns=80.0))
    # a read miss: request up, data down
    assert C.read_miss_ns(b) - C.read_miss_ns(a) == pytest.approx(2 * 40.0)
    # the flag ping-pong: 6 one-way hops each way (RdOwn, SnpInv, RspI, GO; RdShared, SnpData, data...
    # of which 6 lie on the critical path per direction)
    ra, rb = C.flag_round_trips(a, 3, seed=1), C.flag_round_trips(b, 3, seed=1)
    assert [y - x for x, y in zip(ra, rb)] == pytest.approx([12 * 40.0] * 3)
    # and doubling the home agent's lookup: 3 lookups each way
    h = C.CxlParams(**dict(BARE, host_ns=90.0))
    assert C.flag_round_trips(h, 1, seed=1)[0] - ra[0] == pytest.approx(6 * 45.0)


def test_home_agent_occupancy_queues_the_hosts_messages():
    p = C.CxlParams(**dict(BARE, host_occupancy_ns=10.0))
    sim = C.GoldenSim(C.golden_config(p, 3), p)
    home = sim.sys.links[0].home
    assert all(link.home is home for link in sim.sys.links)          # one agent for every device
    starts = [home.start(0) for _ in range(4)]
    assert starts == [0, 40, 80, 120]                                # 10 ns = 40 ticks apart
    # and the fan-out of the sync workload waits for it: 7 snoops and 7 data responses queue
    q = C.CxlParams(**BARE)
    assert max(C.sync_latencies(p, 8, 3)[0]) > max(C.sync_latencies(q, 8, 3)[0]) + 7 * 10.0


def test_the_wire_carries_one_message_at_a_time_per_direction():
    p = C.CxlParams(**dict(BARE, link_gbs=C.wire_bytes(Channel.H2D_DATA) / 10.0))   # 10 ns per line
    link = C.TimedLink(C.golden_config(p, 1), p, C.random.Random(1), C._HomeAgent(0))
    for k in range(4):
        link.send(Msg(Channel.H2D_DATA, None, k, 0x40, data=k), 0)
    due = [e[0] for e in link.flight[False]]
    assert [b - a for a, b in zip(due, due[1:])] == [40, 40, 40]     # 10 ns = 40 ticks
    assert C.wire_bytes(Channel.D2H_REQ) == 68 / 4 and C.wire_bytes(Channel.D2H_DATA) > 64


@settings(max_examples=20)
@given(st.floats(0.5, 40.0), st.integers(0, 1000))
def test_jitter_stays_within_its_bound_and_is_reproducible(jitter, seed):
    p = C.CxlParams(**dict(BARE, jitter_ns=jitter))
    q = C.CxlParams(**BARE)
    base = C.flag_round_trips(q, 2, seed=seed)
    got = C.flag_round_trips(p, 2, seed=seed)
    assert got == C.flag_round_trips(p, 2, seed=seed)
    # at most 12 hops on the critical path each take the whole jitter (+ spin phase and a tick of rounding)
    for g, b in zip(got, base):
        assert b - 1e-9 <= g <= b + 12 * (jitter + p.tick_ns) + p.spin_ns + 1e-9


@given(cxl_params, st.floats(1.0, 200.0))
def test_cxl_bulk_never_exceeds_its_link_rate(p, gbs):
    q = p.with_(link_gbs=gbs)
    b = C.bulk_bandwidth(q, read_ns=2 * C.hop_ns(q) + q.host_ns)
    assert 0 < b["gbs"] <= gbs * 64 / 68 + 1e-9


def test_the_measured_hop_is_half_the_measured_cxl_load_penalty():
    p = C.CxlParams()
    assert C.hop_ns(p) == pytest.approx(sum(C.MEASURED_ADDED_LOAD_NS) / 4, abs=1e-2)
    assert C.CxlParams(**C.PRESETS["simulator"]).port_ns == 62.0
    with pytest.raises(ValueError, match="jitter_ns"):
        C.CxlParams(jitter_ns=-1.0)
    with pytest.raises(ValueError, match="link_gbs"):
        C.CxlParams(link_gbs=0.0)


def test_finite_host_directory_costs_one_back_invalidation_on_a_full_set():
    """models.report.host_directory_effect: a read miss into a full set of the finite host directory waits
    for one back-invalidation, at least a snoop round trip more than a read with a free way."""
    from models.report import host_directory_effect
    hd = host_directory_effect(C.CxlParams(), "4x2")
    assert hd["back_invalidations"] == 1
    assert hd["read_miss_full_set_ns"] >= hd["read_miss_free_way_ns"] + hd["snoop_round_trip_ns"]
    with pytest.raises(ValueError, match="SETSxWAYS"):
        host_directory_effect(C.CxlParams(), "4x3")
