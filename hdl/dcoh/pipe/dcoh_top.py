"""The pipelined DCOH top: the engine (hdl/dcoh/pipe/engine.py) with the D2H credits, DevLoad and the
status of hdl/dcoh/dcoh.py's ``DCOH``, so that it has the same ports on the host and the device side.

Host side: ``h2d_req`` / ``h2d_rsp`` / ``h2d_data`` in, ``d2h_req`` / ``d2h_rsp`` / ``d2h_data`` out (the
payloads of :func:`hdl.link.ports.channel_shape`), ``crd_req`` / ``crd_rsp`` / ``crd_data`` in: the credits
the link returns for each D2H channel (0..64 a cycle).  A D2H output is valid only while its channel has a
credit (a :class:`hdl.dcoh.qos.CreditCounter` each, ``credits`` at reset); the engine's stream behind it
sees a port that is not ready.  D2H Req leave in the arbiter's order (hdl/dcoh/pipe/request_tx.py).
Device side: ``cpu_req`` / ``cpu_rsp``, ``probe``, ``cmd`` / ``cmd_rsp``, as ``DCOH``'s.

Status: ``idle`` (nothing in progress inside: no access, snoop, work, response or D2H message waiting
for the DCOH; requests waiting for the host's responses do not count, as for ``DCOH``),
``devload`` (the 2-bit level of the CQIDs in use, a back-invalidation's counted from its commit; from a
register updated every cycle, so one cycle behind the tracker), ``protocol_errors`` (the snoop side's
and the response side's counts together: a second snoop to a line whose snoop is unanswered, a reserved
snoop opcode, a response for a CQID not in use or that the request's state does not declare) and
``last_error`` (the kind of the latest), ``msgs_in`` / ``msgs_out`` (the coalescer's counters).

In place of ``DCOH``'s ``dispatch`` the engine's commit ports (hdl/dcoh/pipe/engine.py gives their order
within a cycle): a shadow model follows the events in the order they commit (tb/engine.py).

# Ref: docs/sources.md §2.4 (credits), §3.2 (DevLoad).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from cxl.messages import ADDR_WIDTH, Channel
from hdl.link.ports import channel_shape

from ..coalescer import Message
from ..encodings import CacheCmd, CacheCmdRsp, CpuReq, CpuRsp, ErrorKind
from ..parameters import check_parameters
from ..qos import CreditCounter, DevLoad
from .engine import Engine

__all__ = ["PipelinedDCOH", "COMMIT_PORTS", "COMMIT_STROBES"]

#: the engine's commit ports, passed through
COMMIT_PORTS = ("commit_c", "commit_c_line", "commit_lane", "commit_lane_line", "commit_lane_probed",
                "commit_probe", "commit_probe_line", "commit_probe_evict", "commit", "commit_bi",
                "commit_cache", "rsp_commit", "rsp_commit_cqid", "freed_valid", "freed_cqid")
#: those of them that say a commit happened (a value other than 0; the others are their payloads), in the
#: order a shadow applies one cycle's commits (tb/system_pipe.py ``CommitFollower.follow_commits``)
COMMIT_STROBES = ("commit_c", "freed_valid", "commit", "commit_bi", "commit_lane", "commit_probe", "rsp_commit")
assert set(COMMIT_STROBES) <= set(COMMIT_PORTS)


class PipelinedDCOH(wiring.Component):
    """Parameters as ``DCOH``'s (hdl/dcoh/parameters.py checks them), and ``window`` / ``cmd_depth`` of the
    snoop side (hdl/dcoh/pipe/snoop_pipe.py).  ``work`` is the snoop side's work entries."""

    def __init__(self, *, caches=2, sf_sets=64, sf_ways=4, tracker=16, work=8, window=8, cmd_depth=4,
                 coalesce_window=4, coalesce_block=4, coalesce_groups=4, starvation_bound=4, credits=8,
                 devload_thresholds=(0.25, 0.5, 0.75), addr_width=ADDR_WIDTH):
        check_parameters("PipelinedDCOH", caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, tracker=tracker,
                         work=work, coalesce_window=coalesce_window, coalesce_block=coalesce_block,
                         coalesce_groups=coalesce_groups, starvation_bound=starvation_bound, credits=credits,
                         addr_width=addr_width)
        self.engine = Engine(caches=caches, tracker=tracker, sf_sets=sf_sets, sf_ways=sf_ways, work=work,
                             window=window, cmd_depth=cmd_depth, coalesce_window=coalesce_window,
                             coalesce_block=coalesce_block, coalesce_groups=coalesce_groups,
                             starvation_bound=starvation_bound, addr_width=addr_width)
        self.devload_block = DevLoad(tracker, tuple(devload_thresholds))   # ValueError names bad thresholds
        # the engine's blocks, for tests (the snoop filter's storage, the snoop side's state)
        self.sf, self.snoop = self.engine.sf, self.engine.snoop
        self.caches, self.tracker, self.sf_sets, self.sf_ways, self.credits = caches, tracker, sf_sets, sf_ways, credits
        self.work, self.coalesce_window, self.coalesce_block = work, coalesce_window, coalesce_block
        self.addr_width = addr_width
        members = {
            "h2d_req": In(stream.Signature(channel_shape(Channel.H2D_REQ))),
            "h2d_rsp": In(stream.Signature(channel_shape(Channel.H2D_RSP))),
            "h2d_data": In(stream.Signature(channel_shape(Channel.H2D_DATA))),
            "d2h_req": Out(stream.Signature(channel_shape(Channel.D2H_REQ))),
            "d2h_rsp": Out(stream.Signature(channel_shape(Channel.D2H_RSP))),
            "d2h_data": Out(stream.Signature(channel_shape(Channel.D2H_DATA))),
            "crd_req": In(range(65)), "crd_rsp": In(range(65)), "crd_data": In(range(65)),
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "probe": Out(stream.Signature(Message(addr_width - exact_log2(coalesce_block), coalesce_block,
                                                  caches))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "idle": Out(1), "devload": Out(2),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
            "msgs_in": Out(32), "msgs_out": Out(32),
        }
        for name in COMMIT_PORTS:
            members[name] = self.engine.signature.members[name]
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = e = self.engine
        m.submodules.devload = dl = self.devload_block
        for name in ("h2d_req", "h2d_rsp", "h2d_data"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(e, name))
        for name in ("cpu_req", "cmd_rsp"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(e, name))
        for name in ("cpu_rsp", "probe", "cmd"):
            wiring.connect(m, getattr(e, name), wiring.flipped(getattr(self, name)))

        # ---- the D2H channels, each behind its credits -----------------------------------------------
        for name, ret in (("d2h_req", self.crd_req), ("d2h_rsp", self.crd_rsp), ("d2h_data", self.crd_data)):
            m.submodules[f"credits_{name}"] = crd = CreditCounter(self.credits)
            inner, outer = getattr(e, name), getattr(self, name)
            has = crd.available != 0
            m.d.comb += [outer.valid.eq(inner.valid & has), outer.p.eq(inner.p),
                         inner.ready.eq(outer.ready & has),
                         crd.take.eq(outer.valid & outer.ready), crd.ret.eq(ret)]

        # ---- status --------------------------------------------------------------------------------------
        occupancy = Signal(range(self.tracker + 1))
        m.d.sync += occupancy.eq(sum(e.cqids_in_use[i] for i in range(self.tracker)))
        m.d.comb += [dl.occupancy.eq(occupancy), self.devload.eq(dl.level),
                     self.msgs_in.eq(e.snoop.coal.msgs_in), self.msgs_out.eq(e.snoop.coal.msgs_out),
                     self.protocol_errors.eq(e.protocol_errors + e.snoop_errors)]
        # the latest error's kind: each side counts its own; the one whose count moved (the response
        # side's if both did in one cycle)
        seen_rsp, seen_snoop = Signal(16), Signal(16)
        m.d.sync += [seen_rsp.eq(e.protocol_errors), seen_snoop.eq(e.snoop_errors)]
        with m.If(e.protocol_errors != seen_rsp):
            m.d.sync += self.last_error.eq(e.last_error)
        with m.Elif(e.snoop_errors != seen_snoop):
            m.d.sync += self.last_error.eq(e.last_snoop_error)
        m.d.comb += self.idle.eq(e.idle)
        for name in COMMIT_PORTS:
            m.d.comb += getattr(self, name).eq(getattr(e, name))
        return m
