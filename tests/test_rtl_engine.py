"""The pipelined DCOH's engine (hdl/dcoh/pipe/engine.py: the snoop path, the request path and the response
path over one snoop filter) against the golden device.

tb/engine.py: the caches make random accesses, the model tries each where the RTL commits it and
completes each request where the RTL's lane frees it, the bench plays the host, snoops included; every
D2H Req, D2H Rsp, D2H Data and ``cpu_rsp``, the snoop filter and the caches are compared.
"""

import pytest

from hdl.dcoh.pipe.request_path import RequestPath
from tb.engine import SLOW_PORTS as SLOW, SNOOPS, EngineBench


CASES = {
    # name: (bench parameters, run parameters)
    "defaults": (dict(), dict()),
    "slow_ports": (dict(), SLOW),
    "one_cache": (dict(caches=1), dict()),
    "tracker_smaller_than_caches": (dict(caches=8, tracker=4), SLOW),
    "two_cqids": (dict(tracker=2), dict(p_sink=0.7)),
    "direct_mapped": (dict(sf_ways=1, sf_sets=32), dict()),
    "eight_ways": (dict(sf_ways=8, sf_sets=4, caches=6), SLOW),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_request_side_matches_the_golden_device(case, seed):
    bench_kw, run_kw = CASES[case]
    out = EngineBench(seed=seed, **bench_kw).run(150, **run_kw)
    assert out["errors"] == 0
    assert out["commits"] + out["hits"] == out["accesses"] == 150
    assert out["requests"] > 0 and out["rsp_events"] >= out["requests"]



SNOOP_CASES = {
    # name: (bench parameters, run parameters): the host snoops too, lines with requests in flight among them
    "defaults": (dict(), SNOOPS),
    "slow_ports": (dict(), SLOW | SNOOPS),
    "one_work_entry": (dict(work=1), SNOOPS),
    "small_window_one_command": (dict(window=4, cmd_depth=1), SNOOPS),
    "one_coalescer_group": (dict(coalesce_groups=1, coalesce_window=8), SNOOPS),
    "tracker_smaller_than_caches": (dict(caches=8, tracker=4), SLOW | SNOOPS),
    "direct_mapped": (dict(sf_ways=1, sf_sets=32), SNOOPS),
    "eight_ways_two_lines_a_set": (dict(sf_ways=8, sf_sets=4, caches=6, lines_per_set=2), SLOW | SNOOPS),
    "snoop_storm": (dict(), dict(snoop_rate=0.9)),
    # the host offers H2D messages in half the cycles, GOs and snoops to one line together among them:
    # the response path's turns between H2D Rsp and Data leave a GO waiting beside a snoop
    "snoop_storm_host_offers_half": (dict(), dict(snoop_rate=0.9, p_in=0.5)),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", sorted(SNOOP_CASES))
def test_engine_with_host_snoops_matches_the_golden_device(case, seed):
    """Accesses and host snoops together: snoops to lines with requests in flight read the request's
    state, stall until its data, hold on lines an access works on; accesses park on lines a snoop works
    on.  Every message is compared one for one (tb/engine.py)."""
    bench_kw, run_kw = SNOOP_CASES[case]
    out = EngineBench(seed=seed, **bench_kw).run(120, **run_kw)
    assert out["errors"] == 0
    assert out["commits"] + out["hits"] == out["accesses"] == 120
    assert out["snoops"] > 20 and out["snoops_on_requests"] > 0 and out["snoop_data"] > 0


@pytest.mark.parametrize("kw, name", [
    (dict(caches=0), "caches"), (dict(caches=33), "caches"), (dict(tracker=1), "tracker"),
    (dict(sf_ways=3), "ways"), (dict(sf_sets=6), "sets"),
])
def test_bad_parameters_are_named(kw, name):
    with pytest.raises(ValueError, match=name):
        RequestPath(**kw)


def _waiting_behind(delay, second_kind="load"):
    """Cache 0 misses on a line; ``delay`` cycles later cache 1 wants the same line, whose request is then
    in flight: it parks on the line, and only that request's completion can wake it (nothing else happens)."""
    from models.dcoh import CpuOp
    bench = EngineBench(seed=1, caches=2, lines_per_set=1, uncached_share=0)
    line = next(l for l in bench.lines if all(l not in c for c in bench.dev.caches))
    script = [(0, CpuOp("load", 0, line)), (delay, CpuOp(second_kind, 1, line, 77))]
    return bench.run(script=script, host_delay=6)


@pytest.mark.parametrize("delay", range(0, 16))
def test_an_access_behind_a_request_on_its_line_is_woken_by_its_completion(delay):
    """Swept over when the second access arrives, so that its park meets the completion in every cycle
    around it (a park and a wake in one cycle must leave it woken)."""
    out = _waiting_behind(delay)
    assert out["commits"] == 2 and out["requests"] == 1           # the second one filled from the first


def _upgrade_snooped_twice(data_at, second):
    """Caches share a line in S; one stores to it (an upgrade: RdOwn, SM_AD).  The host snoops it with
    SnpInv (the engine probes the copies away: IM_AD, or IM_A if the Data came meanwhile), then a second
    snoop, which finds no copy left to probe; the Data comes ``data_at`` cycles after the D2H Req, the GO
    after both snoops."""
    from cxl.messages import H2DReqOpcode as Snp
    from models.dcoh import CpuOp
    bench = EngineBench(seed=1, caches=4, preload_share=1.0, uncached_share=0)
    dev = bench.dev
    line = next(l for l, e in sorted(dev.sf.entries.items()) if e.state is not None and e.state.name == "S"
                and not e.dirty and bin(e.presence).count("1") >= 2)
    k = next(k for k in range(4) if dev.sf.entries[line].presence >> k & 1)

    def plan(t):
        return [(data_at, "Data"), (max(data_at, 45) + 5, "GO-E")] if t.line == line else None
    return bench.run(script=[(0, CpuOp("store", k, line, 99))], host_plan=plan, host_delay=0,
                     snoop_script=[(10, Snp.SnpInv, line), (20, getattr(Snp, second), line)])


@pytest.mark.parametrize("data_at, second", [(d, "SnpInv") for d in range(14, 34)] +
                         [(d, "SnpData") for d in (14, 22, 30)])
def test_an_upgrade_snooped_twice_while_its_data_arrives(data_at, second):
    """Swept over the Data's arrival, so that it meets the first snoop's answer lane in every cycle
    around it: the lane writes the request's state from the state it has then (SM_A's SnpInv leaves
    IM_A), waits for a cycle in which the response path does not write the same request, and the
    response path forwards the lane's write into its own stage C.  The first snoop's probe leaves the
    filter's entry with no copy, so the second snoop probes nothing, and the upgrade's completion
    invalidates no copy a second time (the caches' side refuses such a command)."""
    out = _upgrade_snooped_twice(data_at, second)
    assert out["errors"] == 0 and out["snoops"] == 2 and out["requests"] == 1



STALL_END = 70      # the cycle up to which the host takes no D2H Data in the pinned-request runs


def _write_back_snooped_with_its_data_stalled(snoop_at, event):
    """Caches 0 and 1 write back an M line each (DirtyEvict, CQIDs 0 and 1); the host snoops both (SnpInv,
    cache 1's first): each snoop forwards its request's write-back buffer (RspIFwdM), and their data wait
    because the host takes no D2H Data before ``STALL_END``: the first snoop's in the output register, the
    second's (cache 0's line) in its work entry, which names CQID 0 meanwhile.  Once that snoop is
    answered the host completes cache 0's write-back (``event``, ten cycles after its D2H Req), and cache
    2 writes back a third line at cycle 24, under the lowest free CQID."""
    from cxl.messages import H2DReqOpcode as Snp
    from models.dcoh import CpuOp
    bench = EngineBench(seed=1, caches=3, tracker=3, preload_share=1.0, uncached_share=0)
    m = [sorted(line for line, (state, _) in bench.dev.caches[k].items() if state.name == "M") for k in range(3)]
    a, c, b = m[0][0], m[1][0], m[2][0]

    def plan(t):
        return {a: [(10, event)], c: [(40, "GO_WritePull_Drop")], b: [(1, "GO_WritePull")]}.get(t.line)
    return bench.run(script=[(0, CpuOp("evict", 0, a)), (0, CpuOp("evict", 1, c)), (24, CpuOp("evict", 2, b))],
                     host_plan=plan, host_delay=0,
                     snoop_script=[(snoop_at - 1, Snp.SnpInv, c), (snoop_at, Snp.SnpInv, a)],
                     stall={"d2h_data": range(STALL_END)})


@pytest.mark.parametrize("snoop_at", [11, 12])
@pytest.mark.parametrize("event", ["GO_WritePull_Drop", "GO-I"])
def test_a_request_whose_buffer_a_snoop_still_forwards_is_not_freed(snoop_at, event):
    """The pin: a request a snoop's work entry names completes only after the entry has read its
    write-back buffer.  Freed earlier, cache 2's write-back takes its CQID and writes that buffer, and the
    snoop forwards cache 2's line (with the pin removed every run fails so: "D2H Data: RTL ... 1043,
    model ... 1022")."""
    out = _write_back_snooped_with_its_data_stalled(snoop_at, event)
    assert out["errors"] == 0 and out["snoops"] == out["snoop_data"] == 2 and out["requests"] == 3
    done = [cyc for cyc, what, k in out["log"] if what == "cpu_rsp" and k == 0]
    assert done and done[0] >= STALL_END, f"cache 0's write-back completed at {done}, before the snoop's data"
