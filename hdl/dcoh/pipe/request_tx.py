"""The pipelined DCOH's D2H request transmit: three class queues and the starvation-bounded arbiter.

The request path hands each D2H Req over in the cycle its tracker entry starts (``push``).  It waits
here in the queue of its class (``cxl.device.REQUEST_PRIORITY``: evictions first, then the coherent
reads, then the uncached requests) until the arbiter (hdl/dcoh/qos.py, ``PriorityArbiter``: strict
priority, except that a class passed over ``bound`` times goes next) grants its class and the port
takes it.  This is the golden model's ``TxArbiter`` (models/dcoh.py), which the engine bench follows
message for message (tb/engine.py).

Stages: a request pushed in cycle N may leave from N+1 on (``SyncFIFO``: its queue's head is read from
distributed RAM, then a three-way select by the arbiter's grant); the engine bench's copy of the model's
arbiter counts it from that cycle on. Back-pressure: ``d2h_req.ready`` low holds the granted head and the
arbiter's counters; ``push`` is always taken: each queue holds ``tracker`` requests, and a request's CQID is
in at most one of them (the host answers a CQID only after its D2H Req, so a CQID is not freed and taken again
while its request waits here). An Assert checks that.

# Ref: docs/sources.md §2.4 (credits, applied by the DCOH top around this block).
"""

from amaranth.hdl import Assert, Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from cxl.device import REQUEST_PRIORITY
from cxl.messages import D2HReq

from ..qos import PriorityArbiter

__all__ = ["RequestTransmit"]

CLASSES = 1 + max(REQUEST_PRIORITY.values())


class RequestTransmit(wiring.Component):
    """``tracker``: the CQIDs (each queue's depth); ``bound``: the arbiter's starvation bound (>= 2)."""

    def __init__(self, tracker, bound):
        self.tracker, self.bound = tracker, bound
        self.arb = PriorityArbiter(CLASSES, bound)     # ValueError names a bad bound
        super().__init__({
            "push": In(stream.Signature(D2HReq)),
            "d2h_req": Out(stream.Signature(D2HReq)),
            "empty": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.arb = arb = self.arb
        width = len(self.push.p.as_value())
        queues = []
        for c in range(CLASSES):
            q = SyncFIFO(width=width, depth=self.tracker)
            m.submodules[f"class{c}"] = q
            queues.append(q)
        # the class of the pushed request, from its opcode
        push_class = Signal(range(CLASSES))
        with m.Switch(self.push.p.opcode):
            for op, c in REQUEST_PRIORITY.items():
                with m.Case(op):
                    m.d.comb += push_class.eq(c)
        m.d.comb += self.push.ready.eq(1)
        m.d.sync += Assert(~self.push.valid | Cat(q.w_rdy for q in queues).all(),
                           "request transmit: a class queue overflowed (a CQID answered before its D2H Req)")
        head = Signal(D2HReq)
        for c, q in enumerate(queues):
            m.d.comb += [q.w_data.eq(self.push.p.as_value()), q.w_en.eq(self.push.valid & (push_class == c)),
                         arb.req[c].eq(q.r_rdy)]
            with m.If(arb.grant[c]):
                m.d.comb += head.eq(q.r_data)
        sent = self.d2h_req.valid & self.d2h_req.ready
        m.d.comb += [self.d2h_req.valid.eq(arb.valid), self.d2h_req.p.eq(head), arb.advance.eq(sent),
                     self.empty.eq(~Cat(q.level != 0 for q in queues).any() & ~self.push.valid)]
        for c, q in enumerate(queues):
            m.d.comb += q.r_en.eq(sent & arb.grant[c])
        return m
