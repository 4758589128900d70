"""hdl/dcoh/pipe/out_queue.py against a list: order (``push`` before ``push2`` in a cycle), nothing lost
or doubled, a message pushed into an empty queue offered in the next cycle."""

import random

import pytest
from amaranth.sim import Simulator

from hdl.dcoh.pipe.out_queue import OutQueue


def _run(depth, seed, cycles=400):
    rng = random.Random(seed)
    dut = OutQueue(8, depth)
    got, sent, late = [], [], []

    async def bench(ctx):
        n = 0
        for cyc in range(cycles):
            room = depth - ctx.get(dut.level)
            pushes = []
            for port in ("push", "push2"):
                on = rng.random() < 0.5 and len(pushes) < room
                ctx.set(getattr(dut, port), on)
                ctx.set(getattr(dut, f"{port}_p"), n & 0xff)
                if on:
                    pushes.append(n & 0xff)
                    n += 1
            ready = rng.random() < 0.6
            ctx.set(dut.out.ready, ready)
            if ctx.get(dut.out.valid) and ready:
                got.append(ctx.get(dut.out.p))
            empty = ctx.get(dut.level) == 0
            sent.extend(pushes)
            await ctx.tick()
            if pushes and empty and ctx.get(dut.out.p) != pushes[0]:
                late.append(cyc)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, sent, late


@pytest.mark.parametrize("depth", [3, 5, 9])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_queue_keeps_order_and_offers_a_push_into_an_empty_queue_next_cycle(depth, seed):
    got, sent, late = _run(depth, seed)
    assert len(got) > 100
    assert got == sent[:len(got)]
    assert len(sent) - len(got) <= depth
    assert not late, f"pushes into an empty queue not offered in the next cycle: {late[:5]}"


def test_bad_depth_is_named():
    for depth in (1, 2, 4):
        with pytest.raises(ValueError, match="depth"):
            OutQueue(8, depth)
