"""The encodings of the DCOH's ports and tracker, derived from the model's definitions.

The CPU access kinds (``cxl.device.ACCESS_KINDS``) and the internal caches' MESI states
(``cxl.coherence.MESI``) in the model's order, checked at import; the tracker's code of each device line
state (``STATE_CODE``, ``cxl.coherence.DevState``); the response events of the response table; the
commands to the internal caches, the ``dispatch`` codes and the protocol-error kinds; the layouts of the
internal-cache ports.  :mod:`hdl.dcoh.dcoh` re-exports them.
"""

from amaranth.lib import data, enum

from hdl.link.ports import LINE_BITS
from cxl.messages import ADDR_WIDTH, D2HReqOpcode as Req
from cxl.coherence import DevState as D, MESI
from cxl.device import ACCESS_KINDS

__all__ = ["CpuKind", "CacheState", "CmdOp", "Dispatch", "ErrorKind", "CpuReq", "CpuRsp", "CacheCmd",
           "CacheCmdRsp", "STATE_CODE", "STATE_BITS", "UNCACHED", "EVENTS", "EVENT_CODE"]


class CpuKind(enum.Enum, shape=3):
    """The CPU access kinds (``cxl.device.ACCESS_KINDS``), in their order."""
    LOAD = 0
    STORE = 1
    EVICT = 2
    RDCURR = 3
    ITOMWR = 4
    WRINV = 5
    CLFLUSH = 6


class CacheState(enum.Enum, shape=2):
    """An internal cache's MESI state (``cxl.coherence.MESI``), as installed by ``cpu_rsp``."""
    I = 0
    S = 1
    E = 2
    M = 3


# The RTL encodings must name exactly the model's kinds and states (checked at import).
assert [k.name.lower() for k in CpuKind] == list(ACCESS_KINDS), "CpuKind differs from cxl.device.ACCESS_KINDS"
assert [c.name for c in CacheState] == [s.name for s in MESI], "CacheState differs from cxl.coherence.MESI"
STATE_CODE = {s: i for i, s in enumerate(D)}          # device line state -> tracker state code
STATE_BITS = (len(STATE_CODE) - 1).bit_length()
UNCACHED = {"rdcurr": Req.RdCurr, "itomwr": Req.ItoMWr, "wrinv": Req.WrInv, "clflush": Req.CLFlush}
EVENTS = ("GO-S", "GO-E", "GO-I", "Data", "GO_WritePull", "GO_WritePull_Drop", "WritePull")
EVENT_CODE = {e: i for i, e in enumerate(EVENTS)}


class CmdOp(enum.Enum, shape=2):
    KEEP = 0          #: read only (the copies keep their state)
    TO_S = 1          #: downgrade E/M copies to S
    INV = 2           #: invalidate the copies


class Dispatch(enum.Enum, shape=3):
    """What the engine starts in this cycle (``dispatch`` port; NONE otherwise).  For testbenches:
    the order in which the engine takes events is the order a shadow golden model must see them."""
    NONE = 0
    SNOOP = 1         #: a snoop taken from ``h2d_req``
    REPLAY = 2        #: the held snoop, looked at again
    RSP = 3           #: an H2D Rsp taken
    DATA = 4          #: an H2D Data taken
    CPU = 5           #: a ``cpu_req`` taken
    WORK = 6          #: a line whose probe was acknowledged
    SCAN = 7          #: the rescan of the waiting accesses that follows every event


class ErrorKind(enum.Enum, shape=3):
    NONE = 0
    UNKNOWN_CQID = 1      #: H2D Rsp/Data for a CQID not in use
    UNDECLARED = 2        #: a response the line's state does not declare (or a bad GO state)
    SECOND_SNOOP = 3      #: a snoop to a line whose earlier snoop is still being answered (held, answered after it)
    #: a GO to a line whose snoop is still being answered (CXL 3.x §3.2.5.2 forbids it, docs/sources.md §1.7):
    #: the snoop waits for the line's data, then is answered (its work parked, hdl/dcoh/work_table.py)
    GO_DURING_SNOOP = 4
    #: a snoop with a reserved opcode (not SnpData, SnpInv, SnpCur): dropped, as the link's unpacker
    #: drops one (RxError.OPCODE), with no response and no state change
    RESERVED_SNOOP = 5


class CpuReq(data.StructLayout):
    def __init__(self, caches, addr_width=ADDR_WIDTH):
        super().__init__({"kind": CpuKind, "cache": range(max(caches, 2)), "line": addr_width, "variant": 1,
                          "data": LINE_BITS})


class CpuRsp(data.StructLayout):
    def __init__(self, caches, addr_width=ADDR_WIDTH):
        super().__init__({"cache": range(max(caches, 2)), "line": addr_width, "state": CacheState,
                          "data": LINE_BITS})


class CacheCmd(data.StructLayout):
    def __init__(self, caches, addr_width=ADDR_WIDTH):
        super().__init__({"line": addr_width, "caches": caches, "op": CmdOp})


class CacheCmdRsp(data.StructLayout):
    def __init__(self):
        super().__init__({"dirty": 1, "excl": 1, "data": LINE_BITS})
