"""One device of the batched system testbench: a linked device, its internal caches in RTL, and stamped queues.

``BatchedDevice(dcoh=..., link=..., caches=..., pipelined=False)`` wraps :class:`tb.linked_device.LinkedDevice`
(DCOH + device link end + wires + host link end; ``pipelined``: the pipelined DCOH) so that a testbench can
run it for many cycles between two looks:

* the internal caches and their traffic source are :class:`tb.rtl_caches.InternalCaches` (the cache BFM's
  rules), fed through a :class:`tb.stamped.ReleaseQueue` of accesses (``ops_push``);
* each H2D channel of the host end is fed by a ``ReleaseQueue`` (``h2d_req_push``, ...): the host's
  messages, each with the cycle at which the host sends it and a gate: a snoop carries the number of
  the last earlier H2D Rsp to its line (it goes once that many H2D Rsps have entered the link: the host's
  order, which the link and the DCOH must keep by themselves, models/link.py's ordering rule), a GO the
  number of the data the host sent before it for the same CQID (it goes once the DCOH has taken that
  many H2D Data);
* ``record`` (:meth:`record_layout`) with ``record_write`` in every cycle in which something a testbench
  checks happens: the DCOH's dispatch (``pipelined``: its intake and commit ports), an H2D message taken
  by the host end, a D2H message out of it (always taken), the caches' hits, misses, commands and
  answers, cpu_req/cpu_rsp, probes acknowledged, a change of the caches' ``quiet``, a flit on either
  wire (while ``record_flits`` is set: a testbench without a flit monitor clears it and reads fewer
  records), the error bit.  :class:`Recorder` (a :class:`tb.stamped.EventRecorder` with one port per
  window record) stamps and keeps them; it is a component of its own, beside the device in the batched
  unit (tb/system_top.py ``build_batched_unit``), and the window is 16 records of ~1.6 kbit.  A line in
  a record (D2H data, a cmd's answer, a cpu_rsp, the line of a WORK) is its low ``VALUE_BITS`` and a
  ``wide`` bit (a bit above them is set): the model's line values are below 2^64, so nothing a check
  compares is lost, and a record is about half as wide;
* ``now`` counts cycles from reset; ``status`` packs what a testbench polls once per look (free entries
  per queue, error, drained, the DCOH's idle); ``snoops_while_held`` is the caches' count of the snoops
  the DCOH took while they held it up (its snoop side path).

``error`` is the linked device's (a link error, a DCOH protocol error, a rejected flit) or any sticky error
of the caches (``cache_errors``) or of a queue (``overflows``: ops, req, rsp, data); the recorder has its
own ``overflow``.
"""

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import Channel
from hdl.dcoh.dcoh import CacheCmd, CacheState, Dispatch
from hdl.dcoh.coalescer import Message
from hdl.dcoh.pipe.dcoh_top import COMMIT_PORTS
from hdl.device import INTAKE_PORTS, PIPELINED_EVENTS
from hdl.link.port import LinkErrorCause
from hdl.link.ports import FLIT_BITS, channel_shape
from tb.linked_device import LinkedDevice
from tb.rtl_caches import CacheErrors, InternalCaches, TrafficOp
from tb.stamped import STAMP_BITS, EventRecorder, ReleaseQueue

__all__ = ["BatchedDevice", "Recorder", "SERIAL_STEPS", "PIPELINED_STEPS", "H2D_CHANNELS", "D2H_CHANNELS",
           "QUEUE_DEPTH", "LANES", "OP_LANES", "OP_DEPTH", "WINDOW", "DEPTH", "VALUE_BITS"]

H2D_CHANNELS = (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA)
D2H_CHANNELS = (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA)
QUEUE_DEPTH = 32         # entries per H2D queue and for the accesses
LANES = 4                # entries a testbench may push into one H2D queue per look
OP_LANES = 8             # accesses it may push per look
OP_DEPTH = 16            # accesses each internal cache keeps queued: a look every K cycles keeps them fed
                         # while K + OP_LANES / caches is below this (an access takes at least a cycle)
WINDOW = 16              # records a testbench reads per look and device
DEPTH = 256              # records kept
VALUE_BITS = 64          # a line in a record: its low bits (and whether any bit above is set)
# what the DCOH did, in a record: the serializing DCOH's dispatch, or the pipelined DCOH's intake and commit
# ports (hdl/device.py; a response's CQID is not needed: the shadow applies the messages in intake order)
SERIAL_STEPS = ("dispatch", "scan_before", "work_line")
PIPELINED_STEPS = INTAKE_PORTS + tuple(n for n in COMMIT_PORTS if n != "rsp_commit_cqid")


def _name(chan):
    return chan.name.lower()


class BatchedDevice(wiring.Component):
    def __init__(self, *, dcoh=None, link=None, caches=None, index_bits=14, pipelined=False):
        self.linked = LinkedDevice(dcoh=dcoh, link=link, pipelined=pipelined)
        self.pipelined = pipelined
        d = self.linked.dcoh
        self.caches_n = d.caches
        self.caches = InternalCaches(caches=d.caches, addr_width=d.addr_width, coalesce_block=d.coalesce_block,
                                     index_bits=index_bits, op_depth=OP_DEPTH, **(caches or {}))
        steps = PIPELINED_STEPS if pipelined else SERIAL_STEPS
        self.layout = self.record_layout(d.caches, d.addr_width, d.coalesce_block,
                                         {n: self.linked.signature.members[n].shape for n in steps})
        self.queues = {c: ReleaseQueue(channel_shape(c), depth=QUEUE_DEPTH, lanes=LANES) for c in H2D_CHANNELS}
        self.ops_queue = ReleaseQueue(TrafficOp(d.caches, d.addr_width), depth=QUEUE_DEPTH, lanes=OP_LANES)
        self.status_layout = data.StructLayout({
            "ops_space": range(QUEUE_DEPTH + 1),
            **{f"{_name(c)}_space": range(QUEUE_DEPTH + 1) for c in H2D_CHANNELS},
            "error": 1, "drained": 1, "dcoh_idle": 1})
        members = {"now": Out(STAMP_BITS), "status": Out(self.status_layout),
                   "record": Out(self.layout), "record_write": Out(1),
                   "ops_push": In(self.ops_queue.signature.members["push"].shape), "ops_seq": In(1),
                   "record_flits": In(1)}
        for c in H2D_CHANNELS:
            members[f"{_name(c)}_push"] = In(self.queues[c].signature.members["push"].shape)
            members[f"{_name(c)}_seq"] = In(1)
        members.update(link_error_cause=Out(len(LinkErrorCause)), host_link_error_cause=Out(len(LinkErrorCause)),
                       protocol_errors=Out(16), rule_errors=Out(32), cache_errors=Out(CacheErrors()),
                       snoops_while_held=Out(32), overflows=Out(4))
        super().__init__(members)

    @staticmethod
    def record_layout(caches, addr_width, coalesce_block, steps):
        """The record: ``steps`` ({port: shape}, what the DCOH did: :data:`SERIAL_STEPS` or
        :data:`PIPELINED_STEPS`; a WORK's line as the other lines, low bits and ``wide``), then the rest."""
        block_bits = coalesce_block.bit_length() - 1
        line = {"data": VALUE_BITS, "wide": 1}
        fields = {n: (data.StructLayout(line) if n == "work_line" else shape) for n, shape in steps.items()}
        fields["h2d_taken"] = 3
        for c in D2H_CHANNELS:
            fields[f"{_name(c)}_valid"] = 1
            fields[_name(c)] = channel_shape(c)
        fields["d2h_data"] = data.StructLayout({"hdr": data.Layout.cast(channel_shape(Channel.D2H_DATA))["hdr"].shape,
                                                **line})
        fields.update({
            "hit": caches, "miss": caches,
            "cmd_valid": 1, "cmd": CacheCmd(caches, addr_width),
            "cmd_rsp_valid": 1, "cmd_rsp": data.StructLayout({"dirty": 1, "excl": 1, **line}),
            "cpu_req_valid": 1, "cpu_req_cache": range(max(caches, 2)),
            "cpu_rsp_valid": 1, "cpu_rsp": data.StructLayout({"cache": range(max(caches, 2)), "line": addr_width,
                                                                "state": CacheState, **line}),
            "probe_valid": 1, "probe": Message(addr_width - block_bits, coalesce_block, caches),
            "quiet": 1, "up_valid": 1, "up": FLIT_BITS, "down_valid": 1, "down": FLIT_BITS, "error": 1})
        return data.StructLayout(fields)

    def elaborate(self, platform):
        m = Module()
        m.submodules.linked = lk = self.linked
        m.submodules.caches = ca = self.caches
        m.submodules.ops_queue = oq = self.ops_queue
        for c, q in self.queues.items():
            m.submodules[f"{_name(c)}_queue"] = q

        now = Signal(STAMP_BITS)
        m.d.sync += now.eq(now + 1)
        m.d.comb += self.now.eq(now)

        # the caches behind the DCOH
        for name in ("cpu_req", "cmd_rsp"):
            wiring.connect(m, getattr(ca, name), getattr(lk, name))
        for name in ("cpu_rsp", "probe", "cmd"):
            wiring.connect(m, getattr(lk, name), getattr(ca, name))
        # the DCOH changed something this cycle (the caches' hits wait for a cycle without: tb/rtl_caches.py)
        event = Signal()
        if self.pipelined:      # as tb/system_pipe.py's shadow: an intake, a commit, an access or probe taken
            m.d.comb += event.eq(Cat(*(Value.cast(getattr(lk, name)).any() for name in PIPELINED_EVENTS),
                                     lk.cpu_req.valid & lk.cpu_req.ready, lk.probe.valid & lk.probe.ready).any())
            snoop_taken, data_taken_now = lk.took_snoop, lk.took_data
        else:
            m.d.comb += event.eq(lk.dispatch != Dispatch.NONE)
            snoop_taken, data_taken_now = lk.dispatch == Dispatch.SNOOP, lk.dispatch == Dispatch.DATA
        m.d.comb += [ca.dcoh_idle.eq(lk.dcoh_idle), ca.dcoh_event.eq(event), ca.snoop_taken.eq(snoop_taken)]

        # the accesses and the host's messages, released at their cycles
        # the queues' gates: H2D Rsps that entered the link (a snoop goes in behind the last earlier H2D Rsp
        # to its line, as the host sent them; the link and the DCOH keep them in order from there), H2D
        # Data the DCOH has taken (a GO goes in once the data sent before it reached the DCOH)
        rsp_in = Signal(STAMP_BITS)
        data_taken = Signal(STAMP_BITS)
        rsp_port = lk.h2d_rsp
        with m.If(rsp_port.valid & rsp_port.ready):
            m.d.sync += rsp_in.eq(rsp_in + 1)
        with m.If(data_taken_now):
            m.d.sync += data_taken.eq(data_taken + 1)
        m.d.comb += [oq.now.eq(now), oq.gate_count.eq(0), oq.push.eq(self.ops_push), oq.push_seq.eq(self.ops_seq)]
        wiring.connect(m, oq.o, ca.ops)
        gates = {Channel.H2D_REQ: rsp_in, Channel.H2D_RSP: data_taken, Channel.H2D_DATA: 0}
        taken = []
        for c, q in self.queues.items():
            m.d.comb += [q.now.eq(now), q.gate_count.eq(gates[c]), q.push.eq(getattr(self, f"{_name(c)}_push")),
                         q.push_seq.eq(getattr(self, f"{_name(c)}_seq"))]
            port = getattr(lk, _name(c))
            wiring.connect(m, q.o, port)
            taken.append(port.valid & port.ready)

        # what happened this cycle
        r = self.record
        quiet_was = Signal()
        m.d.sync += quiet_was.eq(ca.quiet)
        # a flit alone makes a record only when the testbench checks flits (``record_flits``): most cycles
        # carry a flit and nothing else, and a testbench without a flit monitor need not read them
        moved = [event, Cat(taken).any(), ca.hit.any(), ca.miss.any(), ca.quiet != quiet_was,
                 (lk.up_flit | lk.down_flit) & self.record_flits, lk.error]
        m.d.comb += [r.h2d_taken.eq(Cat(taken)),
                     r.hit.eq(ca.hit), r.miss.eq(ca.miss),
                     r.quiet.eq(ca.quiet), r.up_valid.eq(lk.up_flit), r.up.eq(lk.up_word),
                     r.down_valid.eq(lk.down_flit), r.down.eq(lk.down_word), r.error.eq(lk.error)]
        def line_of(field, value):           # a line as recorded: low bits, and whether any above is set
            return [field.data.eq(value[:VALUE_BITS]), field.wide.eq(value[VALUE_BITS:] != 0)]

        for c in D2H_CHANNELS:
            port = getattr(lk, _name(c))
            m.d.comb += [port.ready.eq(1), getattr(r, f"{_name(c)}_valid").eq(port.valid)]
            if c is Channel.D2H_DATA:
                m.d.comb += [r.d2h_data.hdr.eq(port.p.hdr), *line_of(r.d2h_data, port.p.data)]
            else:
                m.d.comb += getattr(r, _name(c)).eq(port.payload)
            moved.append(port.valid)
        m.d.comb += [r.cmd_rsp.dirty.eq(lk.cmd_rsp.p.dirty), r.cmd_rsp.excl.eq(lk.cmd_rsp.p.excl),
                     *line_of(r.cmd_rsp, lk.cmd_rsp.p.data),
                     r.cpu_rsp.cache.eq(lk.cpu_rsp.p.cache), r.cpu_rsp.line.eq(lk.cpu_rsp.p.line),
                     r.cpu_rsp.state.eq(lk.cpu_rsp.p.state), *line_of(r.cpu_rsp, lk.cpu_rsp.p.data),
                     r.cmd.eq(lk.cmd.payload), r.probe.eq(lk.probe.payload)]
        for name in (PIPELINED_STEPS if self.pipelined else SERIAL_STEPS):
            if name == "work_line":
                m.d.comb += line_of(r.work_line, lk.work_line)
            else:
                m.d.comb += getattr(r, name).eq(getattr(lk, name))
        for name, stream_ in (("cmd", lk.cmd), ("cmd_rsp", lk.cmd_rsp), ("cpu_rsp", lk.cpu_rsp), ("probe", lk.probe)):
            fire = stream_.valid & stream_.ready
            m.d.comb += getattr(r, f"{name}_valid").eq(fire)
            moved.append(fire)
        fire = lk.cpu_req.valid & lk.cpu_req.ready
        m.d.comb += [r.cpu_req_valid.eq(fire), r.cpu_req_cache.eq(lk.cpu_req.p.cache)]
        moved.append(fire)
        m.d.comb += self.record_write.eq(Cat(moved).any())

        overflows = Cat(oq.overflow, *(q.overflow for q in self.queues.values()))
        error = lk.error | (ca.errors.as_value() != 0) | overflows.any()
        queues_empty = Cat(oq.space == QUEUE_DEPTH, *(q.space == QUEUE_DEPTH for q in self.queues.values())).all()
        s = self.status
        m.d.comb += [s.ops_space.eq(oq.space), s.error.eq(error),
                     s.drained.eq(ca.drained & queues_empty & lk.idle), s.dcoh_idle.eq(lk.dcoh_idle),
                     self.overflows.eq(overflows), self.cache_errors.eq(ca.errors),
                     self.snoops_while_held.eq(ca.snoops_while_held),
                     self.link_error_cause.eq(lk.link_error_cause), self.host_link_error_cause.eq(lk.host_link_error_cause),
                     self.protocol_errors.eq(lk.protocol_errors), self.rule_errors.eq(lk.rule_errors)]
        for c, q in self.queues.items():
            m.d.comb += getattr(s, f"{_name(c)}_space").eq(q.space)
        return m


class Recorder(wiring.Component):
    """The records of one :class:`BatchedDevice`, stamped: ``now``/``record``/``write`` from the device;
    ``rec0`` ... the oldest ``window`` (one port each), ``count``, ``pop``/``pop_seq``, ``overflow``
    (tb/stamped.py EventRecorder)."""

    def __init__(self, layout, *, depth=DEPTH, window=WINDOW):
        self.recorder = EventRecorder(layout, depth=depth, window=window)
        self.window = window
        members = {"now": In(STAMP_BITS), "record": In(layout), "write": In(1), "count": Out(range(depth + 1)),
                   "pop": In(range(window + 1)), "pop_seq": In(1), "overflow": Out(1)}
        for i in range(window):
            members[f"rec{i}"] = Out(self.recorder.stamped)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.recorder = rec = self.recorder
        m.d.comb += [rec.now.eq(self.now), rec.record.eq(self.record), rec.write.eq(self.write),
                     rec.pop.eq(self.pop), rec.pop_seq.eq(self.pop_seq), self.count.eq(rec.count),
                     self.overflow.eq(rec.overflow)]
        for i in range(self.window):
            m.d.comb += getattr(self, f"rec{i}").eq(rec.window[i])
        return m
