"""The pipelined snoop filter (hdl.dcoh.sf_pipe) against the golden model's SnoopFilter (models.dcoh).

Hypothesis draws, cycle by cycle, an update, a lookup, the result's ready and the busy mask of the
result's line; the model applies each cycle's update after that cycle.  In every cycle the result must
be offered exactly when the oldest lookup in flight was accepted 3 or more cycles before, and must be
the model's answer for the store as the updates before that cycle left it (also while held: a held
result follows the updates); the lookup must be ready exactly when fewer than three lookups are in flight
or the result is taken.  After every cycle the whole tag store is compared with the model's.
"""

import sys
from collections import deque
from pathlib import Path

import pytest
from amaranth.back import verilog
from hypothesis import given, strategies as st

from hdl.dcoh.sf_pipe import LATENCY, PipelinedSnoopFilter
from hdl.dcoh.snoop_filter import SFOp
from models.dcoh import SnoopFilter as ModelSF
from cxl.coherence import DevState as D

sys.path.insert(0, str(Path(__file__).parent))
from sf_harness import (ADDR_WIDTH, BAD_GEOMETRY, CACHES, CONFIGS, Codecs, ModelBench,  # noqa: E402
                        apply_update, cached_bench, draw_busy, draw_lookup_line, draw_update,
                        duplicate_tag_trips_the_assert, end_cycle, expected_answer, got_answer, set_update,
                        simulate)


class _Bench(ModelBench):
    def __init__(self, sets, ways, max_cycles=40, stall=True):
        self.stall = stall
        super().__init__(PipelinedSnoopFilter(sets, ways, CACHES, addr_width=ADDR_WIDTH, stall=stall), sets, ways,
                         max_cycles)

    async def _bench(self, ctx):
        dut, c, lines = self.dut, self.codecs, self.lines
        model, draw = self.job
        queue = deque()            # updates queued by an eviction
        pending = None             # line presented and not yet accepted
        inflight = deque()         # (line, cycle accepted)
        n = draw(st.integers(1, self.max_cycles), label="cycles")
        cycle = 0
        while cycle < n or pending is not None or inflight:
            draining = cycle >= n
            u = None if draining else draw_update(draw, model, lines, CACHES, queue)
            if pending is None and not draining and draw(st.booleans(), label="lookup"):
                pending = draw_lookup_line(draw, model, lines)
            ready = True if draining or not self.stall else draw(st.integers(0, 3), label="ready") > 0
            busy = draw_busy(draw, model)
            set_update(ctx, dut, c, u)
            ctx.set(dut.lookup.valid, pending is not None)
            if pending is not None:
                ctx.set(dut.lookup.p, pending)
            ctx.set(dut.result_busy, busy)
            ctx.set(dut.result.ready, ready)

            due = bool(inflight) and inflight[0][1] <= cycle - LATENCY
            assert ctx.get(dut.result.valid) == due, f"cycle {cycle}: result.valid (in flight {list(inflight)})"
            assert ctx.get(dut.update.ready) == 1
            taken = due and ready
            if due:
                p = ctx.get(dut.result.p.as_value())
                line = inflight[0][0]
                got, exp = got_answer(c, p), expected_answer(model, line, busy)
                assert c.result.get(p, "line") == line and got == exp, \
                    f"cycle {cycle}: lookup {line:#x} (accepted in cycle {inflight[0][1]}): {got} != model {exp}"
                if taken:
                    inflight.popleft()
            # three stages hold lookups: a new one is taken while one of them is free or they all move on
            assert ctx.get(dut.lookup.ready) == (len(inflight) < LATENCY or taken), f"cycle {cycle}: lookup.ready"
            if pending is not None and ctx.get(dut.lookup.ready):
                inflight.append((pending, cycle))
                pending = None
            if u is not None:
                apply_update(model, u)         # this cycle's update shows from the next cycle on
            await end_cycle(ctx, dut, c, model)
            cycle += 1


@pytest.mark.parametrize("sets,ways", CONFIGS)
@given(data_=st.data())
def test_matches_golden_model(sets, ways, data_):
    bench = cached_bench((_Bench, sets, ways), lambda: _Bench(sets, ways))
    bench.run((ModelSF(sets, ways), data_.draw))


@pytest.mark.parametrize("sets,ways", [(1, 4), (2, 2)])
@given(data_=st.data())
def test_without_stalls_matches_golden_model(sets, ways, data_):
    """``stall=False``: every result taken in the cycle it is offered; the same answers."""
    bench = cached_bench((_Bench, sets, ways, "nostall"), lambda: _Bench(sets, ways, stall=False))
    bench.run((ModelSF(sets, ways), data_.draw))


def test_without_stalls_a_result_not_taken_is_reported():
    dut = PipelinedSnoopFilter(2, 2, CACHES, stall=False)

    async def tb(ctx):
        ctx.set(dut.lookup.valid, 1)
        ctx.set(dut.lookup.p, 5)
        await ctx.tick()
        ctx.set(dut.lookup.valid, 0)
        for _ in range(LATENCY + 1):
            await ctx.tick()

    with pytest.raises(AssertionError, match="was not taken"):
        simulate(dut, tb)



def test_one_lookup_per_cycle_with_writes_to_the_same_set():
    """Sustained throughput with forwarding on every step: a lookup of one set in each of 8 consecutive
    cycles while each cycle allocates another line of that set.  The lookup of cycle i asks for the
    line allocated in cycle i (the read's own cycle: the read does not see it), i + 1, i + 2 (the cycles
    between) or i + 3 (its answer's cycle: not yet seen), in turn."""
    sets, ways = 1, 8
    dut, model = PipelinedSnoopFilter(sets, ways, CACHES), ModelSF(sets, ways)
    c = Codecs(dut)

    async def tb(ctx):
        ctx.set(dut.result.ready, 1)
        answers = []
        for i in range(8 + LATENCY):
            u = (SFOp.ALLOCATE, 100 + i, i, (D.S, False, 1)) if i < ways else None
            set_update(ctx, dut, c, u)
            ctx.set(dut.lookup.valid, i < 8)
            ctx.set(dut.lookup.p, 100 + i + i % (LATENCY + 1))
            if i < 8:
                assert ctx.get(dut.lookup.ready)
            if i >= LATENCY:
                assert ctx.get(dut.result.valid)
                p = ctx.get(dut.result.p.as_value())
                j = i - LATENCY
                assert got_answer(c, p) == expected_answer(model, 100 + j + j % (LATENCY + 1), 0), f"cycle {i}"
                answers.append(got_answer(c, p)["hit"])
            if u is not None:
                apply_update(model, u)
            await ctx.tick()
        assert answers == [True, True, True, False, True, True, False, False]    # 108, 110: never allocated

    simulate(dut, tb)


@pytest.mark.parametrize("kwargs,name", BAD_GEOMETRY + [
    (dict(sets=4, ways=2, caches=2, stall=0), "stall"),
])
def test_bad_parameters_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name) as exc:
        PipelinedSnoopFilter(**kwargs)
    assert "PipelinedSnoopFilter" in str(exc.value) and repr(kwargs[name]) in str(exc.value)


def test_duplicate_tag_assert_fires():
    assert duplicate_tag_trips_the_assert(PipelinedSnoopFilter(2, 2, CACHES))


@pytest.mark.parametrize("sets,ways,caches", [(64, 4, 2), (1, 1, 1)])
def test_converts_to_verilog(sets, ways, caches):
    v = verilog.convert(PipelinedSnoopFilter(sets, ways, caches), name="sf_pipe")
    assert "module sf_pipe" in v
