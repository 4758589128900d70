"""The DCOH's work table: the lines with probes outstanding, in flip-flops, written only through ports.

An entry is a line whose internal copies are being probed: for a host snoop that needs them (``snoop``:
its opcode and UQID wait here for the answer) and/or for a back-invalidation (``evict``: the CQID
reserved for the eviction that follows). It becomes ``ready`` when the caches take a probe message that
names its line; the engine then works the line (the snoop's answer, the eviction) and frees the entry.
The entries stay in registers for the same reason as the tracker's (hdl/dcoh/tracker.py): the engine
compares every entry's line with a lookup's and every entry's way with the looked-up set's. And they are
written the same way, through ports, so each entry has one enable per port and the engine's choice of
what to write is made once, on the port.

Ports (writes land at the clock edge):

* ``entries`` (out): every entry, registered (:func:`work_entry`).
* ``readied`` (in): one bit per entry: the caches took a probe message naming its line (``ready`` set).
* ``new`` (in): ``valid``, ``idx``, ``entry``: the whole entry ``idx`` is written (work starts).
* ``snoop`` (in): ``valid``, ``idx``, ``op``, ``uqid``: a host snoop joins the work already under way
  on its line (a back-invalidation's), and is answered when that work is done.
* ``take`` (in): ``valid``, ``idx``: the engine takes up the work of entry ``idx`` (``ready`` cleared).
* ``cur`` (in): ``idx`` and five strobes for the entry the engine is working on: ``clr_valid`` (done),
  ``clr_snoop`` (the snoop answered), ``set_ready`` (more work follows at once: the eviction after
  the snoop's answer), ``clr_ready`` (the work is taken up), ``park`` (its snoop must wait for the
  line's data: ``parked`` and ``go_during`` set, the entry stays in use and not ready).
* ``wake`` (in): H2D Data (or Rsp) is taken: every ``parked`` entry becomes ``ready`` again (``parked``
  cleared), so the engine looks at its line once more.

A snoop's work is parked when, by the time the engine works it, a GO has moved the line's request into a
state where the snoop table stalls snoops until the data (SM_D: the upgrade's GO came while the snoop's
probe was out).  A new snoop to such a line stays in H2D Req until the data comes (the engine holds it);
a snoop already taken waits in its work entry instead, and is answered from the state the data leaves.

The engine's writes come after ``readied``, and ``take`` after the others: where two change one entry's
``ready`` in a cycle, the later wins.

Asserts (simulation; removed before synthesis): ``new`` names an entry not in use (no work
overwritten); ``snoop`` names an entry in use that holds no snoop yet (a second snoop to a line is held
by the engine, never stored over the first); the ``cur`` strobes name an entry in use (nothing freed
twice), and ``park`` one that holds a snoop.
"""

from amaranth.hdl import Assert, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import ID_WIDTH, H2DReqOpcode as Snp

__all__ = ["work_entry", "WorkTable"]


def work_entry(addr_width, way_bits, sf_entry=None):
    """One work entry: the line and its snoop-filter way, the snoop waiting on it (opcode, UQID) and the
    eviction that follows it (the reserved CQID).  With ``sf_entry`` (the snoop filter's entry layout)
    also ``known`` and ``sf``: the line's snoop-filter entry as the work started, which stays the line's
    entry until the work is done when ``known`` is set (the engine then works the line without looking
    it up again)."""
    fields = {"valid": 1, "ready": 1, "line": addr_width, "way": max(way_bits, 1), "snoop": 1, "snp_op": Snp,
              "snp_uqid": ID_WIDTH, "evict": 1, "evict_cqid": ID_WIDTH, "parked": 1,
              "go_during": 1}
    if sf_entry is not None:
        fields.update(known=1, sf=sf_entry)
    return data.StructLayout(fields)


class WorkTable(wiring.Component):
    def __init__(self, entries, layout):
        if not isinstance(entries, int) or entries < 1:
            raise ValueError(f"WorkTable: entries={entries!r}: must be an integer >= 1")
        for field in ("valid", "ready", "snoop", "snp_op", "snp_uqid", "parked"):
            if field not in layout.members:
                raise ValueError(f"WorkTable: the entry layout has no {field!r} field")
        self.size, self.layout = entries, layout
        idx = range(max(entries, 2))
        super().__init__({
            "entries": Out(data.ArrayLayout(layout, entries)),
            "readied": In(entries),
            "new": In(data.StructLayout({"valid": 1, "idx": idx, "entry": layout})),
            "snoop": In(data.StructLayout({"valid": 1, "idx": idx, "op": layout.members["snp_op"],
                                           "uqid": layout.members["snp_uqid"]})),
            "take": In(data.StructLayout({"valid": 1, "idx": idx})),
            "cur": In(data.StructLayout({"idx": idx, "clr_valid": 1, "clr_snoop": 1, "set_ready": 1,
                                         "clr_ready": 1, "park": 1})),
            "wake": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        e, new, snoop, cur = self.entries, self.new, self.snoop, self.cur
        for i in range(self.size):
            with m.If(self.readied[i] | (self.wake & e[i].parked)):
                m.d.sync += e[i].ready.eq(1)
            with m.If(self.wake):
                m.d.sync += e[i].parked.eq(0)
            with m.If(new.valid & (new.idx == i)):
                m.d.sync += e[i].eq(new.entry)
            with m.If(snoop.valid & (snoop.idx == i)):
                m.d.sync += [e[i].snoop.eq(1), e[i].snp_op.eq(snoop.op), e[i].snp_uqid.eq(snoop.uqid)]
            with m.If(cur.idx == i):
                with m.If(cur.clr_valid):
                    m.d.sync += [e[i].valid.eq(0), e[i].parked.eq(0)]
                with m.If(cur.clr_snoop):
                    m.d.sync += e[i].snoop.eq(0)
                with m.If(cur.set_ready):
                    m.d.sync += e[i].ready.eq(1)
                with m.If(cur.clr_ready):
                    m.d.sync += e[i].ready.eq(0)
                with m.If(cur.park):
                    m.d.sync += [e[i].parked.eq(1), e[i].go_during.eq(1)]
            with m.If(self.take.valid & (self.take.idx == i)):
                m.d.sync += e[i].ready.eq(0)
        in_use = lambda idx: (idx < self.size) & e[idx].valid
        strobes = cur.clr_valid | cur.clr_snoop | cur.set_ready | cur.clr_ready | cur.park
        m.d.sync += [
            Assert(~new.valid | ((new.idx < self.size) & ~e[new.idx].valid),
                   "work table: work started in an entry in use"),
            Assert(~snoop.valid | (in_use(snoop.idx) & ~e[snoop.idx].snoop),
                   "work table: a snoop joined an entry that is free or holds a snoop already"),
            Assert(~strobes | in_use(cur.idx), "work table: a free entry worked on"),
            Assert(~cur.park | e[cur.idx].snoop, "work table: an entry parked with no snoop"),
            Assert(~self.take.valid | (in_use(self.take.idx) & e[self.take.idx].ready),
                   "work table: work taken up that is not ready"),
        ]
        return m
