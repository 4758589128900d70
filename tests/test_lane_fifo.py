"""hdl.link.lane_fifo.LaneFIFO: cycle for cycle the same as amaranth's SyncFIFOBuffered of the same depth;
with ``exact=True`` a FIFO that takes a push whenever it holds fewer than ``depth`` entries."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator

from hdl.link.lane_fifo import LaneFIFO

WIDTH = 8


@pytest.mark.parametrize("depth", [2, 3, 4, 5])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_cycles_as_sync_fifo_buffered(depth, seed):
    """Random pushes (data changing every cycle, pushed or not) and pops, both FIFOs driven alike: w_rdy,
    r_rdy and (while r_rdy) r_data agree every cycle, and the FIFOs fill and empty during the run."""
    m = Module()
    m.submodules.ref = ref = SyncFIFOBuffered(width=WIDTH, depth=depth)
    m.submodules.dut = dut = LaneFIFO(WIDTH, depth)
    seen = {"full": 0, "empty_reads": 0, "pops": 0}

    async def bench(ctx):
        rng = random.Random(seed)
        for cycle in range(3000):
            phase = (cycle // 200) % 3            # fill, drain, mixed: reach full and empty often
            w_en = rng.random() < (0.8, 0.2, 0.5)[phase]
            r_en = rng.random() < (0.2, 0.8, 0.5)[phase]
            data = rng.getrandbits(WIDTH)
            for f in (ref, dut):
                ctx.set(f.w_en, w_en)
                ctx.set(f.r_en, r_en)
                ctx.set(f.w_data, data)
            where = f"depth={depth} seed={seed} cycle={cycle}"
            assert ctx.get(dut.w_rdy) == ctx.get(ref.w_rdy), where
            assert ctx.get(dut.r_rdy) == ctx.get(ref.r_rdy), where
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), where
                seen["pops"] += r_en
            seen["full"] += not ctx.get(ref.w_rdy)
            seen["empty_reads"] += r_en and not ctx.get(ref.r_rdy)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["full"] > 0 and seen["empty_reads"] > 0 and seen["pops"] > 100, seen


@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("seed", [1, 2])
def test_exact_takes_every_entry(depth, seed):
    """``exact=True`` against an occupancy model: ``w_rdy`` exactly while fewer than ``depth`` entries are
    held, the entries come out in order, and the head is on ``r_data`` by the second edge after its
    push.  At depth 2 the run must meet the state where ``SyncFIFOBuffered`` would refuse the push
    (its memory full, the output register empty) and push there."""
    m = Module()
    m.submodules.dut = dut = LaneFIFO(WIDTH, depth, exact=True)
    seen = {"full": 0, "hidden_pushes": 0, "pops": 0}

    async def bench(ctx):
        rng = random.Random(seed)
        held = []                                  # (value, edge of its push), oldest first
        for cycle in range(3000):
            phase = (cycle // 200) % 3
            w_en = rng.random() < (0.8, 0.2, 0.5)[phase]
            r_en = rng.random() < (0.2, 0.8, 0.5)[phase]
            data = rng.getrandbits(WIDTH)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            ctx.set(dut.w_data, data)
            where = f"depth={depth} seed={seed} cycle={cycle}"
            w_rdy, r_rdy = ctx.get(dut.w_rdy), ctx.get(dut.r_rdy)
            assert w_rdy == (len(held) < depth), (where, len(held))
            assert not r_rdy or held, where
            if held and cycle - held[0][1] >= 1:      # pushed two edges ago or earlier
                assert r_rdy, (where, "the head is late")
            if r_rdy:
                assert ctx.get(dut.r_data) == held[0][0], where
            seen["full"] += not w_rdy
            if w_rdy and w_en and len(held) == depth - 1 and not r_rdy and depth == 2:
                seen["hidden_pushes"] += 1
            pop = r_rdy and r_en
            if pop:
                held.pop(0)
                seen["pops"] += 1
            if w_rdy and w_en:
                held.append((data, cycle + 1))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["full"] > 0 and seen["pops"] > 100, seen
    assert depth != 2 or seen["hidden_pushes"] > 0, seen


@pytest.mark.parametrize("kwargs", [dict(width=8, depth=1), dict(width=8, depth=0), dict(width=0, depth=4),
                                    dict(width=8, depth="4")])
def test_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="width|depth"):
        LaneFIFO(**kwargs)
