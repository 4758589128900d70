"""The host snoops between ``h2d_req`` and the pipeline: kept in order, issued one a cycle, taken back.

A snoop is *issued* into the pipeline (stage A) as soon as the window holds it, so snoops stream at one
per cycle; it leaves the window only when the decision stage (C, three cycles later) *consumes* it
(answers it, drops it, or hands it to a work entry).  When C must *hold* the oldest snoop (no work entry
free, or its line still has a snoop being answered), the snoops issued behind it are taken back: the
issue pointer rewinds to the held snoop, and the *epoch* flips, so that C ignores everything still in
flight from before the rewind.  The window then issues nothing until ``release`` (C's reason may have
cleared), and starts again with the held snoop.  So C always decides the oldest snoop, and snoops are
answered in the order the golden model takes them (the model leaves a snoop it cannot take at the head
of its link queue, with every later one behind it).

Pointers ``head`` (the oldest snoop), ``issue`` (the next to issue) and ``tail`` (the next free entry)
carry one bit more than the index, so full (``tail - head == depth``) and empty differ.  The snoops are
in a memory written at ``tail`` and read asynchronously at ``issue`` (distributed RAM on the ECP5); the
issued snoop's fields travel down the pipeline beside its lookup.  When nothing waits to issue, the snoop
offered on ``h2d_req`` is issued in the cycle it is taken (and written into the window as any other).

Ports: ``h2d_req`` (in; ready while the window has room), ``issue`` (out: the snoop at ``issue`` with
its ``idx`` and the ``epoch`` it was issued in; taken when ``issue.ready``), ``epoch`` (the current one),
``head`` (the oldest snoop's index, for C's check), ``pop`` (C consumed the oldest), ``hold`` (C holds
it: rewind and wait), ``release`` (issue again), ``held``.  ``pop`` and ``hold`` never come together
(an ``Assert``).
"""

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from cxl.messages import H2DReq

__all__ = ["SnoopWindow", "IssuedSnoop"]


class IssuedSnoop(data.StructLayout):
    def __init__(self, depth):
        super().__init__({"snoop": H2DReq, "idx": range(depth), "epoch": 1})


class SnoopWindow(wiring.Component):
    """In-order window of ``depth`` host snoops (a power of two >= 4: three are in flight in the
    pipeline while a fourth is issued)."""

    def __init__(self, depth=8):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 4 or depth & (depth - 1):
            raise ValueError(f"SnoopWindow: depth={depth!r}: must be a power of two >= 4")
        self.depth = depth
        super().__init__({
            "h2d_req": In(stream.Signature(H2DReq)),
            "issue": Out(stream.Signature(IssuedSnoop(depth))),
            "epoch": Out(1), "head": Out(range(depth)),
            "pop": In(1), "hold": In(1), "release": In(1), "held": Out(1),
            "empty": Out(1),            # no snoop waits to be decided
        })

    def elaborate(self, platform):
        m = Module()
        d = self.depth
        bits = exact_log2(d)
        head, issue, tail = (Signal(bits + 1, name=n) for n in ("head_ptr", "issue_ptr", "tail_ptr"))
        m.submodules.mem = mem = Memory(shape=H2DReq, depth=d, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")

        full = Signal()
        m.d.comb += [full.eq((tail - head)[:bits + 1] == d),
                     self.h2d_req.ready.eq(~full),
                     wp.addr.eq(tail[:bits]), wp.data.eq(self.h2d_req.p),
                     wp.en.eq(self.h2d_req.valid & ~full),
                     rp.addr.eq(issue[:bits]),
                     # nothing waits to issue: the snoop offered now is issued as it is written
                     self.issue.valid.eq(((issue != tail) | (self.h2d_req.valid & ~full)) & ~self.held),
                     self.issue.p.snoop.eq(Mux(issue == tail, self.h2d_req.p, rp.data)),
                     self.issue.p.idx.eq(issue[:bits]),
                     self.issue.p.epoch.eq(self.epoch),
                     self.head.eq(head[:bits]), self.empty.eq(head == tail)]
        with m.If(self.h2d_req.valid & ~full):
            m.d.sync += tail.eq(tail + 1)
        with m.If(self.pop):
            m.d.sync += head.eq(head + 1)
        with m.If(self.hold):
            # the held snoop is the oldest: issue it again, and nothing behind it, after ``release``
            m.d.sync += [issue.eq(head), self.epoch.eq(~self.epoch)]
        with m.Elif(self.issue.valid & self.issue.ready):
            m.d.sync += issue.eq(issue + 1)
        # a release in the cycle of a hold wins: the reason cleared as C found it
        with m.If(self.release):
            m.d.sync += self.held.eq(0)
        with m.Elif(self.hold):
            m.d.sync += self.held.eq(1)
        m.d.sync += Assert(~(self.pop & self.hold), "snoop window: pop and hold in one cycle")
        m.d.sync += Assert(~self.pop | (head != issue), "snoop window: pop of a snoop never issued")
        return m
