"""A synchronous FIFO whose storage is written before the push is decided: the RX unpacker's output lanes.

``LaneFIFO(width, depth)`` has the ports and the cycle behaviour of ``amaranth.lib.fifo.SyncFIFOBuffered``
with the same depth (2 or more): a memory of ``depth - 1`` entries behind an output register, ``w_rdy``
while the memory has a free entry, a pushed entry on ``r_data`` (with ``r_rdy``) from the second edge
after the push, ``depth`` entries in all.  One difference inside: the memory's write enable is ``w_rdy``
alone.  Whenever there is room, the free entry at the write pointer is written with whatever ``w_data``
holds; ``w_en`` only moves the pointer and the level.  Reads follow the level, so an entry not pushed
is never read and writing it early is harmless (the next write overwrites it).  What this buys: the
memory's write enable, one input per LUTRAM cell (about 150 cells for a lane as wide as a data line),
does not wait for the unpacker's retire decision, which on ECP5 was the end of the critical path
(docs/synth.md, "What bounds Fmax").

``exact=True``: ``w_rdy`` is high whenever fewer than ``depth`` entries are held, a function of
registers only (the level and the output register's full flag).  ``SyncFIFOBuffered`` (and this FIFO
with ``exact=False``) refuses a push while its memory is full, even in the cycle in which the output
register is empty and takes the memory's entry at the same edge; with ``depth`` 3 or more that state is
unreachable, with ``depth`` 2 it follows every push into an empty FIFO, so such a FIFO holds 2 entries
but may refuse a second one for a cycle.  A receiver that never waits for room (the unpacker with
``stall=False``, sized by credits to exactly ``depth`` entries a lane) needs every entry.  The push
then writes the memory's one free-to-be entry at the edge its old content is read out (the read port
reads before the write), so nothing is lost.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["LaneFIFO"]


class LaneFIFO(wiring.Component):
    def __init__(self, width, depth, *, exact=False):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"width={width!r}: must be a positive int")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth={depth!r}: LaneFIFO needs 2 or more entries (a memory behind a register)")
        self.width = width
        self.depth = depth
        self.exact = bool(exact)
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_rdy": Out(1), "r_en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        inner = self.depth - 1                          # memory entries (the output register is the last)
        level = Signal(range(inner + 1))                # entries in the memory
        produce = Signal(range(inner))
        consume = Signal(range(inner))
        m.submodules.storage = storage = Memory(shape=self.width, depth=inner, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="sync")

        push = Signal()
        pop = Signal()                                  # memory -> output register
        m.d.comb += [
            # exact: a full memory still takes a push when the output register is empty, since it pops then
            self.w_rdy.eq((level != inner) | (~self.r_rdy if self.exact else 0)),
            push.eq(self.w_rdy & self.w_en),
            pop.eq((level != 0) & (~self.r_rdy | self.r_en)),
            w_port.addr.eq(produce),
            w_port.data.eq(self.w_data),
            w_port.en.eq(self.w_rdy),                   # the free entry, whether pushed or not
            r_port.addr.eq(consume),
            r_port.en.eq(pop),
            self.r_data.eq(r_port.data),
        ]
        with m.If(push):
            m.d.sync += produce.eq(Mux(produce == inner - 1, 0, produce + 1))
        with m.If(pop):
            m.d.sync += consume.eq(Mux(consume == inner - 1, 0, consume + 1))
        with m.If(push & ~pop):
            m.d.sync += level.eq(level + 1)
        with m.If(pop & ~push):
            m.d.sync += level.eq(level - 1)
        with m.If(pop):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m
