"""The pipelined DCOH's response path (hdl/dcoh/pipe/response_path.py) against the golden device.

tb/response_path.py: the model issues requests from preloaded lines, the RTL starts the same ones, the
bench plays the host with random legal response sequences, and every D2H Data, every ``cpu_rsp``, the
snoop filter, the caches and the tracker are compared.
"""

import pytest

from cxl.messages import Channel, GOState, H2DRspOpcode
from hdl.dcoh.encodings import ErrorKind
from hdl.dcoh.pipe.response_path import ResponsePath
from models.link import Msg
from tb.response_path import ResponsePathBench

READS = ("load", "store", "upgrade")

CASES = {
    # name: (bench parameters, run parameters)
    "defaults": (dict(), dict()),
    "reads": (dict(kinds=READS), dict()),
    "slow_ports": (dict(), dict(p_in=0.6, p_sink=0.4, cmd_delay=3)),
    "reads_slow": (dict(kinds=READS), dict(p_sink=0.3, cmd_delay=4)),
    "two_entries_one_cache": (dict(caches=1, tracker=2), dict(p_sink=0.5)),
    "direct_mapped": (dict(sf_ways=1, sf_sets=64), dict()),
    "eight_ways": (dict(sf_ways=8, sf_sets=8, caches=4), dict(p_sink=0.7)),
    "many_requests": (dict(caches=16, tracker=64, n_lines=64), dict(p_in=0.9, p_sink=0.8, cmd_delay=1)),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_response_path_matches_the_golden_device(case, seed):
    bench_kw, run_kw = CASES[case]
    bench = ResponsePathBench(seed=seed, **bench_kw)
    out = bench.run(**run_kw)
    assert out["errors"] == 0
    assert len(out["commit_cycles"]) == out["events"] > 0


def test_responses_stream_at_one_a_cycle():
    """With every port taking at once, C applies a message every cycle (no store needs its peers
    invalidated here: those wait for the caches' answer)."""
    bench = ResponsePathBench(seed=5, caches=32, tracker=64, n_lines=96,
                              kinds=("load", "load", "store", "evict", "itomwr", "wrinv", "back_inv"))
    out = bench.run()
    cycles = out["commit_cycles"]
    assert out["events"] >= 64
    assert len(cycles) / (cycles[-1] - cycles[0] + 1) >= 0.99


def test_bad_messages_are_counted_and_dropped():
    """A CQID beyond the tracker, a CQID not in use, a response the request's state does not declare
    and a GO with a reserved state: each counted and dropped; the requests then finish as usual."""
    bench = ResponsePathBench(seed=7, requests=10)
    dev = bench.dev
    free = next(c for c in range(bench.dut.tracker) if c not in dev.txns)
    evict = next(t for t in dev.txns.values() if t.state.name in ("SI_A", "EI_A", "MI_A", "II_A"))
    live = next(iter(dev.txns.values()))
    bad = [
        Msg(Channel.H2D_RSP, H2DRspOpcode.GO, 4000, 0, rsp_data=GOState.Shared.value),
        Msg(Channel.H2D_RSP, H2DRspOpcode.GO, free, 0, rsp_data=GOState.Invalid.value),
        Msg(Channel.H2D_DATA, None, evict.cqid, evict.line, data=5),
        Msg(Channel.H2D_RSP, H2DRspOpcode.GO, live.cqid, live.line, rsp_data=GOState.Error.value),
        Msg(Channel.H2D_RSP, H2DRspOpcode.ExtCmp, live.cqid, live.line),
    ]
    out = bench.run(bad=bad)
    assert out["errors"] == len(bad)
    assert sorted(id(m) for m in out["dropped"]) == sorted(id(m) for m in bad)
    assert out["last_error"] in (ErrorKind.UNDECLARED, ErrorKind.UNKNOWN_CQID)


@pytest.mark.parametrize("kw, name", [
    (dict(caches=0), "caches"), (dict(caches=33), "caches"), (dict(tracker=1), "tracker"),
    (dict(tracker=5000), "tracker"), (dict(sf_ways=3), "sf_ways"), (dict(tracker=True), "tracker"),
])
def test_bad_parameters_are_named(kw, name):
    with pytest.raises(ValueError, match=name):
        ResponsePath(**kw)


def test_a_duplicate_data_is_dropped_without_its_line():
    """Each H2D Data followed at once by a copy with another line (the second lands in B while the first
    is in C): every copy is counted and dropped, and the caches get the first line (``cpu_rsp`` data)."""
    bench = ResponsePathBench(seed=3, kinds=READS)
    out = bench.run(duplicate_data=True)
    n = len(out["dropped"])
    assert n > 0 and out["errors"] == n
