"""hdl/dcoh/pipe/out_queue.py against a list: order, nothing lost or doubled, a message pushed into an
empty queue offered in the next cycle, the payload from a register."""

import random

import pytest
from amaranth.sim import Simulator

from hdl.dcoh.pipe.out_queue import OutQueue


def _run(depth, seed, cycles=300):
    rng = random.Random(seed)
    dut = OutQueue(8, depth)
    got, sent, waits = [], [], []

    async def bench(ctx):
        n = 0
        for cyc in range(cycles):
            push = rng.random() < 0.6 and ctx.get(dut.level) < depth
            ctx.set(dut.push, push)
            ctx.set(dut.push_p, n & 0xff)
            ready = rng.random() < 0.5
            ctx.set(dut.out.ready, ready)
            if ctx.get(dut.out.valid) and ready:
                got.append(ctx.get(dut.out.p))
            if push:
                sent.append((n & 0xff, cyc, ctx.get(dut.level)))
                n += 1
            await ctx.tick()
            if push and sent[-1][2] == 0 and not ctx.get(dut.out.valid):
                waits.append(cyc)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, sent, waits


@pytest.mark.parametrize("depth", [2, 3, 8])
@pytest.mark.parametrize("seed", [1, 2])
def test_queue_keeps_order_and_offers_a_push_into_an_empty_queue_next_cycle(depth, seed):
    got, sent, waits = _run(depth, seed)
    assert got == [v for v, _, _ in sent][:len(got)]
    assert len(sent) - len(got) <= depth
    assert not waits, f"pushes into an empty queue not offered in the next cycle: {waits[:5]}"


def test_bad_depth_is_named():
    with pytest.raises(ValueError, match="depth"):
        OutQueue(8, 1)
