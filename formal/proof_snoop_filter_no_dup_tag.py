"""No valid tag twice in a snoop-filter set: SnoopFilter (hdl/dcoh/snoop_filter.py) with sets=2,
ways=2, caches=2, addr_width=6 (5-bit tags).

Environment (Assume, what the DCOH caller guarantees and the block's docstring requires): an
``ALLOCATE`` update targets a way that is not valid, with a line whose tag is not already valid in
that set.  Every other input (lookups, result back-pressure, MODIFY/FREE/TOUCH updates, entries,
busy masks) is free every cycle.  Reset stays low.
Property (Asserts): the block's own duplicate-tag Assert (the set written last cycle, read back
through its checker port) and its at-most-one-hit-way Assert; and, added by the harness through
one extra asynchronous read port per set on the block's memory, an explicit Assert over *every*
stored row that no two valid ways of the set hold the same tag (this makes the invariant inductive:
the block's own Assert only sees one set per cycle).
The RTL is unchanged: the harness subclasses SnoopFilter and adds the read ports to the ``mem``
submodule after the block's ``elaborate``.  Mode prove (k-induction).
"""

from amaranth.hdl import Assert, Assume, Elaboratable, Module
from amaranth.lib import data

from hdl.dcoh.snoop_filter import SFOp, SnoopFilter
from formal.common import Proof, drive_inputs, no_reset

SETS, WAYS, CACHES, ADDR_WIDTH = 2, 2, 2, 6


def assume_fresh_allocations(m, dut, rows):
    """The caller's guarantee (``Assume``): an ``ALLOCATE`` targets a way that is not valid, with a tag
    not already valid in that set.  ``rows[s]``: the stored row of set s."""
    upd = dut.update.p
    tag = upd.line[dut.set_bits:]
    for s, row in enumerate(rows):
        allocate_here = dut.update.valid & (upd.op == SFOp.ALLOCATE) & (upd.line[:dut.set_bits] == s)
        for w in range(dut.ways):
            m.d.comb += [
                Assume(~(allocate_here & row.ways[w].valid & (row.ways[w].tag == tag))),
                Assume(~(allocate_here & (upd.way == w) & row.ways[w].valid)),
            ]


def assert_no_duplicate_tags(m, rows, ways):
    """``Assert`` over every stored row that no two valid ways hold the same tag (the block's own
    Assert sees one set per cycle; this makes the invariant inductive)."""
    for s, row in enumerate(rows):
        for a in range(ways):
            for b in range(a + 1, ways):
                m.d.comb += Assert(~(row.ways[a].valid & row.ways[b].valid &
                                     (row.ways[a].tag == row.ways[b].tag)),
                                   f"harness: set {s} holds a valid tag in ways {a} and {b}")


def observe_rows(m, dut):
    """One asynchronous read port per set on ``dut``'s memory, for a harness: ``dut.rows[s]`` is the
    row of set s as stored now (an :class:`hdl.dcoh.snoop_filter.SFRow` view)."""
    mem = m.submodules.mem
    dut.rows = []
    for s in range(dut.sets):
        port = mem.read_port(domain="comb")
        m.d.comb += port.addr.eq(s)
        dut.rows.append(data.View(dut.row_layout, port.data))


def observed(filter_cls):
    """``filter_cls`` (a snoop filter) + one comb read port per set for a harness (:func:`observe_rows`)."""
    class Observed(filter_cls):
        def elaborate(self, platform):
            m = super().elaborate(platform)
            observe_rows(m, self)
            return m
    Observed.__name__ = f"Observed{filter_cls.__name__}"
    return Observed


def harness_module(dut, platform):
    """A harness module around ``dut`` (an :func:`observed` filter): the block elaborated here, once, so
    that ``dut.rows`` exists (the returned Module is the submodule), every input free, reset low."""
    dut._MustUse__silence = True        # elaborated by hand, not by Fragment.get
    m = Module()
    m.submodules.dut = dut.elaborate(platform)
    drive_inputs(m, dut)
    no_reset(m)
    return m


_ObservedSnoopFilter = observed(SnoopFilter)


class SnoopFilterNoDupTag(Elaboratable):
    def __init__(self, assume_fresh_tag=True):
        self.dut = _ObservedSnoopFilter(SETS, WAYS, CACHES, ADDR_WIDTH)
        self.assume_fresh_tag = assume_fresh_tag   # False: drop the caller's guarantee (the proof must FAIL)

    def elaborate(self, platform):
        dut = self.dut
        m = harness_module(dut, platform)
        if self.assume_fresh_tag:
            assume_fresh_allocations(m, dut, dut.rows)
        assert_no_duplicate_tags(m, dut.rows, dut.ways)
        return m


PROOF = Proof(
    name="snoop_filter_no_dup_tag",
    mode="prove", depth=4,
    harness=SnoopFilterNoDupTag,
    engine="smtbmc --unroll z3",   # without --unroll this z3 hangs in step 0 (see docs/formal.md)
    extra_script=["memory_map", "opt -fast"],   # 2 rows: flip-flops are far quicker for z3 than SMT arrays
    description=f"SnoopFilter(sets={SETS}, ways={WAYS}, caches={CACHES}, addr_width={ADDR_WIDTH}): "
                "no valid tag twice in a set",
)
