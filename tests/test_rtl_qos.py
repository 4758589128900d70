"""RTL QoS blocks in amaranth.sim against the golden model's logic, driven by Hypothesis."""

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from rtl_sim import run_clocked
from hypothesis import given, strategies as st

from hdl.dcoh.qos import CreditCounter, DevLoad, PriorityArbiter
from cxl.messages import D2HReqOpcode as Req
from cxl.device import REQUEST_PRIORITY
from models.dcoh import TxArbiter, devload_level

# Constructors that raise on bad parameters leave a half-made Elaboratable behind; that is expected.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

BY_CLASS = {0: Req.DirtyEvict, 1: Req.RdOwn, 2: Req.ItoMWr}


class _T:
    def __init__(self, op, n):
        self.op, self.cqid = op, n


@given(bound=st.integers(2, 5), data=st.data())
def test_arbiter_matches_model(bound, data):
    dut = PriorityArbiter(classes=3, bound=bound)
    model = TxArbiter(bound)
    steps = data.draw(st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=2), st.booleans()),
                               min_size=1, max_size=40), label="steps")

    async def bench(ctx):
        n = 0
        for pushes, take in steps:
            for c in pushes:
                model.push(_T(BY_CLASS[c], n))
                n += 1
            req = sum(1 << c for c in range(3) if model.queues[c])
            ctx.set(dut.req, req)
            take = take and req != 0
            ctx.set(dut.advance, take)
            assert ctx.get(dut.valid) == (req != 0)
            if take:
                granted = REQUEST_PRIORITY[model.pop().op]
                assert ctx.get(dut.grant) == 1 << granted, (req, model.passed)
            await ctx.tick()
    run_clocked(dut, bench)


@given(initial=st.integers(1, 12), data=st.data())
def test_credit_counter_matches_link_accounting(initial, data):
    dut = CreditCounter(initial)
    ops = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, 64)), max_size=60), label="ops")

    async def bench(ctx):
        available, in_flight = initial, 0
        for take, ret in ops:
            take = take and available > 0
            ret = min(ret, in_flight)                 # a receiver never returns more than it got
            ctx.set(dut.take, take)
            ctx.set(dut.ret, ret)
            await ctx.tick()
            available += ret - take
            in_flight += take - ret
            assert (ctx.get(dut.available), ctx.get(dut.in_flight)) == (available, in_flight)
    run_clocked(dut, bench)


def test_credit_counter_asserts_on_overreturn():
    dut = CreditCounter(2)

    async def bench(ctx):
        ctx.set(dut.ret, 1)                           # nothing is in flight
        await ctx.tick()
    with pytest.raises(AssertionError, match="more credits returned than in flight"):
        run_clocked(dut, bench)


@given(capacity=st.integers(1, 64), data=st.data())
def test_devload_matches_model(capacity, data):
    th = (0.25, 0.5, 0.75)
    dut = DevLoad(capacity, th)
    occ = data.draw(st.lists(st.integers(0, capacity), min_size=1, max_size=20), label="occupancy")

    async def bench(ctx):
        for o in occ:
            ctx.set(dut.occupancy, o)
            assert ctx.get(dut.level) == devload_level(o, capacity, th)
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("make, name", [(lambda: CreditCounter(0), "initial"), (lambda: CreditCounter(1024), "initial"),
                                        (lambda: PriorityArbiter(bound=0), "bound"),
                                        (lambda: DevLoad(0), "capacity"), (lambda: DevLoad(8, (0.5, 0.25, 0.75)), "thresholds")])
def test_bad_parameters_are_named(make, name):
    with pytest.raises(ValueError, match=rf"^{name}="):
        make()


def test_converts_to_verilog():
    for dut, name in ((CreditCounter(8), "credits"), (PriorityArbiter(3, 4), "arbiter"), (DevLoad(16), "devload")):
        assert "module" in verilog.convert(dut, name=name)
