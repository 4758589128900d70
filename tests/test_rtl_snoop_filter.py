"""RTL snoop filter (hdl.dcoh.snoop_filter) against the golden model's SnoopFilter (models.dcoh).

Hypothesis draws, cycle by cycle, an update (allocate into the chosen free way, evict the chosen victim
then allocate into its way, modify, free, touch), a lookup (present or absent line, random busy mask)
and the result stream's ready; the model applies the same operations (the update of a cycle before the
lookup accepted in that cycle).  Every result is compared with the model's hit/way/entry and
allocation choice, the result latency (1 cycle) is checked, and after every cycle the whole tag store
(valid/tag/state/dirty/presence of every way and the pseudo-LRU bits of every set) is compared.
"""

from collections import deque

import pytest
from amaranth.back import verilog
from amaranth.hdl import Shape
from amaranth.lib import data, enum
from amaranth.sim import Simulator
from hypothesis import given, strategies as st

from hdl.dcoh.snoop_filter import AllocKind, SFOp, SFState, SnoopFilter
from models.dcoh import SnoopFilter as ModelSF
from cxl.coherence import DevState as D

CACHES = 2
ADDR_WIDTH = 46
TO_RTL = {None: SFState.PLACEHOLDER, D.S: SFState.S, D.E: SFState.E}
FROM_RTL = {v: k for k, v in TO_RTL.items()}

CONFIGS = [(1, 1), (2, 2), (4, 2), (1, 4), (2, 4)]     # (sets, ways)


class _Flat:
    """A lib.data layout flattened to {field path: (offset, width, enum)}: decoding and encoding plain
    integers this way is much faster in the simulation loop than going through data.Const views."""

    def __init__(self, layout):
        self.fields = {}
        self._walk(layout, 0, ())

    def _walk(self, shape, base, path):
        if isinstance(shape, data.ArrayLayout):
            for i in range(shape.length):
                self._walk(shape.elem_shape, base + i * shape.elem_shape.size, path + (i,))
        elif isinstance(shape, data.StructLayout):
            for name, field in shape:
                self._walk(field.shape, base + field.offset, path + (name,))
        else:
            cls = shape if isinstance(shape, type) and issubclass(shape, enum.Enum) else None
            self.fields[path] = (base, Shape.cast(shape).width, cls)

    def get(self, value, *path):
        off, width, cls = self.fields[path]
        v = (value >> off) & ((1 << width) - 1)
        return cls(v) if cls is not None else v

    def encode(self, **values):
        """values: field paths joined by '__' (e.g. entry__state=...) -> integer."""
        word = 0
        for key, v in values.items():
            off, width, _ = self.fields[tuple(key.split("__"))]
            word |= (int(v.value if isinstance(v, enum.Enum) else v) & ((1 << width) - 1)) << off
        return word


class _Codecs:
    def __init__(self, dut):
        self.row = _Flat(dut.row_layout)
        self.result = _Flat(dut.result.p.shape())
        self.lookup = _Flat(dut.lookup.p.shape())
        self.update = _Flat(dut.update.p.shape())


def _entry_of(flat, value, *path):
    return (FROM_RTL[flat.get(value, *path, "state")], bool(flat.get(value, *path, "dirty")),
            flat.get(value, *path, "presence"))


def _model_entry(e):
    return (e.state, e.dirty, e.presence)


def _expected(model, line, busy):
    """What the RTL must answer for a lookup of ``line`` with ``busy`` (a mask over the set's ways)."""
    s = model.set_of(line)
    e = model.lookup(line)
    exp = {"hit": e is not None, "hit_clean_s": e is not None and e.state is D.S and not e.dirty}
    if e is not None:
        exp["hit_way"], exp["entry"] = e.way, _model_entry(e)
    w = model.free_way(s)
    if w is not None:
        exp["alloc"], exp["alloc_way"] = AllocKind.FREE, w
    else:
        busy_lines = {model.tags[s][w] for w in range(model.ways) if busy >> w & 1}
        w = model.victim(s, busy_lines)
        if w is None:
            exp["alloc"] = AllocKind.NONE
        else:
            v = model.tags[s][w]
            exp["alloc"], exp["alloc_way"] = AllocKind.VICTIM, w
            exp["victim_line"], exp["victim"] = v, _model_entry(model.entries[v])
    return exp


def _got(c, p):
    """The same fields read from a result payload (an integer), keeping only the meaningful ones."""
    f = c.result
    got = {"hit": bool(f.get(p, "hit")), "hit_clean_s": bool(f.get(p, "hit_clean_s")), "alloc": f.get(p, "alloc")}
    if got["hit"]:
        got["hit_way"], got["entry"] = f.get(p, "hit_way"), _entry_of(f, p, "entry")
    if got["alloc"] != AllocKind.NONE:
        got["alloc_way"] = f.get(p, "alloc_way")
    if got["alloc"] == AllocKind.VICTIM:
        got["victim_line"], got["victim"] = f.get(p, "victim_line"), _entry_of(f, p, "victim")
    return got


def _apply(model, u):
    """Apply an update (op, line, way, (state, dirty, presence)[, touch]) to the model."""
    op, line, way, fields = u[:4]
    if op is SFOp.ALLOCATE:
        e = model.allocate(line, way)
        e.state, e.dirty, e.presence = fields
    elif op is SFOp.MODIFY:
        e = model.entries[line]
        e.state, e.dirty, e.presence = fields
        if u[4:] and u[4]:                     # MODIFY with touch: the pseudo-LRU too
            model.touch(e.set, e.way)
    elif op is SFOp.FREE:
        model.free(line)
    else:
        e = model.entries[line]
        model.touch(e.set, e.way)


def _compare_storage(ctx, dut, c, model):
    f = c.row
    for s in range(model.sets):
        row = ctx.get(dut.storage[s])
        plru = f.get(row, "plru")
        assert plru == model.plru[s], f"set {s}: plru {plru:#b} != model {model.plru[s]:#b}"
        for w in range(model.ways):
            line = model.tags[s][w]
            valid = f.get(row, "ways", w, "valid")
            assert bool(valid) == (line is not None), f"set {s} way {w}: valid {valid}, model {line}"
            if line is not None:
                assert f.get(row, "ways", w, "tag") == line >> dut.set_bits, f"set {s} way {w}: tag"
                assert _entry_of(f, row, "ways", w, "entry") == _model_entry(model.entries[line]), \
                    f"set {s} way {w}: entry"


def _lines(sets, ways):
    """A pool of line addresses: enough per set to overflow it, plus some with high tag bits."""
    small = list(range(sets * (ways + 2)))
    high = [(1 << (ADDR_WIDTH - 1)) | l for l in range(sets)] + [(1 << ADDR_WIDTH) - 1 - l for l in range(sets)]
    return small + high


def _draw_update(draw, model, lines, caches, queue):
    """One update for this cycle (or None); an eviction queues the allocation for the next cycle."""
    if queue:
        return queue.popleft()
    present = sorted(model.entries)
    absent = [l for l in lines if l not in model.entries]
    fields = st.tuples(st.sampled_from([None, D.S, D.E]), st.booleans(), st.integers(0, (1 << caches) - 1))
    # allocation weighted up so that sets fill and victims (and the busy fallback) get exercised
    kinds = ["none", "allocate", "allocate", "allocate"] + (["modify", "free", "touch"] if present else [])
    # touch is drawn for every op: MODIFY must also touch when it is set, the others must ignore it
    touch = draw(st.booleans(), label="touch")
    kind = draw(st.sampled_from(kinds), label="update")
    if kind == "none":
        return None
    if kind == "allocate":
        line = draw(st.sampled_from(absent), label="line")
        s = model.set_of(line)
        free = [w for w in range(model.ways) if model.tags[s][w] is None]
        if free:
            # mostly the way the filter chooses (the lowest free one); sometimes any free way
            way = free[0] if draw(st.booleans(), label="chosen way") else draw(st.sampled_from(free))
            return (SFOp.ALLOCATE, line, way, draw(fields), touch)
        busy = draw(st.integers(0, (1 << model.ways) - 1), label="busy")
        way = model.victim(s, {model.tags[s][w] for w in range(model.ways) if busy >> w & 1})
        if way is None:
            return None
        queue.append((SFOp.ALLOCATE, line, way, draw(fields)))
        return (SFOp.FREE, model.tags[s][way], way, (None, False, 0))
    line = draw(st.sampled_from(present), label="line")
    way = model.entries[line].way
    op = {"modify": SFOp.MODIFY, "free": SFOp.FREE, "touch": SFOp.TOUCH}[kind]
    return (op, line, way, draw(fields) if op is SFOp.MODIFY else (None, False, 0), touch)


def _set_update(ctx, dut, c, u):
    ctx.set(dut.update.valid, u is not None)
    if u is not None:
        op, line, way, (state, dirty, presence) = u[:4]
        ctx.set(dut.update.p.as_value(), c.update.encode(op=op, line=line, way=way, entry__state=TO_RTL[state],
                                                         entry__dirty=dirty, entry__presence=presence,
                                                         touch=bool(u[4:] and u[4])))


class _Bench:
    """One elaborated DUT and Simulator per configuration, reset between Hypothesis examples (building
    a Simulator costs more than a whole example).  ``example`` holds the current model and draw."""

    def __init__(self, sets, ways, max_cycles=40, busy_at_result=False):
        self.dut = SnoopFilter(sets, ways, CACHES, addr_width=ADDR_WIDTH, busy_at_result=busy_at_result)
        self.late = busy_at_result
        self.codecs = _Codecs(self.dut)
        self.lines = _lines(sets, ways)
        self.max_cycles = max_cycles
        self.example = None
        self.fresh = True          # the testbench added below has not run yet: no reset needed
        self.sim = Simulator(self.dut)
        self.sim.add_clock(1e-6)
        self.sim.add_testbench(self._tb)

    def run(self, model, draw):
        self.example = (model, draw)
        if not self.fresh:
            self.sim.reset()
        self.fresh = False
        self.sim.run()

    async def _tb(self, ctx):
        dut, c, lines = self.dut, self.codecs, self.lines
        model, draw = self.example
        queue = deque()            # updates queued by an eviction
        pending = None             # lookup presented and not yet accepted: (line, busy)
        expected = deque()         # results in flight: (line, expected fields)
        held = None                # result payload seen stalled last cycle
        n = draw(st.integers(1, self.max_cycles), label="cycles")
        cycle = 0
        while cycle < n or pending is not None or expected:
            draining = cycle >= n
            u = None if draining else _draw_update(draw, model, lines, CACHES, queue)
            if pending is None and not draining and draw(st.booleans(), label="lookup"):
                if model.entries and draw(st.booleans(), label="present"):
                    line = draw(st.sampled_from(sorted(model.entries)), label="line")
                else:
                    line = draw(st.sampled_from(lines), label="line")
                pending = (line, draw(st.integers(0, (1 << model.ways) - 1), label="busy"))
            ready = True if draining else draw(st.integers(0, 3), label="ready") > 0
            _set_update(ctx, dut, c, u)
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
                got, (line, exp, _) = _got(c, p), expected[0]
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
                _apply(model, u)
            if accepted:
                expected.append((pending[0], _expected(model, *pending), pending[1]))
                pending = None
            await ctx.tick()
            model.check()
            _compare_storage(ctx, dut, c, model)
            cycle += 1


_BENCHES = {}


@pytest.mark.parametrize("sets,ways", CONFIGS)
@given(data_=st.data())
def test_matches_golden_model(sets, ways, data_):
    bench = _BENCHES.get((sets, ways))
    if bench is None:
        bench = _BENCHES[(sets, ways)] = _Bench(sets, ways)
    bench.run(ModelSF(sets, ways), data_.draw)


@pytest.mark.parametrize("sets,ways", [(1, 4), (4, 2)])
@given(data_=st.data())
def test_busy_at_result_matches_golden_model(sets, ways, data_):
    """``busy_at_result=True``: the busy mask is read from ``result_busy`` in the result's cycle (held
    with a stalled result) and the request's own mask is ignored; the same golden model decides."""
    bench = _BENCHES.get((sets, ways, "late"))
    if bench is None:
        bench = _BENCHES[(sets, ways, "late")] = _Bench(sets, ways, busy_at_result=True)
    bench.run(ModelSF(sets, ways), data_.draw)


def _simulate(dut, tb):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


def test_back_to_back_lookups_one_per_cycle():
    """Sustained throughput: 8 lookups in 8 consecutive cycles, each answered the next cycle."""
    dut, model = SnoopFilter(4, 2, CACHES), ModelSF(4, 2)
    c = _Codecs(dut)
    e = model.allocate(5, 0)
    e.state, e.dirty, e.presence = D.E, True, 0b10

    async def tb(ctx):
        ctx.set(dut.result.ready, 1)
        _set_update(ctx, dut, c, (SFOp.ALLOCATE, 5, 0, (D.E, True, 0b10)))
        await ctx.tick()
        _set_update(ctx, dut, c, None)
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
                assert _got(c, p) == _expected(model, i - 1, 0)
            await ctx.tick()
        assert seen == list(range(8))

    _simulate(dut, tb)


@pytest.mark.parametrize("kwargs,name", [
    (dict(sets=3, ways=2, caches=2), "sets"),
    (dict(sets=0, ways=2, caches=2), "sets"),
    (dict(sets=True, ways=2, caches=2), "sets"),
    (dict(sets=4, ways=6, caches=2), "ways"),
    (dict(sets=4, ways=0, caches=2), "ways"),
    (dict(sets=4, ways=2.0, caches=2), "ways"),
    (dict(sets=4, ways=2, caches=0), "caches"),
    (dict(sets=4, ways=2, caches=33), "caches"),
    (dict(sets=16, ways=2, caches=2, addr_width=4), "addr_width"),
    (dict(sets=4, ways=2, caches=2, busy_at_result=1), "busy_at_result"),
])
def test_bad_parameters_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name) as exc:
        SnoopFilter(**kwargs)
    assert repr(kwargs[name]) in str(exc.value)


def test_duplicate_tag_assert_fires():
    """Allocating one line into two ways of its set through the update port trips the RTL Assert."""
    dut = SnoopFilter(2, 2, CACHES)
    c = _Codecs(dut)

    async def tb(ctx):
        for way in (0, 1):
            _set_update(ctx, dut, c, (SFOp.ALLOCATE, 6, way, (D.S, False, 1)))
            await ctx.tick()
        _set_update(ctx, dut, c, None)
        for _ in range(3):
            await ctx.tick()

    with pytest.raises(AssertionError, match="holds a valid tag twice"):
        _simulate(dut, tb)


def test_same_tag_in_different_sets_is_fine():
    dut = SnoopFilter(2, 2, CACHES)
    c = _Codecs(dut)

    async def tb(ctx):
        for line in (6, 7, 4):           # tags 3, 3 (sets 0 and 1), then tag 2 in set 0
            _set_update(ctx, dut, c, (SFOp.ALLOCATE, line, 0 if line != 4 else 1, (D.S, False, 1)))
            await ctx.tick()
        _set_update(ctx, dut, c, None)
        for _ in range(3):
            await ctx.tick()

    _simulate(dut, tb)


@pytest.mark.parametrize("sets,ways,caches", [(64, 4, 2), (1, 1, 1), (16, 8, 32)])
def test_converts_to_verilog(sets, ways, caches):
    v = verilog.convert(SnoopFilter(sets, ways, caches), name="snoop_filter")
    assert "module snoop_filter" in v
