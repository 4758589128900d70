"""The pipelined DCOH's request side: the request path and the response path over one snoop filter.

``Requests`` puts together hdl/dcoh/pipe/request_path.py (the caches' accesses through A / B1 / B2 / C,
the command lane, the snoop filter) and hdl/dcoh/pipe/response_path.py (the host's responses over the
tracker, the lane that pulls, invalidates an upgrade's peers, fills and answers): the request path starts
each request in the response path's tracker, the response path frees it (``freed``: the CQID, the line,
the accesses waiting for either), and its fill writes the snoop filter in the cycles the request path's
write (made from a register a cycle after its C) does not.  Two ports are shared:

* ``cmd`` / ``cmd_rsp``: the request path's commands and the response lane's invalidation, the response
  lane's first when both are offered; a queue of one bit per command outstanding says whose answer comes
  next (the caches answer in order);
* ``cpu_rsp``: the response lane's answers (a request completed) and the request path's (an access
  finished inside the device), the response lane's first.

Everything the host sees is the two paths': ``d2h_req`` (the request path's queue), ``h2d_rsp`` /
``h2d_data`` in, ``d2h_data`` out (write pulls).  Commit ports, in this order within a cycle: the
completions (``freed_valid``, ``freed_cqid``), the request path's (``commit``, ``commit_cache``), the
response path's (``rsp_commit``, ``rsp_commit_cqid``).  No snoops here yet (hdl/dcoh/pipe/snoop_pipe.py).
"""

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from cxl.messages import ADDR_WIDTH, D2HDataHdr, D2HReq, H2DDataHdr, H2DRsp
from hdl.link.ports import DataMsg

from ..encodings import CacheCmd, CacheCmdRsp, CpuReq, CpuRsp, ErrorKind
from .request_path import RequestPath
from .response_path import ResponseCommit, ResponsePath

__all__ = ["Requests"]


class Requests(wiring.Component):
    """Parameters: ``caches``, ``tracker`` (CQIDs), ``sf_sets``, ``sf_ways``, ``addr_width`` (each
    checked by the path that uses it).  ``sf`` is the snoop filter (tests preload it)."""

    def __init__(self, *, caches=2, tracker=16, sf_sets=64, sf_ways=4, addr_width=ADDR_WIDTH):
        self.req_path = RequestPath(caches=caches, tracker=tracker, sf_sets=sf_sets, sf_ways=sf_ways,
                                    addr_width=addr_width)
        self.rsp_path = ResponsePath(caches=caches, tracker=tracker, sf_ways=sf_ways, addr_width=addr_width)
        self.sf = self.req_path.sf
        self.caches, self.tracker, self.sf_sets, self.sf_ways = caches, tracker, sf_sets, sf_ways
        super().__init__({
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "d2h_req": Out(stream.Signature(D2HReq)),
            "h2d_rsp": In(stream.Signature(H2DRsp)),
            "h2d_data": In(stream.Signature(DataMsg(H2DDataHdr))),
            "d2h_data": Out(stream.Signature(DataMsg(D2HDataHdr))),
            "commit": Out(1), "commit_cache": Out(range(max(caches, 2))),
            "rsp_commit": Out(ResponseCommit), "rsp_commit_cqid": Out(range(tracker)),
            "freed_valid": Out(1), "freed_cqid": Out(range(tracker)),
            "needs_back_invalidation": Out(1), "idle": Out(1),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.req_path = rq = self.req_path
        m.submodules.rsp_path = rs = self.rsp_path
        wiring.connect(m, wiring.flipped(self.cpu_req), rq.cpu_req)
        wiring.connect(m, rq.d2h_req, wiring.flipped(self.d2h_req))
        wiring.connect(m, wiring.flipped(self.h2d_rsp), rs.h2d_rsp)
        wiring.connect(m, wiring.flipped(self.h2d_data), rs.h2d_data)
        wiring.connect(m, rs.d2h_data, wiring.flipped(self.d2h_data))
        wiring.connect(m, rq.start, rs.start)
        wiring.connect(m, rs.sf_update, rq.fill)
        m.d.comb += [rq.freed.eq(rs.freed)]

        # ---- cmd: the response lane's first; whose answer is next, in a queue of one bit each ----------
        K = self.caches
        m.submodules.whose = whose = SyncFIFO(width=1, depth=K + 2)    # 1: the response lane's
        rs_go = rs.cmd.valid
        out = self.cmd
        m.d.comb += [out.valid.eq((rs.cmd.valid | rq.cmd.valid) & whose.w_rdy),
                     out.p.eq(Mux(rs_go, rs.cmd.p, rq.cmd.p)),
                     rs.cmd.ready.eq(out.ready & whose.w_rdy),
                     rq.cmd.ready.eq(out.ready & whose.w_rdy & ~rs_go),
                     whose.w_en.eq(out.valid & out.ready), whose.w_data.eq(rs_go)]
        to_rs = whose.r_data[0]
        m.d.comb += [rs.cmd_rsp.p.eq(self.cmd_rsp.p), rq.cmd_rsp.p.eq(self.cmd_rsp.p),
                     rs.cmd_rsp.valid.eq(self.cmd_rsp.valid & whose.r_rdy & to_rs),
                     rq.cmd_rsp.valid.eq(self.cmd_rsp.valid & whose.r_rdy & ~to_rs),
                     self.cmd_rsp.ready.eq(whose.r_rdy & Mux(to_rs, rs.cmd_rsp.ready, rq.cmd_rsp.ready)),
                     whose.r_en.eq(self.cmd_rsp.valid & self.cmd_rsp.ready)]

        # ---- cpu_rsp: the response lane's first --------------------------------------------------------
        cr = self.cpu_rsp
        m.d.comb += [cr.valid.eq(rs.cpu_rsp.valid | rq.cpu_rsp.valid),
                     cr.p.eq(Mux(rs.cpu_rsp.valid, rs.cpu_rsp.p, rq.cpu_rsp.p)),
                     rs.cpu_rsp.ready.eq(cr.ready), rq.cpu_rsp.ready.eq(cr.ready & ~rs.cpu_rsp.valid)]

        m.d.comb += [self.commit.eq(rq.commit), self.commit_cache.eq(rq.commit_cache),
                     self.rsp_commit.eq(rs.commit), self.rsp_commit_cqid.eq(rs.commit_cqid),
                     self.freed_valid.eq(rs.freed.valid), self.freed_cqid.eq(rs.freed.cqid),
                     self.needs_back_invalidation.eq(rq.needs_back_invalidation),
                     self.idle.eq(rq.idle & rs.idle & ~whose.r_rdy),
                     self.protocol_errors.eq(rs.protocol_errors), self.last_error.eq(rs.last_error)]
        return m
