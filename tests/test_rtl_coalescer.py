"""RTL invalidation coalescer (hdl.dcoh.coalescer) against the golden model's Coalescer (models.dcoh).

Hypothesis draws, cycle by cycle, probes (lines in a few blocks, random cache masks, random idle gaps)
and, in some examples, random back-pressure on the message output.  The model's Coalescer runs
alongside: a probe accepted in cycle c is ``add``ed with now=c, then the groups ``due(c)`` are popped
(the order of models/system.py's run() for a probe delivered in that cycle).  Checked:

* the messages (block, line mask, cache mask) equal the model's popped groups, in the same order per
  block; each appears no earlier than deadline + 1; when the output is never back-pressured, every
  message appears exactly in cycle deadline + 1 (the documented latency) and in the model's order;
* a stalled message keeps its payload (stream rules);
* msgs_in every cycle, msgs_out at the end, equal the model's counters.
"""

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from hypothesis import given, strategies as st

from hdl.dcoh.coalescer import InvalidationCoalescer
from models.dcoh import Coalescer

ADDR_WIDTH = 46
LATENCY = 1            # messages.valid in cycle model deadline + 1

# (window, block, groups, caches): few slots (stalls) and enough slots, window 0, block 1
CONFIGS = [(0, 1, 2, 2), (0, 4, 3, 3), (2, 4, 4, 2), (3, 2, 1, 1), (4, 8, 2, 4), (1, 4, 4, 32)]


def _blocks(dut):
    """Block addresses probes are drawn from: small ones and the two highest."""
    top = (1 << dut.block_addr_width) - 1
    return [0, 1, 2, 5, top - 1, top]


class _Bench:
    """One DUT and Simulator per configuration, reset between Hypothesis examples."""

    def __init__(self, window, block, groups, caches, max_cycles=40):
        self.dut = InvalidationCoalescer(window, block, groups, caches, addr_width=ADDR_WIDTH)
        self.window, self.block, self.caches = window, block, caches
        self.max_cycles = max_cycles
        self.draw = None
        self.fresh = True
        self.sim = Simulator(self.dut)
        self.sim.add_clock(1e-6)
        self.sim.add_testbench(self._tb)

    def run(self, draw):
        self.draw = draw
        if not self.fresh:
            self.sim.reset()
        self.fresh = False
        self.sim.run()

    def _fields(self, p):
        bw, blk = self.dut.block_addr_width, self.block
        return (p & ((1 << bw) - 1), (p >> bw) & ((1 << blk) - 1), p >> (bw + blk))

    async def _tb(self, ctx):
        dut, draw, blk = self.dut, self.draw, self.block
        model = Coalescer(self.window, blk)
        pool = draw(st.lists(st.sampled_from(_blocks(dut)), min_size=1, max_size=3, unique=True), label="blocks")
        busy = draw(st.integers(1, 4), label="probe rate")        # probe in about busy/4 of the cycles
        backpressure = draw(st.booleans(), label="back-pressure")
        n = draw(st.integers(1, self.max_cycles), label="cycles")
        mask = st.integers(0, (1 << self.caches) - 1)
        expected = []             # model pops: (block, line mask, cache mask, deadline)
        got = []                  # messages taken: (block, line mask, cache mask, cycle)
        pending = None            # probe presented, not yet accepted: (line, caches)
        held = None
        cycle = 0
        while cycle < n or pending is not None or model.groups or len(got) < len(expected):
            assert cycle < n + 4 * (self.window + 2) * (dut.groups + 4) + 100, "does not drain"
            if pending is None and cycle < n and draw(st.integers(0, 3), label="idle") < busy:
                b = draw(st.sampled_from(pool), label="block")
                pending = (b * blk + draw(st.integers(0, blk - 1), label="offset"), draw(mask, label="caches"))
            ready = draw(st.integers(0, 2), label="ready") > 0 if backpressure and cycle < n else True
            ctx.set(dut.probes.valid, pending is not None)
            if pending is not None:
                ctx.set(dut.probes.p.line, pending[0])
                ctx.set(dut.probes.p.caches, pending[1])
            ctx.set(dut.messages.ready, ready)

            assert ctx.get(dut.msgs_in) == model.msgs_in, f"cycle {cycle}: msgs_in"
            if ctx.get(dut.messages.valid):
                p = ctx.get(dut.messages.p.as_value())
                if held is not None:
                    assert p == held, f"cycle {cycle}: message changed while stalled"
                if ready:
                    got.append(self._fields(p) + (cycle,))
                held = None if ready else p
            else:
                assert held is None, f"cycle {cycle}: message withdrawn while stalled"
            if pending is not None and ctx.get(dut.probes.ready):
                model.add(pending[0], pending[1], cycle)
                pending = None
            for b in sorted(model.due(cycle), key=lambda b: model.groups[b][0]):
                deadline, _, caches = model.groups[b]
                lines = model.pop(b)
                expected.append((b, sum(1 << x for x in {l % blk for l in lines}), caches, deadline))
            await ctx.tick()
            cycle += 1

        assert ctx.get(dut.msgs_out) == model.msgs_out, "msgs_out"
        assert ctx.get(dut.msgs_in) == model.msgs_in, "msgs_in"
        if not backpressure:
            # every message exactly at deadline + LATENCY, in the model's order
            assert got == [(b, l, c, d + LATENCY) for b, l, c, d in expected]
        else:
            assert sorted(g[:3] for g in got) == sorted(e[:3] for e in expected)
            for b in pool:        # per block, the same order, never before deadline + LATENCY
                gb = [g for g in got if g[0] == b]
                eb = [e for e in expected if e[0] == b]
                assert [g[:3] for g in gb] == [e[:3] for e in eb], f"block {b:#x}"
                for g, e in zip(gb, eb):
                    assert g[3] >= e[3] + LATENCY, f"block {b:#x}: message before deadline + {LATENCY}"


_BENCHES = {}


@pytest.mark.parametrize("window,block,groups,caches", CONFIGS)
@given(data_=st.data())
def test_matches_golden_model(window, block, groups, caches, data_):
    key = (window, block, groups, caches)
    bench = _BENCHES.get(key)
    if bench is None:
        bench = _BENCHES[key] = _Bench(*key)
    bench.run(data_.draw)


def _simulate(dut, tb):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("window", [0, 1, 3])
def test_latency_and_merge(window):
    """Four probes to one block of 4 in consecutive cycles from cycle 0: the first window+1 of them
    (cycles 0..window) make one message, valid exactly in cycle window + 1."""
    dut = InvalidationCoalescer(window, 4, 4, 2, addr_width=ADDR_WIDTH)

    async def tb(ctx):
        ctx.set(dut.messages.ready, 1)
        seen = []
        for cycle in range(12):
            if cycle < 4:
                ctx.set(dut.probes.valid, 1)
                ctx.set(dut.probes.p.line, 0x40 + cycle)
                ctx.set(dut.probes.p.caches, 1 << (cycle % 2))
                assert ctx.get(dut.probes.ready)
            else:
                ctx.set(dut.probes.valid, 0)
            if ctx.get(dut.messages.valid):
                seen.append((ctx.get(dut.messages.p.block), ctx.get(dut.messages.p.lines),
                             ctx.get(dut.messages.p.caches), cycle))
            await ctx.tick()
        k = min(window + 1, 4)                     # probes in the first group
        first = (0x10, (1 << k) - 1, 0b11 if k > 1 else 0b01, window + 1)
        assert seen[0] == first
        assert sum(bin(s[1]).count("1") for s in seen) == 4
        assert ctx.get(dut.msgs_in) == 4

    _simulate(dut, tb)


def test_full_slots_stall_input():
    """One slot, window 2: a probe to another block waits until the open group's message is taken."""
    dut = InvalidationCoalescer(2, 2, 1, 1, addr_width=ADDR_WIDTH)

    async def tb(ctx):
        ctx.set(dut.messages.ready, 0)
        ctx.set(dut.probes.valid, 1)
        ctx.set(dut.probes.p.line, 0)
        ctx.set(dut.probes.p.caches, 1)
        await ctx.tick()                            # cycle 0: opens the slot (deadline 2)
        ctx.set(dut.probes.p.line, 8)
        for _ in range(5):                          # cycles 1..5: no free slot, output stalled
            assert not ctx.get(dut.probes.ready)
            await ctx.tick()
        assert ctx.get(dut.messages.valid)
        ctx.set(dut.messages.ready, 1)              # cycle 6: message taken, its slot reused at once
        assert ctx.get(dut.probes.ready)
        await ctx.tick()
        ctx.set(dut.probes.valid, 0)
        assert ctx.get(dut.msgs_out) == 1 and ctx.get(dut.msgs_in) == 2
        assert not ctx.get(dut.messages.valid)
        for _ in range(2):
            await ctx.tick()
        assert ctx.get(dut.messages.valid) and ctx.get(dut.messages.p.block) == 4

    _simulate(dut, tb)


@pytest.mark.parametrize("kwargs,name", [
    (dict(window=-1, block=4, groups=2, caches=2), "window"),
    (dict(window=1.5, block=4, groups=2, caches=2), "window"),
    (dict(window=True, block=4, groups=2, caches=2), "window"),
    (dict(window=1, block=3, groups=2, caches=2), "block"),
    (dict(window=1, block=0, groups=2, caches=2), "block"),
    (dict(window=1, block=4, groups=0, caches=2), "groups"),
    (dict(window=1, block=4, groups=2.0, caches=2), "groups"),
    (dict(window=1, block=4, groups=2, caches=0), "caches"),
    (dict(window=1, block=4, groups=2, caches=33), "caches"),
    (dict(window=1, block=16, groups=2, caches=2, addr_width=4), "addr_width"),
])
def test_bad_parameters_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name) as exc:
        InvalidationCoalescer(**kwargs)
    assert repr(kwargs[name]) in str(exc.value)


@pytest.mark.parametrize("window,block,groups,caches", [(0, 1, 1, 1), (2, 4, 2, 32)])
def test_converts_to_verilog(window, block, groups, caches):
    v = verilog.convert(InvalidationCoalescer(window, block, groups, caches), name="coalescer")
    assert "module coalescer" in v
