"""A synchronous FIFO whose storage is written before the push is decided and whose output registers do
not wait for the reader: the RX unpacker's output lanes.

``LaneFIFO(width, depth)`` has the ports and the cycle behaviour of ``amaranth.lib.fifo.SyncFIFOBuffered``
with the same depth (2 or more): ``w_rdy``, ``r_rdy`` and ``r_data`` are the same in every cycle
(tests/test_lane_fifo.py), ``depth`` entries in all, a pushed entry on ``r_data`` from the second edge
after the push.  Two differences inside, each taking a wide clock enable off a late signal:

* The memory's write enable is ``w_rdy`` alone.  Whenever there is room, the free entry at the write
  pointer is written with whatever ``w_data`` holds; ``w_en`` only moves the pointer and the level.
  Reads follow the level, so an entry not pushed is never read and writing it early is harmless (the
  next write overwrites it).  So the write enable of every memory cell (about 150 LUTRAM cells for a
  lane as wide as a data line) does not wait for the unpacker's retire decision, which on ECP5 was the
  end of the critical path (docs/synth.md, "What bounds Fmax").
* The output is two registers taken in turn (``head`` says which one ``r_data`` shows), each loaded
  from the memory when it is empty, whatever the reader does.  ``SyncFIFOBuffered`` reloads its one
  output register in the cycle the reader takes it, so the reader's ``r_en`` is the clock enable of
  every output bit; on the link end that enable (a data line's 530 bits, spread over the die) was the
  critical path after routing (docs/link_layer.md, "RTL pipelining (Fmax)").  Here ``r_en`` moves
  only ``head`` and the registers' full flags; the data registers' enables are those flags and the
  memory's level, all registers.  A register taken in a cycle is loaded again at the second edge
  after, while the other one is shown, so one entry per cycle still passes.

Which entries count where: the entry shown is ``SyncFIFOBuffered``'s output register; the other output
register, when full, holds what ``SyncFIFOBuffered`` would still keep in its memory, so ``w_rdy`` is
"memory entries + the other register < depth - 1", as there.  The cost: ``width`` more flip-flops and a
2-to-1 multiplexer per output bit.
"""

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["LaneFIFO"]


class LaneFIFO(wiring.Component):
    def __init__(self, width, depth):
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"width={width!r}: must be a positive int")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth={depth!r}: LaneFIFO needs 2 or more entries (a memory behind a register)")
        self.width = width
        self.depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_rdy": Out(1), "r_en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        inner = self.depth - 1                          # SyncFIFOBuffered's memory entries
        level = Signal(range(inner + 1))                # entries in the memory
        produce = Signal(range(inner))
        consume = Signal(range(inner))
        m.submodules.storage = storage = Memory(shape=self.width, depth=inner, init=[])
        w_port = storage.write_port()
        # Read without a register of its own: the output registers below are the memory's.
        r_port = storage.read_port(domain="comb")

        out = [Signal(self.width, name=f"out{i}") for i in range(2)]
        full = [Signal(name=f"out{i}_full") for i in range(2)]
        head = Signal()                                 # the output register shown on r_data
        fill = Signal()                                 # the output register loaded next
        # The registers fill and empty in turn: with one full, it is the one shown and the other is
        # loaded next; with both full or both empty, the one shown is also the one loaded next.
        m.d.sync += Assert(Mux(full[0] == full[1], fill == head, Mux(head, full[1], full[0]) & (fill != head)),
                           "LaneFIFO: output registers out of turn")

        push = Signal()
        pop = Signal()                                  # reader takes the entry shown
        load = Signal()                                 # memory -> output register ``fill``
        m.d.comb += [
            self.w_rdy.eq(level + Mux(head, full[0], full[1]) != inner),
            push.eq(self.w_rdy & self.w_en),
            self.r_rdy.eq(Mux(head, full[1], full[0])),
            self.r_data.eq(Mux(head, out[1], out[0])),
            pop.eq(self.r_rdy & self.r_en),
            load.eq((level != 0) & ~Mux(fill, full[1], full[0])),
            w_port.addr.eq(produce),
            w_port.data.eq(self.w_data),
            w_port.en.eq(self.w_rdy),                   # the free entry, whether pushed or not
            r_port.addr.eq(consume),
        ]
        for i in range(2):
            with m.If(load & (fill == i)):
                m.d.sync += [out[i].eq(r_port.data), full[i].eq(1)]
            with m.Elif(pop & (head == i)):
                m.d.sync += full[i].eq(0)
        with m.If(load):
            m.d.sync += [fill.eq(~fill), consume.eq(Mux(consume == inner - 1, 0, consume + 1))]
        with m.If(pop):
            m.d.sync += head.eq(~head)
        with m.If(push):
            m.d.sync += produce.eq(Mux(produce == inner - 1, 0, produce + 1))
        with m.If(push & ~load):
            m.d.sync += level.eq(level + 1)
        with m.If(load & ~push):
            m.d.sync += level.eq(level - 1)
        return m
