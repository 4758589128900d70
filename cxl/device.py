"""What the golden device (models/dcoh.py) and the RTL DCOH (hdl/dcoh/dcoh.py) share on their CPU side:
the kinds of access an internal cache makes, and the priority class of each D2H request.  These are
design choices of this project, not rules of the CXL specification; the specification asks only that
D2H Data make progress and that requests not block snoop responses (docs/sources.md §1.1).
"""

from cxl.messages import D2HReqOpcode as Req

__all__ = ["ACCESS_KINDS", "REQUEST_PRIORITY"]

# The access kinds of an internal cache, in the RTL's encoding order (hdl.dcoh.dcoh.CpuKind): a load, a
# store, an eviction, and the uncached requests RdCurr, ItoMWr, WrInv and CLFlush.
ACCESS_KINDS = ("load", "store", "evict", "rdcurr", "itomwr", "wrinv", "clflush")

# The D2H request arbiter's class of each request; 0 is served first.  Evictions free device resources,
# so they go first; then the coherent reads; then the uncached requests.
REQUEST_PRIORITY = {
    Req.DirtyEvict: 0, Req.CleanEvict: 0, Req.CleanEvictNoData: 0,
    Req.RdShared: 1, Req.RdAny: 1, Req.RdOwn: 1, Req.RdOwnNoData: 1,
    Req.RdCurr: 2, Req.ItoMWr: 2, Req.WrInv: 2, Req.CLFlush: 2,
}
