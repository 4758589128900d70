"""The pipelined DCOH top (hdl/dcoh/pipe/dcoh_top.py: the engine behind the D2H credits, with the D2H Req
arbiter of hdl/dcoh/pipe/request_tx.py, DevLoad and the error status) against the golden device.

tb/engine.py with ``top=True``: the bench returns each D2H credit a random 1..``credit_delay`` + 1 cycles
after the message that spent it; it checks every D2H Req against a copy of the model's ``TxArbiter`` fed
by the engine's pushes (the QoS order), and DevLoad against the model's CQIDs in use, every cycle.
"""

import pytest
from amaranth.sim import Simulator

from cxl.messages import H2DRspOpcode
from hdl.dcoh.encodings import ErrorKind
from hdl.dcoh.pipe.dcoh_top import PipelinedDCOH
from tb.engine import SLOW_PORTS as SLOW, SNOOPS, EngineBench

CASES = {
    # name: (bench parameters, run parameters)
    # One credit a channel, returned late, the caches busy: the D2H Req pile up in their classes and
    # the arbiter orders them; the response path waits for its data credits with requests in its start
    # register, so snoops to those lines wait for the start (a hold that only the start releases).
    "one_credit_returned_late": (dict(credits=1, credit_delay=16, uncached_share=0.4, caches=8),
                                 dict(p_access=0.9) | SNOOPS),
    # back-invalidations (more lines a set than ways, uncached accesses to held lines) behind credits
    "back_invalidations_slow_ports": (dict(credits=2, credit_delay=8, lines_per_set=6, uncached_held=0.3),
                                      SLOW | SNOOPS),
    # no snoops, requests of the three classes piling up behind one credit: the starvation bound
    "requests_pile_up": (dict(credits=1, credit_delay=24, uncached_share=0.4, caches=8, starvation_bound=2),
                         dict(p_access=0.9)),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_top_matches_the_golden_device_behind_credits(case, seed):
    bench_kw, run_kw = CASES[case]
    bench = EngineBench(seed=seed, top=True, **bench_kw)
    out = bench.run(120, **run_kw)
    assert out["errors"] == 0
    assert out["commits"] + out["hits"] == out["accesses"] == 120
    assert out["arbitrations"] > 0             # some D2H Req left while another class waited
    if case == "requests_pile_up":
        assert bench.arbiter.max_passed >= 2   # a class was passed over up to the starvation bound


@pytest.mark.parametrize("kw, name", [
    (dict(credits=0), "credits"), (dict(starvation_bound=1), "starvation_bound"), (dict(work=0), "work"),
    (dict(tracker=1), "tracker"), (dict(sf_ways=3), "sf_ways"), (dict(devload_thresholds=(0.5, 0.25, 0.75)),
                                                                  "thresholds"),
])
def test_bad_parameters_are_named(kw, name):
    with pytest.raises(ValueError, match=name):
        PipelinedDCOH(**kw)


def test_errors_of_both_sides_counted_together_the_latest_named():
    """A GO for a CQID nobody uses (the response side's error), a snoop with a reserved opcode (the snoop
    side's), a GO again: one count, and ``last_error`` names the latest each time; nothing is left
    in flight (``idle``)."""
    dut = PipelinedDCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, credits=8)
    got = []

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)

        async def settle():
            await ctx.tick().repeat(8)
            got.append((ctx.get(dut.protocol_errors), ErrorKind(ctx.get(dut.last_error)), ctx.get(dut.idle)))

        async def unknown_go():
            ctx.set(dut.h2d_rsp.valid, 1)
            ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
            ctx.set(dut.h2d_rsp.p.cqid, 3)
            await ctx.tick().until(dut.h2d_rsp.ready)
            ctx.set(dut.h2d_rsp.valid, 0)
            await settle()

        await unknown_go()
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode.as_value(), 0b111)          # reserved
        ctx.set(dut.h2d_req.p.addr, 0x40)
        await ctx.tick().until(dut.h2d_req.ready)
        ctx.set(dut.h2d_req.valid, 0)
        await settle()
        await unknown_go()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()
    assert got == [(1, ErrorKind.UNKNOWN_CQID, 1), (2, ErrorKind.RESERVED_SNOOP, 1), (3, ErrorKind.UNKNOWN_CQID, 1)]
