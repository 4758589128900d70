"""Shared by the snoop-filter tests (tests/test_rtl_snoop_filter.py, tests/test_rtl_sf_pipe.py): the
golden model's answer to a lookup, the RTL's answer read from a result payload, random updates that keep
the model's rules, and a comparison of the whole tag store."""

from amaranth.hdl import Shape
from amaranth.lib import data, enum
from amaranth.sim import Simulator
from hypothesis import strategies as st

from tb.reused_sim import ReusedSimulator

from hdl.dcoh.snoop_filter import AllocKind, SFOp, SFState
from cxl.coherence import DevState as D

CACHES = 2
ADDR_WIDTH = 46
TO_RTL = {None: SFState.PLACEHOLDER, D.S: SFState.S, D.E: SFState.E}
FROM_RTL = {v: k for k, v in TO_RTL.items()}

CONFIGS = [(1, 1), (2, 2), (4, 2), (1, 4), (2, 4)]     # (sets, ways)


class Flat:
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


class Codecs:
    def __init__(self, dut):
        self.row = Flat(dut.row_layout)
        self.result = Flat(dut.result.p.shape())
        self.lookup = Flat(dut.lookup.p.shape())
        self.update = Flat(dut.update.p.shape())


def entry_of(flat, value, *path):
    return (FROM_RTL[flat.get(value, *path, "state")], bool(flat.get(value, *path, "dirty")),
            flat.get(value, *path, "presence"))


def model_entry(e):
    return (e.state, e.dirty, e.presence)


def expected_answer(model, line, busy):
    """What the RTL must answer for a lookup of ``line`` with ``busy`` (a mask over the set's ways)."""
    s = model.set_of(line)
    e = model.lookup(line)
    exp = {"hit": e is not None, "hit_clean_s": e is not None and e.state is D.S and not e.dirty}
    if e is not None:
        exp["hit_way"], exp["entry"] = e.way, model_entry(e)
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
            exp["victim_line"], exp["victim"] = v, model_entry(model.entries[v])
    return exp


def got_answer(c, p):
    """The same fields read from a result payload (an integer), keeping only the meaningful ones."""
    f = c.result
    got = {"hit": bool(f.get(p, "hit")), "hit_clean_s": bool(f.get(p, "hit_clean_s")), "alloc": f.get(p, "alloc")}
    if got["hit"]:
        got["hit_way"], got["entry"] = f.get(p, "hit_way"), entry_of(f, p, "entry")
    if got["alloc"] != AllocKind.NONE:
        got["alloc_way"] = f.get(p, "alloc_way")
    if got["alloc"] == AllocKind.VICTIM:
        got["victim_line"], got["victim"] = f.get(p, "victim_line"), entry_of(f, p, "victim")
    return got


def apply_update(model, u):
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


def compare_storage(ctx, dut, c, model):
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
                assert entry_of(f, row, "ways", w, "entry") == model_entry(model.entries[line]), \
                    f"set {s} way {w}: entry"


def line_pool(sets, ways):
    """A pool of line addresses: enough per set to overflow it, plus some with high tag bits."""
    small = list(range(sets * (ways + 2)))
    high = [(1 << (ADDR_WIDTH - 1)) | l for l in range(sets)] + [(1 << ADDR_WIDTH) - 1 - l for l in range(sets)]
    return small + high


def draw_update(draw, model, lines, caches, queue):
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


def set_update(ctx, dut, c, u):
    ctx.set(dut.update.valid, u is not None)
    if u is not None:
        op, line, way, (state, dirty, presence) = u[:4]
        ctx.set(dut.update.p.as_value(), c.update.encode(op=op, line=line, way=way, entry__state=TO_RTL[state],
                                                         entry__dirty=dirty, entry__presence=presence,
                                                         touch=bool(u[4:] and u[4])))


def draw_lookup_line(draw, model, lines):
    """A line to look up: mostly one the model holds, else any of ``lines``."""
    if model.entries and draw(st.booleans(), label="present"):
        return draw(st.sampled_from(sorted(model.entries)), label="line")
    return draw(st.sampled_from(lines), label="line")


def draw_busy(draw, model):
    """A busy mask over a set's ways."""
    return draw(st.integers(0, (1 << model.ways) - 1), label="busy")


async def end_cycle(ctx, dut, c, model):
    """The clock edge, then the model's own checks and the whole tag store against the model's."""
    await ctx.tick()
    model.check()
    compare_storage(ctx, dut, c, model)


class ModelBench(ReusedSimulator):
    """A snoop filter under Hypothesis: one elaborated DUT and simulator per configuration, reset
    between examples (building a simulator costs more than a whole example).  ``run((model, draw))``;
    subclasses write ``_bench``."""

    def __init__(self, dut, sets, ways, max_cycles=40):
        self.codecs = Codecs(dut)
        self.lines = line_pool(sets, ways)
        self.max_cycles = max_cycles
        super().__init__(dut, period=1e-6)


_BENCHES = {}


def cached_bench(key, make):
    """The bench built by ``make()`` for ``key``, built once per test process (the test modules share
    this table: put the bench class in the key)."""
    if key not in _BENCHES:
        _BENCHES[key] = make()
    return _BENCHES[key]


def simulate(dut, tb):
    """Run testbench ``tb`` on ``dut`` once."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


# Geometries both filters reject (hdl/dcoh/snoop_filter.py ``check_params``): (keyword arguments, the
# parameter the error must name); each test module adds its own class's extra parameters.
BAD_GEOMETRY = [
    (dict(sets=3, ways=2, caches=2), "sets"),
    (dict(sets=0, ways=2, caches=2), "sets"),
    (dict(sets=True, ways=2, caches=2), "sets"),
    (dict(sets=4, ways=6, caches=2), "ways"),
    (dict(sets=4, ways=0, caches=2), "ways"),
    (dict(sets=4, ways=2.0, caches=2), "ways"),
    (dict(sets=4, ways=2, caches=0), "caches"),
    (dict(sets=4, ways=2, caches=33), "caches"),
    (dict(sets=16, ways=2, caches=2, addr_width=4), "addr_width"),
]


def duplicate_tag_trips_the_assert(dut):
    """Allocate one line into both ways of set 0 of ``dut`` (a 2-set x 2-way filter) through its update
    port: the filter's duplicate-tag Assert must stop the simulation."""
    c = Codecs(dut)

    async def tb(ctx):
        for way in (0, 1):
            set_update(ctx, dut, c, (SFOp.ALLOCATE, 6, way, (D.S, False, 1)))
            await ctx.tick()
        set_update(ctx, dut, c, None)
        for _ in range(3):
            await ctx.tick()

    try:
        simulate(dut, tb)
    except AssertionError as e:
        return "holds a valid tag twice" in str(e)
    return False
