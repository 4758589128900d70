"""Snoop filter of the DCOH: a set-associative tag store with tree pseudo-LRU replacement.

RTL counterpart of :class:`models.dcoh.SnoopFilter`; it makes exactly the same choices (hit way,
free way, pseudo-LRU victim, busy fallback) and keeps the same pseudo-LRU bits.

Storage
-------
One :class:`amaranth.lib.memory.Memory` row per set (``sets`` rows).  A row holds, for each way,
``valid``, ``tag`` (``addr_width - log2(sets)`` bits), ``state`` (:class:`SFState`), ``dirty`` and
``presence`` (``caches`` bits), followed by the set's ``ways - 1`` pseudo-LRU bits (bit ``n-1`` is
tree node ``n``, heap order, root 1: the model's encoding).  A memory rather than flip-flops because
the array grows with ``sets * ways`` (64 x 4 with 46-bit addresses is ~12 k bits) and maps onto an
SRAM macro; a lookup only ever needs one set, which is what a row is.

The write port has a granularity of one bit, so every update is a *masked write* and never a
read-modify-write: allocate writes one way's fields and the bits on that way's path through the
pseudo-LRU tree (a touch sets those bits to fixed values, whatever they were), modify writes
state/dirty/presence of one way, free clears one valid bit, touch writes only the path bits.

Ports (see :class:`SnoopFilter`)
--------------------------------
``lookup`` (stream in, :class:`LookupRequest`)
    line address + ``busy`` mask over the ways of the line's set.  ``busy`` is supplied by the
    caller (the request tracker / snoop handler know which lines have a pending request or work in
    flight, and where each sits in the filter); it only matters when no way is free.
``result`` (stream out, :class:`LookupResult`)
    hit, hit way, the hit entry's fields, ``hit_clean_s`` (a hit on a line in S, not dirty: each way's
    state is checked beside its tag, so the flag is as shallow as ``hit``; the DCOH's snoop fast path
    reads it); and (computed for every lookup, meaningful on a miss) the
    allocation choice: ``FREE`` + the lowest free way; else ``VICTIM`` + the pseudo-LRU way, or if
    that way is busy the lowest non-busy way, + the victim's line address and entry; else ``NONE``.
``update`` (stream in, :class:`Update`)
    ``ALLOCATE`` / ``MODIFY`` / ``FREE`` / ``TOUCH`` of (set of ``line``, ``way``), one per cycle:
    ``update.ready`` is tied to 1; a ``MODIFY`` with ``touch`` set also touches the pseudo-LRU, in the
    same masked write (a fill's entry and its recency, one cycle).  (It is not declared
    ``always_ready``: ``verilog.convert`` of a component cannot yet take the resulting constant as a
    port, https://github.com/amaranth-lang/amaranth/issues/1574.)
    ``ALLOCATE`` must target a way that is not valid with a line that is not present (the model
    asserts the same); the Assert below catches a duplicate tag if the caller breaks this.

Latency and throughput
----------------------
A lookup accepted in cycle N (``lookup.valid & lookup.ready``) presents its result in cycle N+1:
latency 1 cycle, one lookup per cycle sustained (``lookup.ready = ~result.valid | result.ready``).
When ``result`` is stalled the result is held unchanged (stream rules), and ``lookup`` is not ready.

Ordering
--------
An update in cycle N is seen by a lookup accepted in cycle N (the read port is transparent to the
write port: *update before lookup* within a cycle) and by every later lookup.  A result is a
snapshot taken at acceptance: updates after cycle N do not change a result already computed,
including one held while ``result`` is stalled.

Checks
------
``Assert`` (sync domain, every cycle): the set written in cycle N is read back (post-write, through
a second read port, transparent to the write port) and checked in cycle N+1: no valid tag twice.
Every write is checked, so the invariant holds for all sets by induction from reset (all invalid).
Also every lookup result is checked for at most one hit way.  The checker read port costs a
second read port on the memory; it is only used by the Assert.

The constructor checks the parameters (the port shapes depend on them): ``sets`` and ``ways`` powers
of two >= 1, ``caches`` in 1..32, ``addr_width`` > log2(sets); else ``ValueError`` naming them.
"""

from amaranth.hdl import Assert, Cat, Const, Format, Module, Signal
from amaranth.hdl import MemoryData
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["SFState", "SFOp", "AllocKind", "SFEntry", "SFWay", "SFRow", "LookupRequest", "LookupResult",
           "Update", "SnoopFilter", "plru_way", "touch_path", "row_write", "answer", "check_no_duplicate_tag",
           "check_params"]


class SFState(enum.Enum, shape=2):
    """Device state of a line in the snoop filter."""
    PLACEHOLDER = 0   #: I: allocated for a read/ownership request still pending (the model's ``None``)
    S = 1
    E = 2


class SFOp(enum.Enum, shape=2):
    """Operation of the update port."""
    ALLOCATE = 0      #: valid, tag, state, dirty, presence of (set, way); touch the pseudo-LRU
    MODIFY = 1        #: state, dirty, presence of (set, way)
    FREE = 2          #: clear valid of (set, way)
    TOUCH = 3         #: pseudo-LRU only: point every node on the way's path away from it


class AllocKind(enum.Enum, shape=2):
    """Allocation choice of a lookup."""
    NONE = 0          #: every way is valid and busy
    FREE = 1          #: ``alloc_way`` is free
    VICTIM = 2        #: ``alloc_way`` holds ``victim_line`` (must be evicted before reuse)


class SFEntry(data.StructLayout):
    """The fields of an entry that the caller reads and writes."""
    def __init__(self, caches):
        super().__init__({"state": SFState, "dirty": 1, "presence": caches})


class SFWay(data.StructLayout):
    """One way as stored."""
    def __init__(self, tag_width, caches):
        super().__init__({"valid": 1, "tag": tag_width, "entry": SFEntry(caches)})


class SFRow(data.StructLayout):
    """One memory row: all ways of a set, then the set's pseudo-LRU bits."""
    def __init__(self, ways, tag_width, caches):
        super().__init__({"ways": data.ArrayLayout(SFWay(tag_width, caches), ways), "plru": ways - 1})


class LookupRequest(data.StructLayout):
    def __init__(self, addr_width, ways):
        super().__init__({"line": addr_width, "busy": ways})


class LookupResult(data.StructLayout):
    def __init__(self, addr_width, ways, caches):
        way_bits = exact_log2(ways)
        super().__init__({
            "line": addr_width,            # the line looked up
            "hit": 1,
            "hit_clean_s": 1,              # hit, and the line is S and not dirty (from the ways, in parallel)
            "hit_way": way_bits,           # valid if hit
            "entry": SFEntry(caches),      # valid if hit
            "alloc": AllocKind,            # computed for every lookup
            "alloc_way": way_bits,         # valid unless alloc is NONE
            "victim_line": addr_width,     # valid if alloc is VICTIM
            "victim": SFEntry(caches),     # valid if alloc is VICTIM
        })


class Update(data.StructLayout):
    def __init__(self, addr_width, ways, caches):
        super().__init__({
            "op": SFOp,
            "line": addr_width,            # selects the set; ALLOCATE also stores its tag
            "way": exact_log2(ways),
            "entry": SFEntry(caches),      # ALLOCATE, MODIFY
            "touch": 1,                    # MODIFY: touch the pseudo-LRU too (the same masked write)
        })


def plru_way(bits, way_bits):
    """The way the pseudo-LRU bits point at: from the root, go right where a node's bit is 1."""
    node = Const(1, 1)
    for _ in range(way_bits):
        node = Cat(bits.bit_select((node - 1)[:len(node)], 1), node)   # 2 * node + bit
    return node[:way_bits]                                  # node - ways


def touch_path(way, ways):
    """(mask, value) over the pseudo-LRU bits for a touch of ``way``: every node on the path of the
    way's leaf is set to point away from it (bit = 1 iff the used child is the left one)."""
    way_bits = exact_log2(ways)
    mask, value = [], []
    for n in range(1, ways):
        depth = n.bit_length() - 1
        shift = way_bits - depth                  # leaf >> shift == n iff n is on the path
        mask.append(way[shift:] == n - (1 << depth))
        value.append(~way[shift - 1])
    return Cat(*mask), Cat(*value)


def row_write(m, update, row_layout, ways, set_bits):
    """The masked write of one update (``update``: the update stream, its op applied only while valid):
    (row data, row bit mask) as signals.  Allocate writes one way and its pseudo-LRU path, modify a
    way's entry (and the path with ``touch``), free one valid bit, touch only the path."""
    upd = update.p
    wdata = Signal(row_layout)
    wmask = Signal(row_layout)
    path_mask, path_value = touch_path(upd.way, ways)
    for w in range(ways):
        m.d.comb += [
            wdata.ways[w].valid.eq(upd.op == SFOp.ALLOCATE),
            wdata.ways[w].tag.eq(upd.line[set_bits:]),
            wdata.ways[w].entry.eq(upd.entry),
        ]
    m.d.comb += wdata.plru.eq(path_value)
    with m.If(update.valid):
        with m.Switch(upd.op):
            with m.Case(SFOp.ALLOCATE):
                for w in range(ways):
                    with m.If(upd.way == w):
                        m.d.comb += wmask.ways[w].eq(-1)
                m.d.comb += wmask.plru.eq(path_mask)
            with m.Case(SFOp.MODIFY):
                for w in range(ways):
                    with m.If(upd.way == w):
                        m.d.comb += wmask.ways[w].entry.eq(-1)
                with m.If(upd.touch):
                    m.d.comb += wmask.plru.eq(path_mask)
            with m.Case(SFOp.FREE):
                for w in range(ways):
                    with m.If(upd.way == w):
                        m.d.comb += wmask.ways[w].valid.eq(1)
            with m.Case(SFOp.TOUCH):
                m.d.comb += wmask.plru.eq(path_mask)
    return wdata, wmask


def answer(m, row, line, busy, res, ways, set_bits, tag_eq=None):
    """Drive the fields of ``res`` (a :class:`LookupResult` view) for a lookup of ``line`` in ``row``
    (an :class:`SFRow` view of the line's set) with ``busy`` over its ways: the hit and its entry, and
    the allocation choice (lowest free way, else the pseudo-LRU victim, else the lowest way not busy).
    ``tag_eq``: the ways whose tag is the line's, when the caller has them (from a register); else the
    tags are compared here.  Returns the one-hot (or, in a broken store, many-hot) hit vector, for the
    checks."""
    way_bits = exact_log2(ways)
    tag = line[set_bits:]
    hits = Signal(ways)
    free = Signal(ways)
    for w in range(ways):
        eq = (row.ways[w].tag == tag) if tag_eq is None else tag_eq[w]
        m.d.comb += [
            hits[w].eq(row.ways[w].valid & eq),
            free[w].eq(~row.ways[w].valid),
        ]
    # hit_clean_s as deep as hit: each way's state compared beside its tag, not after the hit-way select
    clean_s = Cat(hits[w] & (row.ways[w].entry.state == SFState.S) & ~row.ways[w].entry.dirty
                  for w in range(ways))
    m.d.comb += [res.line.eq(line), res.hit.eq(hits.any()), res.hit_clean_s.eq(clean_s.any())]
    for w in reversed(range(ways)):                    # lowest-numbered wins (last assignment)
        with m.If(hits[w]):
            m.d.comb += [res.hit_way.eq(w), res.entry.eq(row.ways[w].entry)]

    victim_way = Signal(way_bits)
    m.d.comb += victim_way.eq(plru_way(row.plru, way_bits))
    free_way = Signal(way_bits)
    idle_way = Signal(way_bits)                         # lowest-numbered way that is not busy
    for w in reversed(range(ways)):
        with m.If(free[w]):
            m.d.comb += free_way.eq(w)
        with m.If(~busy[w]):
            m.d.comb += idle_way.eq(w)
    # The allocation decision goes into signals of its own, and the victim is selected by those: read
    # back from the packed result, ``res.alloc_way`` would make the result signal depend on itself
    # (a false combinational loop for a simulator that sees the struct as one vector).
    alloc = Signal(AllocKind)
    alloc_way = Signal(way_bits)
    with m.If(free.any()):
        m.d.comb += [alloc.eq(AllocKind.FREE), alloc_way.eq(free_way)]
    with m.Elif(~busy.bit_select(victim_way, 1)):
        m.d.comb += [alloc.eq(AllocKind.VICTIM), alloc_way.eq(victim_way)]
    with m.Elif(~busy.all()):
        m.d.comb += [alloc.eq(AllocKind.VICTIM), alloc_way.eq(idle_way)]
    with m.Else():
        m.d.comb += [alloc.eq(AllocKind.NONE), alloc_way.eq(0)]
    m.d.comb += [res.alloc.eq(alloc), res.alloc_way.eq(alloc_way)]
    victim = row.ways[alloc_way]
    m.d.comb += [
        res.victim_line.eq(Cat(line[:set_bits], victim.tag)),
        res.victim.eq(victim.entry),
    ]
    return hits


def check_no_duplicate_tag(m, mem, wp, sets, ways, row_layout):
    """``Assert``: the set written in cycle N, read back in cycle N+1 through a read port of its own
    (transparent to the write port), holds no valid tag twice.  Every write is checked, so the
    invariant holds for every set by induction from reset (all invalid)."""
    cp = mem.read_port(transparent_for=(wp,))
    m.d.comb += [cp.en.eq(1), cp.addr.eq(wp.addr)]
    # at least one bit wide: with one set the address is 0 bits, which Verilog cannot print ({0{...}})
    check_set = Signal(range(max(sets, 2)))
    m.d.sync += check_set.eq(wp.addr)
    crow = data.View(row_layout, cp.data)
    dup = Const(0)
    for a in range(ways):
        for b in range(a + 1, ways):
            dup = dup | (crow.ways[a].valid & crow.ways[b].valid & (crow.ways[a].tag == crow.ways[b].tag))
    m.d.sync += Assert(~dup, Format("snoop filter: set {} holds a valid tag twice", check_set))


def check_params(cls, sets, ways, caches, addr_width):
    """The constructor's checks shared by the snoop filters; returns log2(sets)."""
    for name, value in (("sets", sets), ("ways", ways)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value & (value - 1):
            raise ValueError(f"{cls}: {name} must be a power of two >= 1, not {value!r}")
    if not isinstance(caches, int) or isinstance(caches, bool) or not 1 <= caches <= 32:
        raise ValueError(f"{cls}: caches must be an integer in 1..32, not {caches!r}")
    set_bits = exact_log2(sets)
    if not isinstance(addr_width, int) or isinstance(addr_width, bool) or addr_width <= set_bits:
        raise ValueError(f"{cls}: addr_width must be an integer > log2(sets) = {set_bits}, "
                         f"not {addr_width!r}")
    return set_bits


class SnoopFilter(wiring.Component):
    """Set-associative snoop filter (see the module docstring for storage, latency and ordering).

    Parameters
    ----------
    sets, ways : int
        Powers of two >= 1.
    caches : int
        Number of internal caches K (width of the presence vector), 1..32.
    addr_width : int
        Width of a line address (46: HPA[51:6]); the tag is ``addr_width - log2(sets)`` bits.
    busy_at_result : bool
        False (default): the busy mask comes with the lookup request (``lookup.p.busy``) and is
        registered with it.  True: it is read from the ``result_busy`` input in the cycle the result is
        offered, combinationally, for the line in ``result.p.line`` (``lookup.p.busy`` is then
        ignored).  A caller whose busy mask depends on what it writes in the lookup's own cycle
        (the DCOH's chained dispatch) can then work it out from its registers a cycle later, when they
        hold those writes, instead of from the writes themselves.

    Attributes
    ----------
    storage : MemoryData
        The tag store, one :class:`SFRow` (as an unsigned integer) per set; tests read it.
    row_layout : SFRow
    """

    def __init__(self, sets, ways, caches, addr_width=46, busy_at_result=False):
        set_bits = check_params("SnoopFilter", sets, ways, caches, addr_width)
        self.sets, self.ways, self.caches, self.addr_width = sets, ways, caches, addr_width
        self.set_bits, self.way_bits = set_bits, exact_log2(ways)
        self.tag_width = addr_width - set_bits
        self.row_layout = SFRow(ways, self.tag_width, caches)
        self.storage = MemoryData(shape=self.row_layout.size, depth=sets, init=[])
        if not isinstance(busy_at_result, bool):
            raise ValueError(f"SnoopFilter: busy_at_result must be True or False, not {busy_at_result!r}")
        self.busy_at_result = busy_at_result
        members = {
            "lookup": In(stream.Signature(LookupRequest(addr_width, ways))),
            "result": Out(stream.Signature(LookupResult(addr_width, ways, caches))),
            "update": In(stream.Signature(Update(addr_width, ways, caches))),
        }
        if busy_at_result:
            members["result_busy"] = In(ways)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        ways = self.ways

        m.submodules.mem = mem = Memory(data=self.storage)
        wp = mem.write_port(granularity=1)
        rp = mem.read_port(transparent_for=(wp,))          # lookup

        def set_of(line):
            return line[:self.set_bits]

        # ---- update: one masked write per cycle ------------------------------------------------
        m.d.comb += self.update.ready.eq(1)
        wdata, wmask = row_write(m, self.update, self.row_layout, ways, self.set_bits)
        m.d.comb += [
            wp.addr.eq(set_of(self.update.p.line)),
            wp.data.eq(wdata),
            wp.en.eq(wmask),
        ]

        # ---- lookup: read the set in cycle N, compare in cycle N+1 ------------------------------
        req, res = self.lookup.p, self.result.p
        s1_line = Signal(self.addr_width)
        s1_busy = Signal(ways)
        accept = Signal()
        m.d.comb += [
            accept.eq(~self.result.valid | self.result.ready),
            self.lookup.ready.eq(accept),
            rp.en.eq(accept),
            rp.addr.eq(set_of(req.line)),
        ]
        with m.If(accept):
            m.d.sync += [
                self.result.valid.eq(self.lookup.valid),
                s1_line.eq(req.line),
                s1_busy.eq(req.busy),
            ]

        busy = Signal(ways)
        m.d.comb += busy.eq(self.result_busy if self.busy_at_result else s1_busy)
        hits = answer(m, data.View(self.row_layout, rp.data), s1_line, busy, res, ways, self.set_bits)

        # ---- invariants -------------------------------------------------------------------------
        check_no_duplicate_tag(m, mem, wp, self.sets, ways, self.row_layout)
        m.d.sync += Assert(~self.result.valid | ((hits & (hits - 1)) == 0),
                           Format("snoop filter: line {:#x} hits ways {:#b}", s1_line, hits))
        return m
