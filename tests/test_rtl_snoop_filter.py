"""RTL snoop filter (hdl.dcoh.snoop_filter) against the golden model's SnoopFilter (models.dcoh).

Hypothesis draws, cycle by cycle, an update (allocate into the chosen free way, evict the chosen victim
then allocate into its way, modify, free, touch), a lookup (present or absent line, random busy mask)
and the result stream's ready; the model applies the same operations (the update of a cycle before the
lookup accepted in that cycle).  Every result is compared with the model's hit/way/entry and
allocation choice, the result latency (1 cycle) is checked, and after every cycle the whole tag store
(valid/tag/state/dirty/presence of every way and the pseudo-LRU bits of every set) is compared.
"""

import sys
from collections import deque
from pathlib import Path

import pytest
from amaranth.back import verilog
from hypothesis import given, strategies as st

from hdl.dcoh.snoop_filter import SFOp, SnoopFilter
from models.dcoh import SnoopFilter as ModelSF
from cxl.coherence import DevState as D

sys.path.insert(0, str(Path(__file__).parent))
from sf_harness import (ADDR_WIDTH, BAD_GEOMETRY, CACHES, CONFIGS, Codecs, ModelBench,  # noqa: E402
                        apply_update, cached_bench, draw_busy, draw_lookup_line, draw_update,
                        duplicate_tag_trips_the_assert, end_cycle, expected_answer, got_answer, set_update,
                        simulate)


class _Bench(ModelBench):
    def __init__(self, sets, ways, max_cycles=40, busy_at_result=False):
        self.late = busy_at_result
        super().__init__(SnoopFilter(sets, ways, CACHES, addr_width=ADDR_WIDTH, busy_at_result=busy_at_result),
                         sets, ways, max_cycles)

    async def _bench(self, ctx):
        dut, c, lines = self.dut, self.codecs, self.lines
        model, draw = self.job
        queue = deque()            # updates queued by an eviction
        pending = None             # lookup presented and not yet accepted: (line, busy)
        expected = deque()         # results in flight: (line, expected fields)
        held = None                # result payload seen stalled last cycle
        n = draw(st.integers(1, self.max_cycles), label="cycles")
        cycle = 0
        while cycle < n or pending is not None or expected:
            draining = cycle >= n
            u = None if draining else draw_update(draw, model, lines, CACHES, queue)
            if pending is None and not draining and draw(st.booleans(), label="lookup"):
                line = draw_lookup_line(draw, model, lines)
                pending = (line, draw_busy(draw, model))
            ready = True if draining else draw(st.integers(0, 3), label="ready") > 0
            set_update(ctx, dut, c, u)
            ctx.set(dut.lookup.valid, pending is not None)
            if pending is not None:
                # busy_at_result: the request's mask must be ignored (its complement here), and the
                # drawn one is offered on result_busy while that lookup's result is presented
                ctx.set(dut.lookup.p.as_value(), c.lookup.encode(
                    line=pending[0], busy=pending[1] ^ ((1 << model.ways) - 1) if self.late else pending[1]))
            if self.late:
                ctx.set(dut.result_busy, expected[0][2] if expected else 0)
            ctx.set(dut.result.ready, ready)

            # latency 1: exactly the results in flight are presented, one at a time
            assert ctx.get(dut.result.valid) == bool(expected), f"cycle {cycle}: result.valid"
            assert ctx.get(dut.update.ready) == 1
            if expected:
                p = ctx.get(dut.result.p.as_value())
                if held is not None:
                    assert p == held, f"cycle {cycle}: result changed while stalled"
                got, (line, exp, _) = got_answer(c, p), expected[0]
                assert c.result.get(p, "line") == line and got == exp, \
                    f"cycle {cycle}: lookup {line:#x}: {got} != model {exp}"
                if ready:
                    expected.popleft()
                held = None if ready else p
            # one lookup per cycle: ready whenever the result register is empty or drains this cycle
            assert ctx.get(dut.lookup.ready) == (not expected or ready)
            accepted = pending is not None and ctx.get(dut.lookup.ready)

            # the update of this cycle is seen by the lookup accepted in this cycle
            if u is not None:
                apply_update(model, u)
            if accepted:
                expected.append((pending[0], expected_answer(model, *pending), pending[1]))
                pending = None
            await end_cycle(ctx, dut, c, model)
            cycle += 1


@pytest.mark.parametrize("sets,ways", CONFIGS)
@given(data_=st.data())
def test_matches_golden_model(sets, ways, data_):
    bench = cached_bench((_Bench, sets, ways), lambda: _Bench(sets, ways))
    bench.run((ModelSF(sets, ways), data_.draw))


@pytest.mark.parametrize("sets,ways", [(1, 4), (4, 2)])
@given(data_=st.data())
def test_busy_at_result_matches_golden_model(sets, ways, data_):
    """``busy_at_result=True``: the busy mask is read from ``result_busy`` in the result's cycle (held
    with a stalled result) and the request's own mask is ignored; the same golden model decides."""
    bench = cached_bench((_Bench, sets, ways, "late"), lambda: _Bench(sets, ways, busy_at_result=True))
    bench.run((ModelSF(sets, ways), data_.draw))



def test_back_to_back_lookups_one_per_cycle():
    """Sustained throughput: 8 lookups in 8 consecutive cycles, each answered the next cycle."""
    dut, model = SnoopFilter(4, 2, CACHES), ModelSF(4, 2)
    c = Codecs(dut)
    e = model.allocate(5, 0)
    e.state, e.dirty, e.presence = D.E, True, 0b10

    async def tb(ctx):
        ctx.set(dut.result.ready, 1)
        set_update(ctx, dut, c, (SFOp.ALLOCATE, 5, 0, (D.E, True, 0b10)))
        await ctx.tick()
        set_update(ctx, dut, c, None)
        seen = []
        for i in range(9):
            if i < 8:
                ctx.set(dut.lookup.valid, 1)
                ctx.set(dut.lookup.p.as_value(), c.lookup.encode(line=i, busy=0))
                assert ctx.get(dut.lookup.ready)
            else:
                ctx.set(dut.lookup.valid, 0)
            if i > 0:
                assert ctx.get(dut.result.valid)
                p = ctx.get(dut.result.p.as_value())
                seen.append(c.result.get(p, "line"))
                assert got_answer(c, p) == expected_answer(model, i - 1, 0)
            await ctx.tick()
        assert seen == list(range(8))

    simulate(dut, tb)


@pytest.mark.parametrize("kwargs,name", BAD_GEOMETRY + [
    (dict(sets=4, ways=2, caches=2, busy_at_result=1), "busy_at_result"),
])
def test_bad_parameters_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name) as exc:
        SnoopFilter(**kwargs)
    assert repr(kwargs[name]) in str(exc.value)


def test_duplicate_tag_assert_fires():
    """Allocating one line into two ways of its set through the update port trips the RTL Assert."""
    assert duplicate_tag_trips_the_assert(SnoopFilter(2, 2, CACHES))


def test_same_tag_in_different_sets_is_fine():
    dut = SnoopFilter(2, 2, CACHES)
    c = Codecs(dut)

    async def tb(ctx):
        for line in (6, 7, 4):           # tags 3, 3 (sets 0 and 1), then tag 2 in set 0
            set_update(ctx, dut, c, (SFOp.ALLOCATE, line, 0 if line != 4 else 1, (D.S, False, 1)))
            await ctx.tick()
        set_update(ctx, dut, c, None)
        for _ in range(3):
            await ctx.tick()

    simulate(dut, tb)


@pytest.mark.parametrize("sets,ways,caches", [(64, 4, 2), (1, 1, 1), (16, 8, 32)])
def test_converts_to_verilog(sets, ways, caches):
    v = verilog.convert(SnoopFilter(sets, ways, caches), name="snoop_filter")
    assert "module snoop_filter" in v
