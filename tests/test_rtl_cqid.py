"""CQID allocator RTL against the model's allocation rule (lowest free first), driven by Hypothesis."""

import pytest
from amaranth.back import verilog

from rtl_sim import run_clocked
from hypothesis import given, strategies as st

from hdl.dcoh.cqid import CQIDAllocator


@given(depth=st.integers(1, 16), data=st.data())
def test_allocator_matches_model(depth, data):
    dut = CQIDAllocator(depth)
    steps = data.draw(st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=60), label="steps")

    async def bench(ctx):
        free = list(range(depth))            # the model's free list: sorted, lowest first
        live = []
        for want, pick in steps:
            assert ctx.get(dut.alloc.valid) == bool(free)
            if free:
                assert ctx.get(dut.alloc.payload) == free[0]
            take = want and bool(free)
            release = (not want or not free) and bool(live)
            ctx.set(dut.alloc.ready, take)
            victim = live[pick % len(live)] if release else 0
            ctx.set(dut.free_valid, release)
            ctx.set(dut.free_cqid, victim)
            await ctx.tick()
            if take:
                live.append(free.pop(0))
            if release:
                live.remove(victim)
                free.append(victim)
                free.sort()
            assert ctx.get(dut.count) == len(live)
            assert ctx.get(dut.live) == sum(1 << c for c in live)
    run_clocked(dut, bench)


def test_freeing_a_free_cqid_asserts():
    dut = CQIDAllocator(4)

    async def bench(ctx):
        ctx.set(dut.free_valid, 1)
        ctx.set(dut.free_cqid, 2)
        await ctx.tick()
    with pytest.raises(AssertionError, match="not live"):
        run_clocked(dut, bench)


def test_bad_depth_is_named():
    with pytest.raises(ValueError, match="^depth=4097"):
        CQIDAllocator(4097)


@pytest.mark.slow        # make test converts the whole device (both link ends, DCOH) for the system testbench
def test_converts_to_verilog():
    assert "module cqid" in verilog.convert(CQIDAllocator(16), name="cqid")


@pytest.mark.parametrize("depth", [2, 16, 64])
def test_no_wide_shift(depth):
    """The one-hot set/clear decoders and the live-bit checks are as wide as the allocator: a ``1 << cqid``
    of the 12-bit CQID would be a 4096-bit value in the netlist, whatever the depth."""
    import re
    from amaranth.back import rtlil
    text = rtlil.convert(CQIDAllocator(depth), name="cqid")
    widest = max(int(w) for w in re.findall(r"\bwidth (\d+)", text))
    assert widest <= max(64, 2 * depth), f"a {widest}-bit signal in a {depth}-entry CQID allocator"
