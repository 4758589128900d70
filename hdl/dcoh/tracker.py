"""The DCOH's request tracker: one entry per CQID, in flip-flops, written only through three ports.

The entries stay in registers, not in a RAM: the engine compares every entry's line with a lookup's
(the tracker's CAM, ``tcam`` in hdl/dcoh/datapath.py) and every entry's snoop-filter way with the looked-up
set's (the busy mask). What keeps them small is how they are written. Each write goes through a port,
an index and the fields it writes, so an entry has one enable per port in front of its registers and
the engine chooses what to write once, on the port. (Written entry by entry from each FSM state, the
tracker's input multiplexers were a third of the DCOH's LUTs: docs/synth.md.) The engine's FSM states
drive the ports and are exclusive, so each port has one writer in a cycle.

Ports (writes land at the clock edge):

* ``entries`` (out): every entry, registered (:func:`tracker_entry`).
* ``new`` (in): ``valid``, ``idx``, ``entry``: a request starts in entry ``idx`` (the whole entry is
  written).
* ``set`` (in): ``valid``, ``idx``, ``state``, ``grant``, ``granted_e``: request ``idx`` moves to
  ``state``; with ``grant``, ``granted_e`` records which grant its GO carried (E or S).
* ``free`` (in): ``valid``, ``idx``: request ``idx`` is done.

``set`` and ``free`` may name the same entry in one cycle (a response that completes its request
writes the final state and frees it); ``free`` then clears ``valid`` and the state is written too.

Asserts (simulation; removed before synthesis): ``new`` names an entry not in use, and not the one
``set`` or ``free`` names in the same cycle (no request overwritten); ``set`` and ``free`` name entries
in use (no state written into a free entry, nothing freed twice).
"""

from amaranth.hdl import Assert, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import D2HReqOpcode as Req

__all__ = ["tracker_entry", "TrackerTable"]


def tracker_entry(caches, addr_width, way_bits, state_bits):
    """One tracker entry: the request's opcode, line and transient state (a code of the DCOH's
    ``STATE_CODE``), the internal cache it serves (``cpu``: a CPU access's; ``store``: a store's),
    whether its GO granted E, and the snoop-filter way it holds (``has_way``)."""
    return data.StructLayout({
        "valid": 1, "op": Req, "line": addr_width, "state": state_bits, "cache": range(max(caches, 2)),
        "cpu": 1, "store": 1, "granted_e": 1, "has_way": 1, "way": max(way_bits, 1)})


class TrackerTable(wiring.Component):
    def __init__(self, entries, layout):
        if not isinstance(entries, int) or entries < 1:
            raise ValueError(f"TrackerTable: entries={entries!r}: must be an integer >= 1")
        for field in ("valid", "state", "granted_e"):
            if field not in layout.members:
                raise ValueError(f"TrackerTable: the entry layout has no {field!r} field")
        self.size, self.layout = entries, layout
        idx = range(max(entries, 2))
        state = layout.members["state"]
        super().__init__({
            "entries": Out(data.ArrayLayout(layout, entries)),
            "new": In(data.StructLayout({"valid": 1, "idx": idx, "entry": layout})),
            "set": In(data.StructLayout({"valid": 1, "idx": idx, "state": state, "grant": 1, "granted_e": 1})),
            "free": In(data.StructLayout({"valid": 1, "idx": idx})),
        })

    def elaborate(self, platform):
        m = Module()
        e, new, set_, free = self.entries, self.new, self.set, self.free
        for i in range(self.size):
            with m.If(new.valid & (new.idx == i)):
                m.d.sync += e[i].eq(new.entry)
            with m.If(set_.valid & (set_.idx == i)):
                m.d.sync += e[i].state.eq(set_.state)
                with m.If(set_.grant):
                    m.d.sync += e[i].granted_e.eq(set_.granted_e)
            with m.If(free.valid & (free.idx == i)):
                m.d.sync += e[i].valid.eq(0)
        in_range = lambda idx: idx < self.size
        m.d.sync += [
            Assert(~new.valid | (in_range(new.idx) & ~e[new.idx].valid),
                   "tracker: a request started in an entry in use"),
            Assert(~new.valid | ~((set_.valid & (set_.idx == new.idx)) | (free.valid & (free.idx == new.idx))),
                   "tracker: an entry started and written in the same cycle"),
            Assert(~set_.valid | (in_range(set_.idx) & e[set_.idx].valid),
                   "tracker: a state written into a free entry"),
            Assert(~free.valid | (in_range(free.idx) & e[free.idx].valid),
                   "tracker: an entry freed that is not in use"),
        ]
        return m
