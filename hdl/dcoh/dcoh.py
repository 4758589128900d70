"""The DCOH top: snoop filter, request tracker, snoop handler, invalidation coalescer and QoS, with the
six CXL.cache channel ports on the host side and the internal-cache ports on the device side.  The
engine here (its FSM) drives the blocks beside it: the tracker and the work table are registers written
through ports (hdl/dcoh/tracker.py, hdl/dcoh/work_table.py), the snoop filter, CQID allocator,
coalescer and QoS blocks have files of their own.

RTL counterpart of :class:`models.dcoh.Device` (the golden model).  Its transitions are not restated:
the snoop table, the request start states, the response table and the permission of each device state
are read from :mod:`cxl.coherence` / :mod:`cxl.device` at elaboration and turned into logic, so the
RTL cannot disagree with the model's tables; tests/test_rtl_dcoh.py checks the behaviour around them
(same messages, same final snoop-filter, tracker and internal-cache states) by co-simulating this top
against the model's device inside the model's whole system.

Ports
-----
Host side (``lib.stream``, payloads from :mod:`cxl.messages` / :mod:`hdl.link.ports`):
  ``h2d_req`` in (snoops), ``h2d_rsp`` in, ``h2d_data`` in (:class:`DataMsg`: header + 64 B line);
  ``d2h_req`` out, ``d2h_rsp`` out, ``d2h_data`` out (:class:`DataMsg`).
  ``crd_req`` / ``crd_rsp`` / ``crd_data`` in: D2H credits returned by the link (0..64 per cycle);
  the D2H outputs are valid only while their credit counter has a credit.
Device side (the internal caches; the cache decides its own hits, the DCOH sees only what it cannot):
  ``cpu_req`` in (:class:`CpuReq`): a miss, upgrade, eviction or uncached access of cache ``cache``
    (at most one outstanding per cache; ``data``: the value a store, ItoMWr or WrInv writes; an evicted
    copy is taken out of the cache with a ``cmd`` when the eviction issues, as the model does);
  ``cpu_rsp`` out (:class:`CpuRsp`): that access is finished; ``state`` is what the cache installs
    (I: nothing) and ``data`` the line (reads) -- the model's completion;
  ``probe`` out (:class:`Message` of the coalescer): a merged invalidation/recall notice for the lines
    of one block, to the caches in ``caches``; taking it acknowledges it (the model's ``flush``);
  ``cmd`` out (:class:`CacheCmd`) / ``cmd_rsp`` in (:class:`CacheCmdRsp`): when the DCOH applies a
    decision to the copies of one line (answering a snoop, evicting after a back-invalidation, an
    internal fill) it tells the holders to keep, downgrade to S or invalidate them, and they answer with
    ``dirty`` (one held M), ``excl`` (one held E or M) and ``data`` (the M copy's line, or any copy's).
Status: ``dispatch`` (the event the engine starts this cycle, see below; ``work_line``: the line of
  the work item it starts with WORK; ``scan_before``: a SCAN comes before ``dispatch`` in this cycle),
  ``idle`` (the engine has nothing it can do: no event in progress, no rescan or replay due, no
  D2H request queued; work waiting for the caches to take its probe does not count),
  ``devload`` (2-bit level from tracker occupancy), ``protocol_errors`` (messages from the host that
  name a CQID not in use or make an undeclared transition: counted and dropped; a second snoop to a
  line whose first snoop is unanswered, which CXL forbids: counted and held until the first is
  answered, then answered; ``last_error`` names the kind), ``msgs_in``/``msgs_out`` (the coalescer's counters).

Micro-architecture
------------------
One engine (an FSM) serializes every event -- the model's event order -- with this priority: the
rescan of the waiting accesses in arrival order that follows every event (the model's ``service``;
first, so that an event's rescan comes right after it as in the model even if a probe is acknowledged
meanwhile), probes acknowledged (work on their lines; once started, all ready work runs before its
rescan, the model's ``finish_probe`` and its service), H2D Rsp, H2D Data, the held snoop's replay,
snoops, new CPU accesses.  ``dispatch`` (:class:`Dispatch`) names what the engine starts in each
cycle, the rescan after an event included (SCAN, in its first cycle): a testbench feeds a shadow
golden model the steps in exactly that order (tb/system_tb.py, ``Device.defer_service``).  The last
cycle of an event outside a run of work, with no access waiting, dispatches the next one itself
(``chain``), so events follow each other without an IDLE cycle; the hazards that rule needs are listed
there.  The snoop filter has
one lookup per cycle (1-cycle latency).  A snoop that misses the snoop filter, the tracker and the
work table is answered RspIHitI on the **fast path**: the response is valid in the cycle after the
snoop is taken, and the next snoop's lookup is issued in that same cycle, so misses stream at one per
cycle.  Anything else goes to the slow path, which follows the model step by step.  While the engine
waits for an internal cache in the middle of an event, the **snoop side path** answers the snoops the
fast path would (at the end of :meth:`DCOH.elaborate`), so that a slow cache does not stall them.

Where the RTL differs from the model (documented, not a behaviour difference at the boundary):
  * The DCOH cannot see a silent E->M upgrade in an internal cache.  A snoop to a line the device holds
    in E first queries the copies (``cmd`` KEEP: ``dirty`` says E or M, ``excl`` whether a copy is
    still E/M rather than S) and then decides to probe exactly as the model does, which looks into the
    caches directly.
  * The tracker, work table and coalescer are finite (parameters); the model's are not.  A snoop that
    needs a work entry when none is free is held (back-pressure on ``h2d_req``), as is a snoop that the
    model stalls (a line whose GO came before its data).  A probe the coalescer cannot take (no free
    group) waits in a queue of ``work`` entries in front of it; the engine does not wait for it.

# Ref: docs/sources.md §1.2-1.6 (opcodes, snoop-response table, field widths),
#      §2.4 (credits), §3.2 (DevLoad); states and transitions: cxl/coherence.py.
"""

import functools
import operator

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hdl.link.ports import LINE_BITS, channel_shape
from cxl.messages import (ADDR_WIDTH, ID_WIDTH, MAX_IDS, Channel, D2HReqOpcode as Req,
                          D2HRspOpcode as Rsp, H2DReqOpcode as Snp, H2DRspOpcode as HRsp)
from cxl.coherence import (DevState as D, MESI, Perm, STALL, GRANTED, INTERNAL_PERMISSION, REQUEST_START,
                           RESPONSE_TABLE, SNOOP_TABLE, GO_OF)
from cxl.device import ACCESS_KINDS, REQUEST_PRIORITY

from .coalescer import InvalidationCoalescer, Message
from .cqid import CQIDAllocator
from .tracker import TrackerTable, tracker_entry
from .work_table import WorkTable, work_entry
from .qos import CreditCounter, PriorityArbiter, DevLoad
from .snoop_filter import SnoopFilter, SFEntry, SFState, SFOp, AllocKind

__all__ = ["CpuKind", "CmdOp", "CacheState", "CpuReq", "CpuRsp", "CacheCmd", "CacheCmdRsp", "DCOH",
           "STATE_CODE", "ErrorKind", "Dispatch"]

# ---------------------------------------------------------------- encodings derived from the model
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
_STATE_BITS = (len(STATE_CODE) - 1).bit_length()
_UNCACHED = {"rdcurr": Req.RdCurr, "itomwr": Req.ItoMWr, "wrinv": Req.WrInv, "clflush": Req.CLFlush}
_EVENTS = ("GO-S", "GO-E", "GO-I", "Data", "GO_WritePull", "GO_WritePull_Drop", "WritePull")
_EVENT_CODE = {e: i for i, e in enumerate(_EVENTS)}


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


class ErrorKind(enum.Enum, shape=2):
    NONE = 0
    UNKNOWN_CQID = 1      #: H2D Rsp/Data for a CQID not in use
    UNDECLARED = 2        #: a response the line's state does not declare (or a bad GO state)
    SECOND_SNOOP = 3      #: a snoop to a line whose earlier snoop is still being answered (held, answered after it)


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


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class DCOH(wiring.Component):
    """Device coherency engine (ports and behaviour in the module docstring).

    Parameters (each checked; a bad one raises ValueError naming it):
      caches (1..32), sf_sets / sf_ways (powers of two), tracker (CQIDs, 2..4096), work (work-table
      entries: lines with probes outstanding, >= 1), coalesce_window (>= 0), coalesce_block (power of
      two), coalesce_groups (>= 1), starvation_bound (>= 2), credits (initial D2H credits per channel,
      1..1023), devload_thresholds, addr_width (> log2(sf_sets) and > log2(coalesce_block)).
    """

    #: the wake-up rule per access (a rescan's first round tries only the woken accesses); False: every
    #: round tries every waiting access, as before the rule (for measurements: bench/dcoh_bench.py)
    wake_per_access = True

    def __init__(self, *, caches=2, sf_sets=64, sf_ways=4, tracker=16, work=4, coalesce_window=4,
                 coalesce_block=4, coalesce_groups=4, starvation_bound=4, credits=8,
                 devload_thresholds=(0.25, 0.5, 0.75), addr_width=ADDR_WIDTH):
        def bad(name, value, why):
            raise ValueError(f"DCOH: {name}={value!r}: {why}")
        if not _is_int(caches) or not 1 <= caches <= 32:
            bad("caches", caches, "must be an integer in 1..32")
        for name, v in (("sf_sets", sf_sets), ("sf_ways", sf_ways), ("coalesce_block", coalesce_block)):
            if not _is_int(v) or v < 1 or v & (v - 1):
                bad(name, v, "must be a power of two >= 1")
        if not _is_int(tracker) or not 2 <= tracker <= MAX_IDS:
            bad("tracker", tracker, f"must be 2..{MAX_IDS} (12-bit CQID; a miss may need a second CQID "
                                    "for its victim's eviction)")
        if not _is_int(work) or work < 1:
            bad("work", work, "must be an integer >= 1")
        if not _is_int(coalesce_groups) or coalesce_groups < 1:
            bad("coalesce_groups", coalesce_groups, "must be an integer >= 1")
        if not _is_int(coalesce_window) or coalesce_window < 0:
            bad("coalesce_window", coalesce_window, "must be an integer >= 0")
        if not _is_int(starvation_bound) or starvation_bound < 2:
            bad("starvation_bound", starvation_bound, "must be an integer >= 2 (PriorityArbiter)")
        if not _is_int(credits) or not 1 <= credits <= 1023:
            bad("credits", credits, "must be 1..1023 (10-bit credit counters, facts §2.4)")
        if not _is_int(addr_width) or addr_width <= max(exact_log2(sf_sets), exact_log2(coalesce_block)):
            bad("addr_width", addr_width, "must exceed log2(sf_sets) and log2(coalesce_block)")
        self.caches, self.sf_sets, self.sf_ways = caches, sf_sets, sf_ways
        self.tracker, self.work = tracker, work
        self.coalesce_window, self.coalesce_block, self.coalesce_groups = \
            coalesce_window, coalesce_block, coalesce_groups
        self.starvation_bound, self.credits = starvation_bound, credits
        self.devload_thresholds, self.addr_width = tuple(devload_thresholds), addr_width
        # sub-blocks built here so that tests can reach their state (snoop-filter storage)
        self.sf = SnoopFilter(sf_sets, sf_ways, caches, addr_width, busy_at_result=True)
        self.coal = InvalidationCoalescer(coalesce_window, coalesce_block, coalesce_groups, caches,
                                          addr_width)
        self.cqids = CQIDAllocator(tracker)
        self.devload_block = DevLoad(tracker, self.devload_thresholds)  # ValueError names bad thresholds
        data_in = lambda chan: In(stream.Signature(channel_shape(chan)))
        data_out = lambda chan: Out(stream.Signature(channel_shape(chan)))
        super().__init__({
            "h2d_req": data_in(Channel.H2D_REQ), "h2d_rsp": data_in(Channel.H2D_RSP),
            "h2d_data": data_in(Channel.H2D_DATA),
            "d2h_req": data_out(Channel.D2H_REQ), "d2h_rsp": data_out(Channel.D2H_RSP),
            "d2h_data": data_out(Channel.D2H_DATA),
            "crd_req": In(range(65)), "crd_rsp": In(range(65)), "crd_data": In(range(65)),
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "probe": Out(stream.Signature(Message(addr_width - exact_log2(coalesce_block),
                                                  coalesce_block, caches))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "idle": Out(1), "dispatch": Out(Dispatch), "scan_before": Out(1), "work_line": Out(addr_width),
            "devload": Out(2),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
            "msgs_in": Out(32), "msgs_out": Out(32),
        })

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        K, T, W = self.caches, self.tracker, self.work
        AW = self.addr_width
        set_bits = exact_log2(self.sf_sets)
        way_bits = exact_log2(self.sf_ways)
        m.submodules.sf = sf = self.sf
        m.submodules.coal = coal = self.coal
        m.submodules.cqids = cqids = self.cqids
        m.submodules.devload = dl = self.devload_block
        m.submodules.arb = arb = PriorityArbiter(3, self.starvation_bound)
        m.submodules.crd_req = crq = CreditCounter(self.credits)
        m.submodules.crd_rsp = crs = CreditCounter(self.credits)
        m.submodules.crd_data = crd = CreditCounter(self.credits)
        class_fifos = []
        for c in range(3):
            f = fifo.SyncFIFOBuffered(width=ID_WIDTH, depth=T)
            m.submodules[f"class{c}"] = f
            class_fifos.append(f)

        m.d.comb += [crq.ret.eq(self.crd_req), crs.ret.eq(self.crd_rsp), crd.ret.eq(self.crd_data),
                     dl.occupancy.eq(cqids.count), self.devload.eq(dl.level),
                     self.msgs_in.eq(coal.msgs_in), self.msgs_out.eq(coal.msgs_out)]

        # ---- tracker (registers, hdl/dcoh/tracker.py) and its data buffer (a memory: one line per CQID)
        m.submodules.tracker = tracker = TrackerTable(T, tracker_entry(K, AW, way_bits, _STATE_BITS))
        trk = self.trk = tracker.entries                       # tests read it (tracker states)
        m.submodules.buf = buf = Memory(shape=LINE_BITS, depth=T, init=[])
        buf_w = buf.write_port()
        buf_r = buf.read_port()
        m.d.comb += buf_r.en.eq(1)

        # ---- work table: lines with probes outstanding (a held snoop and/or a back-invalidation) --
        m.submodules.work_table = work_table = WorkTable(W, work_entry(AW, way_bits, SFEntry(K)))
        wk = work_table.entries

        # ---- waiting CPU accesses: one per cache, a queue of cache indices in arrival order --------
        # The line a store or an uncached write brings waits apart, in a memory indexed by cache
        # (``store_data``), not beside the access in flip-flops: the rescan reads it by index into the
        # line register (S_RES), through the memory's registered read port.
        # (an entry's cache is its index)
        AccessReq = data.StructLayout({"kind": CpuKind, "line": AW, "variant": 1})
        ops = Signal(data.ArrayLayout(data.StructLayout({
            "valid": 1, "req": AccessReq, "victim_valid": 1, "victim": AW}), K))
        queue = Signal(data.ArrayLayout(range(max(K, 2)), K))
        q_len = Signal(range(K + 1))
        self.ops, self.queue, self.q_len = ops, queue, q_len         # tests read them
        m.submodules.store_data = store_data = Memory(shape=LINE_BITS, depth=max(K, 2), init=[])
        sd_w = store_data.write_port()
        # read at the index the access being tried will have (``cur_k``'s next value: SCAN and the CPU
        # dispatch drive it, below), so S_RES finds its line; transparent, for a store taken and looked
        # up in the same cycle
        sd_r = store_data.read_port(transparent_for=(sd_w,))
        m.d.comb += [sd_w.addr.eq(self.cpu_req.p.cache), sd_w.data.eq(self.cpu_req.p.data), sd_r.en.eq(1)]
        # What each waiting access waits for, and whether an event freed it since the access's last try
        # (the model's ``CpuOp.why`` and ``Device.woken``; docs/dcoh.md, "Waking the waiting accesses").
        # A failed try records its reasons, one bit each: a CQID, a work entry, or ``loc``, its line or a
        # way of its line's set.  ``loc`` is woken by any event that frees a line of that set, a superset
        # of the model's keys (set-index compares instead of line compares; an access woken for
        # nothing fails its try again, without side effects, which the model's ``verify_wake`` checks).
        # A new access is woken; a rescan's first round tries only the woken accesses (``scan_all``
        # clear), the rounds after an issue try every one.
        why_cqid, why_work, why_loc = Signal(K), Signal(K), Signal(K)
        woken = Signal(K)
        scan_all = Signal()
        self.woken = woken                                           # tests read it

        tbits = (T - 1).bit_length()

        def t_idx(cqid):
            """A CQID as a tracker index: only its low log2(T) bits, so that the tracker's read muxes and
            write decoders are as narrow as the tracker (a CQID from the host is range-checked apart)."""
            return cqid[:tbits]

        def tcam(line):
            return Cat(trk[i].valid & (trk[i].line == line) for i in range(T))

        def wcam(line):
            return Cat(wk[i].valid & (wk[i].line == line) for i in range(W))

        def first(bits, n):
            """Index of the lowest set bit (0 if none)."""
            idx = Signal(range(max(n, 2)))
            for i in reversed(range(n)):
                with m.If(bits[i]):
                    m.d.comb += idx.eq(i)
            return idx

        def hit_entry(th):
            """Latch the tracker hit of a lookup result: whether there is one, the index of the first hit
            entry, and its state -- selected with the one-hot of the first hit (a prefix OR, then an
            AND-OR), not through the index, so the state is registered in the lookup's result cycle and
            the snoop path after it starts from a flop.  (It cannot go stale: no tracker entry is written
            between a result cycle and the states that read the latched state, SNP_SLOW -- also when it
            is re-entered after a query of the copies -- and W_GO.)"""
            hits = Signal(T, name="hit_entries")      # a signal: each use of a Cat of comparisons re-emits them
            m.d.comb += hits.eq(th)
            first_oh = Cat(hits[i] & ~hits[:i].any() if i else hits[0] for i in range(T))
            state = Signal(_STATE_BITS, name="hit_state")
            m.d.comb += state.eq(functools.reduce(operator.or_, (Mux(first_oh[i], trk[i].state, 0) for i in range(T))))
            return [r_th.eq(hits.any()), r_t.eq(first(hits, T)), r_tstate.eq(state)]

        w_free = Cat(~wk[i].valid for i in range(W))
        w_free_idx = first(w_free, W)

        # ---- snoop-filter lookup port; the busy mask over the ways of the looked-up line's set -------
        # is read by the snoop filter in the result's cycle (``busy_at_result``), worked out from the
        # tracker and work-table registers for the result's line.  Those registers then hold whatever
        # the lookup's own cycle wrote: a tracker entry allocated with a way in that cycle is busy, and
        # the entry a completion freed in it is not, which a lookup issued by a chained dispatch (see
        # chain()) needs, without a path from this cycle's writes into the lookup.  No result is held
        # across a change of those registers where the allocation matters (every state that reads an
        # allocation takes its result at once).
        look_line = Signal(AW)
        look_valid = Signal()
        res = sf.result.p
        busy = Signal(self.sf_ways)
        lset = res.line[:set_bits] if set_bits else Const(0, 1)
        cur_t = Signal(range(max(T, 2)))                    # tracker entry being advanced/completed
        for w in range(self.sf_ways):
            hits = []
            for i in range(T):
                hits.append(trk[i].valid & trk[i].has_way & (trk[i].way == w) &
                            ((trk[i].line[:set_bits] == lset) if set_bits else 1))
            for i in range(W):
                hits.append(wk[i].valid & (wk[i].way == w) &
                            ((wk[i].line[:set_bits] == lset) if set_bits else 1))
            m.d.comb += busy[w].eq(Cat(*hits).any())
        m.d.comb += [sf.lookup.valid.eq(look_valid), sf.lookup.p.line.eq(look_line),
                     sf.lookup.p.busy.eq(0), sf.result_busy.eq(busy)]

        # ---- snoop-filter update port (one per cycle; ready is tied to 1) ---------------------------
        upd = sf.update
        def sf_update(op, line, way, state=None, dirty=None, presence=None, touch=0):
            m.d.comb += [upd.valid.eq(1), upd.p.op.eq(op), upd.p.line.eq(line), upd.p.way.eq(way),
                         upd.p.touch.eq(touch)]
            if state is not None:
                m.d.comb += [upd.p.entry.state.eq(state), upd.p.entry.dirty.eq(dirty),
                             upd.p.entry.presence.eq(presence)]

        # ---- D2H request transmit: per-class FIFOs of CQIDs, the arbiter, the credit counter ---------
        push_cqid = Signal(ID_WIDTH)
        push_class = Signal(range(3))
        push = Signal()
        for c, f in enumerate(class_fifos):
            m.d.comb += [f.w_data.eq(push_cqid), f.w_en.eq(push & (push_class == c)),
                         arb.req[c].eq(f.r_rdy)]
        head = Signal(ID_WIDTH)
        for c, f in enumerate(class_fifos):
            with m.If(arb.grant[c]):
                m.d.comb += head.eq(f.r_data)
        head_t = trk[t_idx(head)]
        m.d.comb += [
            self.d2h_req.valid.eq(arb.valid & (crq.available != 0)),
            self.d2h_req.p.valid.eq(1), self.d2h_req.p.opcode.eq(head_t.op),
            self.d2h_req.p.cqid.eq(head), self.d2h_req.p.addr.eq(head_t.line),
        ]
        sent = self.d2h_req.valid & self.d2h_req.ready
        m.d.comb += [arb.advance.eq(sent), crq.take.eq(sent)]
        for c, f in enumerate(class_fifos):
            m.d.comb += f.r_en.eq(sent & arb.grant[c])

        # ---- D2H response / data outputs (driven by the engine) -----------------------------------
        rsp_valid, data_valid = Signal(), Signal()
        # a response the snoop side path committed (see the end of elaborate): it goes out before the
        # engine's, which wait for it
        side_rsp = Signal()
        side_rsp_op = Signal(Rsp, init=Rsp.RspIHitI)
        side_rsp_uqid = Signal(ID_WIDTH)
        m.d.comb += [
            self.d2h_rsp.valid.eq((rsp_valid | side_rsp) & (crs.available != 0)),
            self.d2h_data.valid.eq(data_valid & (crd.available != 0)),
            self.d2h_rsp.p.valid.eq(1), self.d2h_data.p.hdr.valid.eq(1),
        ]
        rsp_port_sent = self.d2h_rsp.valid & self.d2h_rsp.ready
        rsp_sent = rsp_port_sent & ~side_rsp                # the engine's response went
        # the same, for a state that offers a response whatever else is offered (ANSWER_SEND): it does not
        # go through ``rsp_valid``, which the snoop fast path drives from the snoop filter's output.  One
        # of the two shared nets (the other: the lookup port's ready, see chain()) through which static
        # timing saw a path from the block RAM through the fast path into a chained dispatch, a false
        # path (the states are exclusive); with both cut the DCOH routes at 65.4 MHz (docs/synth.md)
        rsp_can = (crs.available != 0) & self.d2h_rsp.ready & ~side_rsp
        data_sent = self.d2h_data.valid & self.d2h_data.ready
        m.d.comb += [crs.take.eq(rsp_port_sent), crd.take.eq(data_sent)]

        # ---- probes: the coalescer's merged messages go to the caches; taking one readies the work --
        m.d.comb += [self.probe.valid.eq(coal.messages.valid), self.probe.p.eq(coal.messages.p),
                     coal.messages.ready.eq(self.probe.ready)]
        probe_taken = self.probe.valid & self.probe.ready
        bb = exact_log2(self.coalesce_block)
        for i in range(W):
            line = wk[i].line
            covered = (line[bb:] == coal.messages.p.block) & coal.messages.p.lines.bit_select(line[:bb], 1) \
                if bb else (line == coal.messages.p.block) & coal.messages.p.lines[0]
            m.d.comb += work_table.readied[i].eq(probe_taken & wk[i].valid & covered)
        # The engine hands a probe on and goes on: it never waits for the coalescer.  A probe the coalescer
        # cannot take at once (no free group) waits in a queue in front of it, in order; the coalescer's
        # groups free only when the caches take a message, and caches may take the next message only once
        # the engine has done the work of the last one (tb/system_tb.py does), so an engine waiting here
        # could wait forever.  The queue cannot overflow: every probe comes with a work entry of its own
        # that stays valid until a message naming its line is taken, so at most ``work`` probes wait.
        # When the queue is empty and the coalescer ready, the probe goes straight through (no cycle added).
        # The probe handed on this cycle: a probing snoop's from SNP_SLOW, in its decision's cycle, or a
        # back-invalidation's, which S_TRY registers (``bi_line``, ``bi_caches``) for S_PROBE.
        coal_push = Signal()
        coal_line = Signal(AW)
        coal_caches = Signal(K)
        bi_line = Signal(AW)
        bi_caches = Signal(K)
        m.d.comb += [coal_line.eq(bi_line), coal_caches.eq(bi_caches)]     # (SNP_SLOW overrides them)
        m.submodules.probe_q = probe_q = fifo.SyncFIFO(width=AW + K, depth=W)
        queued_probe = data.View(data.StructLayout({"line": AW, "caches": K}), probe_q.r_data)
        m.d.comb += [
            coal.probes.valid.eq(probe_q.r_rdy | coal_push),
            coal.probes.p.line.eq(Mux(probe_q.r_rdy, queued_probe.line, coal_line)),
            coal.probes.p.caches.eq(Mux(probe_q.r_rdy, queued_probe.caches, coal_caches)),
            probe_q.r_en.eq(coal.probes.ready),
            probe_q.w_data.eq(Cat(coal_line, coal_caches)),
            probe_q.w_en.eq(coal_push & (probe_q.r_rdy | ~coal.probes.ready)),
        ]
        m.d.sync += Assert(~probe_q.w_en | probe_q.w_rdy, "probe queue overflow: a probe without a work entry")

        # ---- engine registers ---------------------------------------------------------------------
        snp = Signal(channel_shape(Channel.H2D_REQ))       # the snoop being looked up (SNP_RES)
        # the snoop the slow path handles, and holds for its replay: SNP_RES copies ``snp`` into it as it
        # takes the lookup result, so that ``snp`` is free again in that cycle whichever path the snoop
        # takes, and can load the next snoop offered without waiting for that choice (below the FSM)
        slow_snp = Signal(channel_shape(Channel.H2D_REQ))
        replay = Signal()                                   # snp is held (stalled) and must be re-run
        replay_go = Signal()                                # something changed since: re-run it
        second_held = Signal()                              # snp is held as a second snoop to its line
        r = Signal.like(res)                                # latched lookup result
        r_t = Signal(range(max(T, 2)))                      # tracker hit index
        r_tstate = Signal(_STATE_BITS)                      # ... and that entry's state when r was latched
        r_th = Signal()
        r_w = Signal(range(max(W, 2)))                      # work hit index
        r_wh = Signal()
        ev = Signal(channel_shape(Channel.H2D_RSP))         # latched H2D Rsp
        dv_cqid = Signal(ID_WIDTH)                          # latched H2D Data's CQID (its line: cmd_data)
        rescan = Signal()
        in_work = Signal()       # a run of acknowledged work is under way (its rescan comes after it)
        scan_i = Signal(range(K + 1))
        progress = Signal()
        cur_w = Signal(range(max(W, 2)))                    # work entry being finished
        # the one line register: every line the engine moves passes through it.  It is loaded from the
        # caches (cmd_rsp), the host (H2D Data, in IDLE), the buffer, a waiting store, or zeroed, and it
        # alone drives the buffer's write data, D2H Data and cpu_rsp: a 512-bit line then has one input
        # multiplexer (its selects from the FSM state and flops) and no output multiplexers, which is what
        # let the DCOH route on the ECP5 (docs/dcoh.md, "FPGA timing and routing").  It is dead in IDLE.
        cmd_data = Signal(LINE_BITS)
        cmd_dirty = Signal()
        bogus = Signal()                                    # the D2H Data being sent is Bogus
        errors = Signal(16)
        reply_state = Signal(CacheState)                    # what S_REPLY tells the cache to install
        m.d.comb += self.protocol_errors.eq(errors)

        # answer context (the slow snoop path and the work path share it)
        a_op = Signal(Snp, init=Snp.SnpData)
        a_uqid = Signal(ID_WIDTH)
        a_state = Signal(_STATE_BITS)      # device state of the line (E: maybe M until the probe says)
        a_maybe_m = Signal()               # state E from the snoop filter: M if a copy is dirty
        a_probed = Signal()                # the copies were probed: command them
        a_fromwork = Signal()

        def count_error(kind):
            m.d.sync += [errors.eq(errors + 1), self.last_error.eq(kind)]

        # ---- table lookups generated from the model's tables ----------------------------------------
        def snoop_table(state, op):
            """(stall, rsp, next state, data) for a device state code and a snoop opcode."""
            stall, rsp, nxt, dat = Signal(), Signal(Rsp, init=Rsp.RspIHitI), Signal(_STATE_BITS), Signal()
            with m.Switch(state):
                for s, code in STATE_CODE.items():
                    with m.Case(code):
                        with m.Switch(op):
                            for o in Snp:
                                if (s, o) not in SNOOP_TABLE:
                                    continue
                                r_, n_, d_ = SNOOP_TABLE[(s, o)]
                                with m.Case(o):
                                    if r_ is STALL:
                                        m.d.comb += [stall.eq(1), nxt.eq(STATE_CODE[n_])]
                                    else:
                                        m.d.comb += [rsp.eq(r_), nxt.eq(STATE_CODE[n_]), dat.eq(d_)]
            return stall, rsp, nxt, dat

        def perm_rw(state):
            """The device state allows internal copies write permission."""
            rw = [STATE_CODE[s] for s in D if INTERNAL_PERMISSION.get(s, Perm.NONE) is Perm.READWRITE]
            return Cat(state == c for c in rw).any()

        def perm_none(state):
            """The device state leaves internal copies no permission (cxl.coherence.INTERNAL_PERMISSION)."""
            none = [STATE_CODE[s] for s in D if INTERNAL_PERMISSION.get(s, Perm.NONE) is Perm.NONE]
            return Cat(state == c for c in none).any()

        def response_table(state, event):
            """(legal, next state code or GRANTED, granted, send data, bogus)."""
            legal, nxt, granted, send, bogus = Signal(), Signal(_STATE_BITS), Signal(), Signal(), Signal()
            with m.Switch(state):
                for s, code in STATE_CODE.items():
                    evs = [(e, v) for (s2, e), v in RESPONSE_TABLE.items() if s2 is s]
                    if not evs:
                        continue
                    with m.Case(code):
                        with m.Switch(event):
                            for e, (n_, action) in evs:
                                with m.Case(_EVENT_CODE[e]):
                                    m.d.comb += legal.eq(1)
                                    if n_ == GRANTED:
                                        m.d.comb += granted.eq(1)
                                    else:
                                        m.d.comb += nxt.eq(STATE_CODE[n_])
                                    m.d.comb += [send.eq(action is not None), bogus.eq(action == "send_bogus")]
            return legal, nxt, granted, send, bogus

        stable_codes = [STATE_CODE[s] for s in (D.I, D.S, D.E, D.M)]

        def is_stable(code):
            return Cat(code == c for c in stable_codes).any()

        # ---- the state a snoop finds, from the lookup result and the CAMs --------------------------
        def line_state(hit, entry, th, t_state):
            st = Signal(_STATE_BITS)
            maybe_m = Signal()
            with m.If(th):
                m.d.comb += st.eq(t_state)
            with m.Elif(hit & (entry.state != SFState.PLACEHOLDER)):
                with m.If(entry.dirty):
                    m.d.comb += st.eq(STATE_CODE[D.M])
                with m.Elif(entry.state == SFState.E):
                    m.d.comb += [st.eq(STATE_CODE[D.E]), maybe_m.eq(1)]
                with m.Else():
                    m.d.comb += st.eq(STATE_CODE[D.S])
            with m.Else():
                m.d.comb += st.eq(STATE_CODE[D.I])
            return st, maybe_m

        # ---- the tables' write ports, driven by the FSM below (hdl/dcoh/tracker.py, work_table.py) --------
        def set_state(idx, state):
            m.d.comb += [tracker.set.valid.eq(1), tracker.set.idx.eq(idx), tracker.set.state.eq(state)]

        def new_work(line, way, snoop=0, snp_op=Snp.SnpData, snp_uqid=0, evict=0, evict_cqid=0, known=0,
                     sf_entry=None):
            e = work_table.new.entry
            m.d.comb += [work_table.new.valid.eq(1), work_table.new.idx.eq(w_free_idx),
                         e.valid.eq(1), e.ready.eq(0), e.line.eq(line), e.way.eq(way), e.snoop.eq(snoop),
                         e.snp_op.eq(snp_op), e.snp_uqid.eq(snp_uqid), e.evict.eq(evict),
                         e.evict_cqid.eq(evict_cqid), e.known.eq(known)]
            if sf_entry is not None:
                m.d.comb += e.sf.eq(sf_entry)

        wcur = work_table.cur
        m.d.comb += wcur.idx.eq(cur_w)

        # ---- new tracker entry (a D2H request) -----------------------------------------------------
        def new_txn(cqid, op, line, state, cache, cpu, store, has_way, way):
            e = tracker.new.entry
            m.d.comb += [tracker.new.valid.eq(1), tracker.new.idx.eq(t_idx(cqid)),
                         e.valid.eq(1), e.op.eq(op), e.line.eq(line), e.state.eq(state), e.cache.eq(cache),
                         e.cpu.eq(cpu), e.store.eq(store), e.granted_e.eq(0), e.has_way.eq(has_way),
                         e.way.eq(way)]
            m.d.comb += [push.eq(1), push_cqid.eq(cqid)]
            with m.Switch(op):
                for o, c in REQUEST_PRIORITY.items():
                    with m.Case(o):
                        m.d.comb += push_class.eq(c)

        # ================================================================================ the FSM
        work_ready = Cat(wk[i].valid & wk[i].ready for i in range(W))
        work_ready_idx = first(work_ready, W)
        # the access being tried by the rescan: SCAN latches its cache index when it issues the lookup
        # (queue and scan_i do not move until the try is over), so S_TRY and the states after it select
        # the access through one register, not through queue[scan_i]
        cur_k = Signal(range(max(K, 2)))
        m.d.comb += sd_r.addr.eq(cur_k)            # (SCAN and the CPU dispatch override it)
        cur_op = ops[cur_k]
        # ... and S_RES copies that access (all but its line of data, which it loads into cmd_data) into
        # flops, so S_TRY's decision and the states after it start from registers, not from ops' K-way select
        cur = Signal(data.StructLayout({"kind": CpuKind, "line": AW, "variant": 1, "victim_valid": 1,
                                        "victim": AW}))
        # SCAN's choice: the queue positions from scan_i on that hold an access to try (``pick``: one is
        # taken up, ``pick_k`` its cache index; SCAN and the CPU dispatch's own lookup drive them)
        scan_cand = Signal(K)
        m.d.comb += scan_cand.eq(Cat((j >= scan_i) & (j < q_len) &
                                     (scan_all | (woken.bit_select(queue[j], 1) if self.wake_per_access else 1))
                                     for j in range(K)))
        scan_found, scan_at = scan_cand.any(), first(scan_cand, K)
        pick, pick_k = Signal(), Signal.like(cur_k)
        self.scan_pick = pick                                        # tests and benches count the tries
        # S_TRY leaves the access waiting (``try_wait``), for these reasons
        try_wait, try_cqid, try_work, try_loc = Signal(), Signal(), Signal(), Signal()
        snp_wake = Signal()         # a snoop's answer changed its line's snoop-filter entry, no request on it
        res_alloc_free = r.alloc == AllocKind.FREE
        victim_busy = wcam(cur.victim).any()

        def dequeue():
            """Take queue[scan_i] out (the later ones move up); the scan will go round again."""
            for j in range(K - 1):
                with m.If(scan_i <= j):
                    m.d.sync += queue[j].eq(queue[j + 1])
            m.d.sync += [q_len.eq(q_len - 1), progress.eq(1)]

        def scan_on():
            """After a dequeue: round the queue again, unless that was the last access waiting (then the
            next event is dispatched in this same cycle, :func:`chain`)."""
            with m.If(q_len == 1):
                chain(q_now=0)
            with m.Else():
                m.next = "SCAN"

        # snoop table evaluations used by the slow path (state from the latched lookup)
        # q_*: what a query (cmd KEEP) of an E line's copies said: the DCOH cannot see a silent E->M
        q_done, q_dirty, q_excl = Signal(), Signal(), Signal()
        r_state0, r_maybe_m0 = line_state(r.hit, r.entry, r_th, r_tstate)
        r_state, r_maybe_m = Signal(_STATE_BITS), Signal()
        m.d.comb += [r_state.eq(Mux(r_maybe_m0 & q_done & q_dirty, STATE_CODE[D.M], r_state0)),
                     r_maybe_m.eq(r_maybe_m0 & ~q_done)]
        # the most permission the internal copies have (the model's ``copies``): S copies unless an E
        # line's query found an E/M one
        copies_rw = r_maybe_m0 & q_done & q_excl
        s_stall, s_rsp, s_nxt, s_data = snoop_table(r_state, slow_snp.opcode)
        a_stall, a_rsp, a_nxt, a_data = snoop_table(a_state, a_op)      # ANSWER: how to command the copies
        _, _, w_nxt, _ = snoop_table(r_state, a_op)       # W_GO: the same, a cycle before a_state is loaded
        # The WORK dispatch of a work that kept its snoop-filter entry (``known``: a hit, no request on the
        # line) decides W_GO's command itself, from the entry as the dispatch reads it
        k_entry = wk[work_ready_idx]
        k_state, k_maybe_m = line_state(1, k_entry.sf, 0, 0)
        _, _, k_nxt, _ = snoop_table(k_state, k_entry.snp_op)
        early_cmd_taken = Signal()      # the dispatch's command was taken: the work goes to ANSWER_RSP
        cmd_free_here = Signal()        # the dispatching state neither offers a command nor takes an answer
        # The cycle that ends the command of the copies (ANSWER_RSP as the caches answer, or ANSWER when
        # there is nothing to command) settles the line's state (E -> M if a copy was dirty) and registers
        # the snoop table's verdict on it, which ANSWER_SEND / ANSWER_DATA use (their SF and tracker
        # updates then start from flops, not from the table)
        f_state = Signal(_STATE_BITS)
        settle_dirty = Signal()          # a copy was dirty: the caches' answer, in the cycle it comes
        m.d.comb += f_state.eq(Mux(a_maybe_m & settle_dirty, STATE_CODE[D.M], a_state))
        _, f_rsp, f_nxt, f_data = snoop_table(f_state, a_op)
        v_rsp, v_nxt, v_data = Signal.like(f_rsp), Signal.like(f_nxt), Signal.like(f_data)
        v_none, v_changed = Signal(), Signal()
        # H2D Rsp / Data: the tracker entry a message names and the response table's verdict on it are
        # worked out from the input when IDLE takes the message and registered (IDLE writes no tracker
        # entry, so this is what RSP / DATA would read a cycle later); RSP / DATA then start from flops.
        rsp_in, data_in_ = self.h2d_rsp.p, self.h2d_data.p
        in_code = Signal(range(len(_EVENTS)))
        in_ok = Signal()
        with m.Switch(rsp_in.opcode):
            with m.Case(HRsp.GO):
                with m.Switch(rsp_in.rsp_data[:4]):
                    for g, name in GO_OF.items():
                        with m.Case(g):
                            m.d.comb += [in_code.eq(_EVENT_CODE[name]), in_ok.eq(1)]
            for o in (HRsp.GO_WritePull, HRsp.GO_WritePull_Drop, HRsp.WritePull):
                with m.Case(o):
                    m.d.comb += [in_code.eq(_EVENT_CODE[o.name]), in_ok.eq(1)]
        rsp_t_in = trk[t_idx(rsp_in.cqid)]
        e_in = response_table(rsp_t_in.state, in_code)
        ev_code, ev_ok, ev_live, ev_granted_e = Signal.like(in_code), Signal(), Signal(), Signal()
        e_legal, e_nxt, e_granted, e_send, e_bogus = (Signal.like(v) for v in e_in)
        latch_rsp = [ev.eq(rsp_in), ev_code.eq(in_code), ev_ok.eq(in_ok),
                     ev_live.eq((rsp_in.cqid < T) & rsp_t_in.valid), ev_granted_e.eq(rsp_t_in.granted_e),
                     *(q.eq(v) for q, v in zip((e_legal, e_nxt, e_granted, e_send, e_bogus), e_in))]
        ct = trk[cur_t]          # the request an H2D Rsp / Data names (IDLE sets cur_t as it takes one)
        # the state an H2D Rsp moves its request to (GRANTED: E or S by the GO that came first)
        e_new = Signal(_STATE_BITS)
        m.d.comb += e_new.eq(Mux(e_granted, Mux(ev_granted_e, STATE_CODE[D.E], STATE_CODE[D.S]), e_nxt))
        # An H2D Data taken (chained, see chain()) in the last cycle of the H2D Rsp that moves the same
        # request without completing it (a GO before its data) is judged on the state that Rsp writes
        # at this cycle's edge, forwarded here (``rsp_fwd``: RSP is in that cycle), not on the
        # tracker's register, which still holds the state before it.
        rsp_fwd = Signal()
        data_t_in = trk[t_idx(data_in_.hdr.cqid)]
        d_fwd = rsp_fwd & (t_idx(data_in_.hdr.cqid) == cur_t)
        data_state_in = Signal(_STATE_BITS)
        data_granted_in = Signal()
        m.d.comb += [data_state_in.eq(Mux(d_fwd, e_new, data_t_in.state)),
                     data_granted_in.eq(Mux(d_fwd & (ev_code == _EVENT_CODE["GO-S"]), 0,
                                            Mux(d_fwd & (ev_code == _EVENT_CODE["GO-E"]), 1,
                                                data_t_in.granted_e)))]
        d_in = response_table(data_state_in, Const(_EVENT_CODE["Data"], in_code.shape()))
        dv_live, dv_granted_e = Signal(), Signal()
        d_legal, d_nxt, d_granted = (Signal.like(v) for v in d_in[:3])
        latch_data = [dv_cqid.eq(data_in_.hdr.cqid),
                      dv_live.eq((data_in_.hdr.cqid < T) & data_t_in.valid), dv_granted_e.eq(data_granted_in),
                      *(q.eq(v) for q, v in zip((d_legal, d_nxt, d_granted), d_in))]
        # the state an H2D Data moves its request to
        d_new = Signal(_STATE_BITS)
        m.d.comb += d_new.eq(Mux(d_granted, Mux(dv_granted_e, STATE_CODE[D.E], STATE_CODE[D.S]), d_nxt))

        def fill_sf(state):
            """A completed read's fill: its snoop-filter entry (a placeholder until now) takes the state
            (E or S) and the filling cache, and becomes the most recently used way of its set."""
            mine = Signal(K, name="fill_presence")
            m.d.comb += mine.eq(1 << ct.cache)
            sf_update(SFOp.MODIFY, ct.line, ct.way, Mux(state == STATE_CODE[D.E], SFState.E, SFState.S), 0,
                      mine, touch=1)

        def tell_cache(state=None, writes_t=None):
            """A completed request tells its cache (a CPU access's: cpu_rsp; else nothing to say), then
            the rescan; a cache that is not ready is waited for in C_DONE.  ``state``: the request's
            state (default: the tracker's; the state written this cycle when it completes in this
            cycle, which then also names the entry it writes, ``writes_t``)."""
            st = ct.state if state is None else state
            with m.If(ct.cpu):
                m.d.comb += [self.cpu_rsp.valid.eq(1), self.cpu_rsp.p.cache.eq(ct.cache),
                             self.cpu_rsp.p.line.eq(ct.line)]
                with m.If(st == STATE_CODE[D.E]):
                    m.d.comb += self.cpu_rsp.p.state.eq(Mux(ct.store, CacheState.M, CacheState.E))
                with m.Elif(st == STATE_CODE[D.S]):
                    m.d.comb += self.cpu_rsp.p.state.eq(CacheState.S)
                with m.Else():
                    m.d.comb += self.cpu_rsp.p.state.eq(CacheState.I)
                with m.If(self.cpu_rsp.ready):
                    rescan_next(ops[ct.cache].valid.eq(0), replay_go.eq(1), writes_t=writes_t)
                with m.Else():
                    m.next = "C_DONE"
            with m.Else():
                rescan_next(replay_go.eq(1), writes_t=writes_t)

        def advance(new_state, from_rsp=False, line_ready=False):
            """The request at ``cur_t`` (IDLE set it when it took the H2D Rsp / Data) moved to
            ``new_state`` (written this cycle): a stable state completes it -- the CQID is freed and the
            cache filled or told; otherwise it waits for the host's next message and the rescan follows.
            Through ``ct`` = trk[cur_t] only: one select of the tracker's lines, shared by every state
            that completes a request.  ``line_ready``: cmd_data holds the request's line in this cycle
            (an H2D Data: IDLE loaded it), so a fill or an uncached read completes here; ``from_rsp``:
            an H2D Rsp, whose line (if any) RSP loads only at this cycle's edge."""
            with m.If(is_stable(new_state)):
                m.d.comb += [cqids.free_valid.eq(1), cqids.free_cqid.eq(cur_t)]
                m.d.comb += [tracker.free.valid.eq(1), tracker.free.idx.eq(cur_t)]
                with m.If((new_state != STATE_CODE[D.I]) & ct.store):
                    # a store's fill must know the other holders (an upgrade from S leaves S copies
                    # to invalidate): look the line up
                    m.d.comb += [look_valid.eq(1), look_line.eq(ct.line)]
                    m.next = "C_RES"
                with m.Elif(new_state != STATE_CODE[D.I]):
                    # a load's fill needs no lookup: the line was a placeholder (a miss from I: the
                    # line was busy all along, so no other cache got a copy), the way is the tracker's
                    if line_ready:
                        fill_sf(new_state)
                        tell_cache(new_state, writes_t=cur_t)
                    else:
                        m.next = "C_FILL"
                with m.Else():
                    # an uncached read (RdCurr) hands its line to the cache; nothing else completing
                    # in I carries one, so those tell their cache at once
                    if line_ready:
                        tell_cache(new_state, writes_t=cur_t)
                    elif from_rsp:
                        with m.If(ct.op != Req.RdCurr):
                            tell_cache(new_state, writes_t=cur_t)
                        with m.Else():
                            m.next = "C_DONE"
                    else:
                        m.next = "C_DONE"
            with m.Else():                  # (the line stays busy, nothing freed: no rescan)
                if from_rsp:
                    m.d.comb += rsp_fwd.eq(1)
                rescan_next(writes_t=cur_t, forwards_data=from_rsp, wakes=0)

        def await_cmd_rsp(name, then, latch=()):
            """FSM state ``name``: wait for the caches' answer to a ``cmd``, latch it, go to ``then``."""
            with m.State(name):
                m.d.comb += self.cmd_rsp.ready.eq(1)
                with m.If(self.cmd_rsp.valid):
                    m.d.sync += list(latch)
                    m.next = then

        latch_line = [cmd_dirty.eq(self.cmd_rsp.p.dirty), cmd_data.eq(self.cmd_rsp.p.data)]
        m.d.comb += [buf_w.data.eq(cmd_data), self.d2h_data.p.data.eq(cmd_data), self.cpu_rsp.p.data.eq(cmd_data)]

        # the snoops an S line answers without a probe or a change (the snoop table's (S, op) rows that
        # keep S, send no data and leave the copies their read permission): SNP_RES streams them
        def keeps_s(opcode):
            """(keeps, response): the snoop ``opcode`` leaves an S line as it is, and what it answers."""
            keeps, keep_rsp = Signal(), Signal(Rsp, init=Rsp.RspSHitSE)
            with m.Switch(opcode):
                for o in Snp:
                    rsp_, nxt_, data_ = SNOOP_TABLE[(D.S, o)]
                    if rsp_ is not STALL and nxt_ is D.S and not data_ and \
                            INTERNAL_PERMISSION.get(D.S, Perm.NONE) is not Perm.NONE:
                        with m.Case(o):
                            m.d.comb += [keeps.eq(1), keep_rsp.eq(rsp_)]
            return keeps, keep_rsp

        s_keeps, s_keep_rsp = keeps_s(snp.opcode)

        # The rescan that follows an event is a step of its own for a shadow model: ``dispatch`` shows
        # SCAN in its first cycle (the cycle after the event's last; no dispatch and no side-path take
        # can fall in that cycle), so that the snoops the side path answered while the event waited come
        # before it there too (docs/dcoh.md, "Snoop side path").
        scan_report = Signal()
        m.d.sync += scan_report.eq(0)

        def rescan_next(*also, writes_t=None, forwards_data=False, wakes=1):
            """The end of an event: the model's service() follows it (reported: ``scan_report``).  Outside
            a run of work nothing outranks a pending rescan in IDLE, so go to SCAN at once when accesses
            wait and the event woke them (``wakes``: it freed a CQID, a line, a work entry or a
            snoop-filter way, the model's ``Device.woken``), and drop the rescan (a no-op) otherwise,
            dispatching the next event in this same cycle (:func:`chain`; ``writes_t``: the tracker entry
            this cycle writes, if any); inside a run of work IDLE decides (more work first, then the SCAN
            that marks the run's end).  An event that frees nothing leaves every waiting access failing
            its try as in the last rescan, so skipping that rescan changes no outcome, only the cycles
            it took (three per waiting access)."""
            m.d.sync += list(also)
            with m.If(in_work):
                m.d.sync += rescan.eq(1)
                m.next = "IDLE"
                chain_work(writes_t)
            with m.Elif((q_len != 0) & wakes):
                m.d.sync += [scan_i.eq(0), progress.eq(0), scan_all.eq(0), scan_report.eq(1)]
                m.next = "SCAN"
            with m.Else():
                chain(writes_t, forwards_data)

        # The wide registers a dispatch loads (the H2D Data line into cmd_data, the snoop; the CPU access
        # with its line goes to its slot whenever that is free) are written once, below the FSM, from
        # these strobes: IDLE's dispatch runs in IDLE and in every state that chains, and writing them in
        # each would give every such state a 512-bit input multiplexer of its own.  (Below the FSM, these
        # writes take precedence over a state's own in the same cycle, as the dispatch's did when it came
        # last in that state.)
        load_h2d_line, take_snp = Signal(), Signal()
        stream_snoop, load_snp = Signal(), Signal()       # SNP_RES: the next snoop streams / snp takes it
        # The same for every other register a dispatch writes: ``go_any`` (a dispatch decision runs this
        # cycle, in IDLE or chained; ``go_q``: its ``q_now``), then one strobe per outcome.  The
        # narrow registers too: written in each chaining state, they gave each of those states a
        # multiplexer input per bit (yosys: 16 288 LUT4 for the DCOH with only the wide ones moved).
        go_any, go_aft = Signal(), Signal()      # go_aft: chain_work's dispatch after the run's SCAN
        go_q = Signal.like(q_len)
        cw_work, cw_scan = Signal(), Signal()      # chain_work's dispatch
        readies_work = Signal()         # this cycle readies a work entry again (see chain_work)

        def work_next():
            """A work item is dispatched: a snoop's work whose snoop-filter entry it keeps (``known``) goes
            straight to W_GO, the dispatch loading ``r`` from it (below the FSM); other work has its
            lookup issued with the dispatch, unless a lookup result is still held, then W_LOOK issues it."""
            with m.If(wk[work_ready_idx].known):
                with m.If(early_cmd_taken):
                    m.next = "ANSWER_RSP"
                with m.Else():
                    m.next = "W_GO"
            with m.Elif(sf.result.valid):
                m.next = "W_LOOK"
            with m.Else():
                m.next = "W_RES"

        def chain_work(writes_t=None):
            """The last cycle of a work item inside a run of work: dispatch what IDLE would in the next
            cycle (more work while some is ready, else the SCAN that ends the run), unless this cycle
            readies its own work entry again (a snoop's answer whose line's eviction follows it,
            ``readies_work``: IDLE would then choose among the entries ready at the edge; without this
            guard tests/test_rtl_dcoh.py's race replays fail).  Work that a probe taken in this cycle
            readies is not seen here: it runs after the work chosen now, or in the next run, after this
            SCAN; a shadow model follows either, as ``work_line`` names the line of each WORK.  A SCAN
            with no access waiting is the run's end mark alone (no access to try), so the event after
            it is dispatched in this same cycle too (:func:`chain`, with the rescan and the run taken as
            ended, ``aft``): ``dispatch`` shows that event and ``scan_before`` the SCAN before it."""
            with m.If(~readies_work):
                with m.If(work_ready.any()):
                    m.d.comb += cw_work.eq(1)
                    work_next()
                with m.Else():
                    m.d.comb += cw_scan.eq(1)
                    with m.If(q_len != 0):
                        m.next = "SCAN"
                    with m.Else():
                        chain(writes_t, after_scan=True, q_now=0)

        def idle_dispatch(q_now, after_scan=False):
            """Start the next event (IDLE's dispatch, also run by :func:`chain` in the last cycle of an
            event).  ``q_now``: the number of waiting accesses after this cycle's own changes (q_len in
            IDLE and after an event that woke none of them; 0 after the scan's last access issued).
            ``after_scan``: chain_work's
            dispatch after the SCAN that ends a run of work, which takes its own decision (``aft``).
            The decisions are worked out once, outside the FSM, and so are the handshakes, the
            ``dispatch`` code and the registers it loads (below the FSM, from ``go_any`` / ``go_aft``);
            a state that dispatches only takes the transition."""
            d = aft if after_scan else dec
            m.d.comb += [(go_aft if after_scan else go_any).eq(1), go_q.eq(q_now)]
            with m.If(d["work"]):
                work_next()
            with m.Elif((d["scan"] & (q_len != 0)) | (d["cpu"] & ~d["cpu_look"])):
                m.next = "SCAN"
            with m.Elif(d["rsp"]):
                m.next = "RSP"
            with m.Elif(d["data"]):
                m.next = "DATA"
            with m.Elif(d["replay"] | d["snoop"]):
                m.next = "SNP_RES"
            with m.Elif(d["cpu_look"]):
                m.next = "S_RES"

        # IDLE's dispatch decision, in priority order.  Atomic units, as the model's moves: an event and
        # the rescan after it (event + service()), and all the work of acknowledged probes and the rescan
        # after it (flush + service()).  So a pending rescan goes before work that was acknowledged
        # meanwhile, but once work has started it goes on until none is ready.  A rescan with no access
        # waiting is a no-op (the model's service() then finds nothing to try): it is dropped at no cost
        # and the same cycle dispatches what comes next.  After a run of work it is still dispatched: its
        # SCAN marks the end of that work for the caches.  A CPU access's rescan starts at once (no run
        # of work is under way when the decision gets that far); when it is the only access waiting, the
        # scan's first step (its lookup) is issued with it (``cpu_look``).
        cpu_slot_free = Signal()            # the CPU access offered finds its cache's slot free
        m.d.comb += cpu_slot_free.eq(self.cpu_req.valid & ~ops[self.cpu_req.p.cache].valid)

        def decide(name, rescan_due, in_work_now, q_now):
            """The dispatch decision from the registers and the inputs: one strobe per outcome, and
            whether the pending rescan is dropped as a no-op (``empty_scan``)."""
            d = {n: Signal(name=f"{name}_{n}") for n in ("work", "scan", "rsp", "data", "replay", "snoop",
                                                        "cpu", "cpu_look", "empty_scan")}
            m.d.comb += d["empty_scan"].eq(rescan_due & (q_len == 0) & ~in_work_now)
            with m.If(work_ready.any() & in_work_now):
                m.d.comb += d["work"].eq(1)
            with m.Elif(rescan_due & ~d["empty_scan"]):
                m.d.comb += d["scan"].eq(1)
            with m.Elif(work_ready.any()):
                m.d.comb += d["work"].eq(1)
            with m.Elif(self.h2d_rsp.valid):
                m.d.comb += d["rsp"].eq(1)
            with m.Elif(self.h2d_data.valid):
                m.d.comb += d["data"].eq(1)
            with m.Elif(replay & replay_go):
                m.d.comb += d["replay"].eq(1)
            with m.Elif(~replay & self.h2d_req.valid):
                m.d.comb += d["snoop"].eq(1)
            with m.Elif(cpu_slot_free):
                m.d.comb += d["cpu"].eq(1)
            m.d.comb += d["cpu_look"].eq(d["cpu"] & ~replay & (q_now == 0) & sf.lookup.ready)
            return d

        dec = decide("dec", rescan, in_work, go_q)
        # chain_work's dispatch after the run's SCAN sees the rescan done and the run over, as IDLE would
        # in the next cycle.  A decision of its own, so that whether that SCAN goes this cycle (``cw_scan``,
        # late: it waits for the state's own outcome) selects between two finished decisions and does not
        # run through the priority chain of every dispatch (with one decision masked by ``cw_scan``, that
        # was the DCOH's critical path on the ECP5, docs/synth.md).
        aft = decide("aft", Const(0), Const(0), Const(0))

        def chain(writes_t=None, forwards_data=False, after_scan=False, q_now=None):
            """The last cycle of an event outside a run of work, with no rescan to follow (no access
            waiting, or none the event woke; ``q_now``: how many wait after this cycle, default
            ``q_len``): dispatch the next
            event in this same cycle, as IDLE would in the next one, so that events follow each other
            without an IDLE cycle between them.  What IDLE reads is as it would be a cycle later except
            for what this cycle writes at its edge, so the next event is not started here (IDLE takes it
            in the next cycle) when it would read such a thing:
              * an H2D Rsp / Data naming the tracker entry ``writes_t`` this cycle writes (IDLE registers
                the response table's verdict on that entry's state, and reads the line buffer at its CQID),
                except an H2D Data when ``forwards_data`` (an H2D Rsp's last cycle: its new state is
                forwarded to the Data's verdict, ``rsp_fwd``);
              * a held snoop (its replay decision reads ``replay_go``, which this cycle may set), or a
                rescan still due (its dispatch comes first in IDLE);
              * a snoop-filter result still held (``sf.result.valid``; the lookup port is then not ready).
            The lookup's busy mask is worked out in the result's cycle from the registers, which then
            hold this cycle's writes (``busy_at_result``): a CPU access looked up now cannot pick the way
            a tracker entry allocated in this cycle as its victim, and the entry a completion frees in
            this cycle no longer counts, as the model has completed it; the snoop filter's read port is
            transparent to its write port, so the lookup sees this cycle's update.  (An H2D Rsp naming a
            CQID allocated this cycle finds it not yet valid and is counted UNKNOWN_CQID, which it is: its
            request has not been sent.)"""
            # (a held result: ``sf.result.valid``, a register.  The lookup port's ready would say the
            # same here, as no chaining state takes a result, but it is driven through the result's
            # ready by the snoop fast path from the snoop filter's output: static timing then reports a
            # path from the block RAM into every chained dispatch, the critical path at 76be68e)
            hazard = replay | sf.result.valid
            if not after_scan:              # (after the run's SCAN the rescan is done)
                hazard = hazard | rescan
            if writes_t is not None:
                hazard = hazard | (self.h2d_rsp.valid & (t_idx(rsp_in.cqid) == writes_t))
                if not forwards_data:
                    hazard = hazard | (self.h2d_data.valid & (t_idx(data_in_.hdr.cqid) == writes_t))
            m.next = "IDLE"
            with m.If(~hazard):
                idle_dispatch(q_len if q_now is None else q_now, after_scan)

        def take_copy():
            """An eviction: the evicting cache hands over its copy (a ``cmd`` INV to it alone), offered
            from S_TRY's decision on and repeated in S_EVICT while the caches are not ready."""
            m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                         self.cmd.p.caches.eq(Const(1, K) << cur_k), self.cmd.p.op.eq(CmdOp.INV)]
            with m.If(self.cmd.ready):
                m.next = "S_EVICT_RSP"
            with m.Else():
                m.next = "S_EVICT"

        with m.FSM(name="engine") as engine:
            # ---------------------------------------------------------------- dispatch
            with m.State("IDLE"):
                idle_dispatch(q_len)

            # ---------------------------------------------------------------- snoops
            with m.State("SNP_RES"):
                th, wh = tcam(res.line), wcam(res.line)
                m.d.comb += look_line.eq(self.h2d_req.p.addr)   # the streamed next snoop (as in IDLE)
                # Streamed, one per cycle: a snoop to a line the device does not hold (RspIHitI), and one
                # to a line it holds in S that leaves it in S (SnpData, SnpCur): neither touches a copy, the
                # snoop filter or the tracker, so the slow path would only reach the same answer later.
                s_hit = res.hit_clean_s & s_keeps
                fast = ~th.any() & ~wh.any() & (~res.hit | s_hit)
                # the next snoop streams behind a fast one if nothing of higher priority waits; ``snp``
                # takes it whenever the result is taken, fast or slow (``load_snp``, below the FSM)
                m.d.comb += [stream_snoop.eq(~work_ready.any() & ~self.h2d_rsp.valid & ~self.h2d_data.valid &
                                             self.h2d_req.valid),
                             load_snp.eq(rsp_can & stream_snoop)]
                # The result is taken only in a cycle a response can go (``rsp_can``), by either path: so
                # its ready, and through it the lookup port's ready and the RAM's read enable, do not wait
                # for the answer worked out from the RAM's output (with the fast path alone waiting, that
                # was the DCOH's critical path on the ECP5, RAM output -> RAM address, docs/synth.md).
                # A slow snoop then waits while the response channel is blocked, as the fast one does;
                # the channel's credits and ready come back whatever the engine does.
                m.d.comb += sf.result.ready.eq(rsp_can)
                # The slow path's registers take the snoop and its result whenever the result is taken,
                # fast or slow (a fast snoop leaves them to be overwritten: nothing reads them after it),
                # so their clock enables do not wait for the verdict from the RAM's output either.
                with m.If(rsp_can):
                    m.d.sync += [slow_snp.eq(snp), r.eq(res), *hit_entry(th),
                                 r_wh.eq(wh.any()), r_w.eq(first(wh, W)), q_done.eq(0)]
                with m.If(fast):
                    m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(Mux(res.hit, s_keep_rsp, Rsp.RspIHitI)),
                                 self.d2h_rsp.p.uqid.eq(snp.uqid)]
                    with m.If(rsp_sent):
                        with m.If(stream_snoop):
                            m.d.comb += [look_valid.eq(1), self.h2d_req.ready.eq(sf.lookup.ready),
                                         self.dispatch.eq(Mux(sf.lookup.ready, Dispatch.SNOOP, Dispatch.NONE))]
                            m.d.sync += second_held.eq(0)
                        with m.Else():
                            m.next = "IDLE"         # no rescan: these snoops changed nothing
                with m.Elif(rsp_can):
                    m.next = "SNP_SLOW"

            with m.State("SNP_SLOW"):
                presence = Signal(K)
                m.d.comb += presence.eq(Mux(r.hit, r.entry.presence, 0))
                # the model's rule: fetch data, or take away permission the copies have
                need_probe = (presence != 0) & ((s_data & (r_state != STATE_CODE[D.MI_A])) |
                                                perm_none(s_nxt) | (copies_rw & ~perm_rw(s_nxt)))
                with m.If(~r_wh & r_maybe_m & (presence != 0)):
                    m.next = "SNP_QUERY"               # E or M? and E or S copies? ask the caches
                with m.Elif(r_wh):
                    with m.If(wk[r_w].snoop):
                        # a host that breaks the one-snoop-per-line rule (the model raises ProtocolError):
                        # named once, and the snoop is held, not dropped, so that it is still answered
                        # once the first one is (the host would otherwise wait for its response forever)
                        with m.If(~second_held):
                            count_error(ErrorKind.SECOND_SNOOP)
                        m.d.sync += [replay.eq(1), replay_go.eq(0), second_held.eq(1)]
                    with m.Else():
                        m.d.comb += [work_table.snoop.valid.eq(1), work_table.snoop.idx.eq(r_w),
                                     work_table.snoop.op.eq(slow_snp.opcode), work_table.snoop.uqid.eq(slow_snp.uqid)]
                    m.next = "IDLE"
                with m.Elif(s_stall):
                    m.d.sync += [replay.eq(1), replay_go.eq(0)]
                    m.next = "IDLE"
                with m.Elif(need_probe):
                    with m.If(w_free.any()):
                        # the work entry and its probe (to the coalescer or its queue) in this cycle;
                        # the engine goes on (the caches take the probe later, which readies the work)
                        # With no request on the line, its snoop-filter entry stays as it is now until
                        # the work is done (the line is busy: no access, snoop or back-invalidation
                        # changes it), so the work keeps it and needs no lookup (``known``)
                        new_work(r.line, r.hit_way, snoop=1, snp_op=slow_snp.opcode, snp_uqid=slow_snp.uqid,
                                 known=~r_th, sf_entry=r.entry)
                        m.d.comb += [coal_push.eq(1), coal_line.eq(r.line), coal_caches.eq(presence)]
                        rescan_next(wakes=0)           # (it takes a work entry, frees nothing)
                    with m.Else():                      # no work entry: hold the snoop until one frees
                        m.d.sync += [replay.eq(1), replay_go.eq(0)]
                        m.next = "IDLE"
                with m.Else():
                    m.d.sync += [a_op.eq(slow_snp.opcode), a_uqid.eq(slow_snp.uqid), a_state.eq(r_state),
                                 a_maybe_m.eq(r_maybe_m), a_probed.eq(0), a_fromwork.eq(0)]
                    m.next = "ANSWER"

            with m.State("SNP_QUERY"):
                m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                             self.cmd.p.caches.eq(r.entry.presence), self.cmd.p.op.eq(CmdOp.KEEP)]
                with m.If(self.cmd.ready):
                    m.next = "SNP_QUERY_RSP"
            await_cmd_rsp("SNP_QUERY_RSP", "SNP_SLOW",
                          [q_done.eq(1), q_dirty.eq(self.cmd_rsp.p.dirty), q_excl.eq(self.cmd_rsp.p.excl)])

            # ---------------------------------------------------------------- answer a snoop
            def apply_answer(nxt=v_nxt, none=v_none, changed=v_changed):
                """The snoop's answer goes out this cycle: its state change commits with it.  The verdict
                (next state, no permission left, state changed): the one registered as the answer settled,
                or given (ANSWER_RSP's early answer)."""
                with m.If(r_th):
                    set_state(r_t, nxt)
                    with m.If(none & r.hit & (r.entry.presence != 0)):
                        sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.PLACEHOLDER, 0, 0)
                with m.Elif(r.hit & changed):
                    with m.If(nxt == STATE_CODE[D.S]):
                        sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.S, 0, r.entry.presence)
                    with m.Elif(nxt == STATE_CODE[D.I]):
                        sf_update(SFOp.FREE, r.line, r.hit_way)
                with m.If(a_fromwork):
                    m.d.comb += wcur.clr_snoop.eq(1)
                    with m.If(~wk[cur_w].evict):
                        m.d.comb += wcur.clr_valid.eq(1)
                    with m.Else():
                        m.d.comb += wcur.set_ready.eq(1)          # the eviction follows (a fresh lookup)
                        m.d.comb += readies_work.eq(1)
                # an answer wakes the waiting accesses when it changed a snoop-filter entry with no
                # request on its line (a way freed); on a request's line the line stays busy (a
                # probe's answer, ``a_fromwork``, is inside a run of work, which always ends in a SCAN)
                m.d.comb += snp_wake.eq(~r_th & r.hit & changed)
                rescan_next(replay_go.eq(1), writes_t=r_t, wakes=~r_th & changed)

            # E from the snoop filter is M if a copy was dirty
            def verdict(state, nxt):
                """What an answer commits (apply_answer): the next state, whether it leaves the copies no
                permission, whether the state changes."""
                return nxt, perm_none(nxt), nxt != state
            settle = [a_state.eq(f_state), a_maybe_m.eq(0), v_rsp.eq(f_rsp), v_data.eq(f_data),
                      *(q.eq(v) for q, v in zip((v_nxt, v_none, v_changed), verdict(f_state, f_nxt)))]

            def command_copies(nxt, line=r.line, copies=r.entry.presence):
                """Offer the command that gives the line's copies what the snoop leaves them (state ``nxt``)."""
                m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(line), self.cmd.p.caches.eq(copies)]
                with m.If(perm_none(nxt)):
                    m.d.comb += self.cmd.p.op.eq(CmdOp.INV)
                with m.Elif(nxt == STATE_CODE[D.S]):
                    m.d.comb += self.cmd.p.op.eq(CmdOp.TO_S)
                with m.Else():
                    m.d.comb += self.cmd.p.op.eq(CmdOp.KEEP)

            with m.State("ANSWER"):
                # command the copies (probed lines only) and collect dirty/data
                with m.If(a_probed & (r.hit & (r.entry.presence != 0))):
                    command_copies(a_nxt)
                    with m.If(self.cmd.ready):
                        m.next = "ANSWER_RSP"
                with m.Else():
                    m.d.sync += [cmd_dirty.eq(0), cmd_data.eq(0), *settle]
                    m.next = "ANSWER_SEND"
                m.d.comb += buf_r.addr.eq(r_t)           # MI_A: the write-back buffer holds the line
            with m.State("ANSWER_RSP"):
                m.d.comb += [self.cmd_rsp.ready.eq(1), settle_dirty.eq(self.cmd_rsp.p.dirty),
                             buf_r.addr.eq(r_t)]
                # Early answer: when the caches' answer cannot change the verdict (the line's state is
                # known, not an E line that may have turned M, and the snoop takes no data), the response
                # goes out in the cycle the caches answer, with the verdict on the registered state (a_*,
                # = what settle would register), instead of from ANSWER_SEND a cycle later.  (An SnpInv
                # to an S line: its probe's work is then 3 engine cycles.)  Unless the response cannot
                # go in this cycle (no credit, the port not ready, a side-path response first): then
                # ANSWER_SEND, as for any other answer.
                early = ~a_maybe_m & ~a_data
                with m.If(self.cmd_rsp.valid):
                    with m.If(early):
                        m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(a_rsp),
                                     self.d2h_rsp.p.uqid.eq(a_uqid)]
                    with m.If(early & rsp_can):
                        apply_answer(*verdict(a_state, a_nxt))
                    with m.Else():
                        m.d.sync += [*latch_line, *settle]
                        m.next = "ANSWER_SEND"
            with m.State("ANSWER_SEND"):
                m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(v_rsp), self.d2h_rsp.p.uqid.eq(a_uqid),
                             buf_r.addr.eq(r_t)]             # (before apply_answer: a chained dispatch
                with m.If(a_state == STATE_CODE[D.MI_A]):      # sets its own address)
                    m.d.sync += cmd_data.eq(buf_r.data)       # (re)loaded while the response waits
                with m.If(rsp_can):                          # = rsp_sent in this state
                    with m.If(v_data):
                        m.next = "ANSWER_DATA"
                    with m.Else():
                        apply_answer()
            with m.State("ANSWER_DATA"):
                m.d.comb += [data_valid.eq(1), self.d2h_data.p.hdr.uqid.eq(a_uqid)]
                with m.If(data_sent):
                    apply_answer()

            # ---------------------------------------------------------------- work after its probes
            with m.State("W_LOOK"):
                m.d.comb += [look_valid.eq(1), look_line.eq(wk[cur_w].line)]
                m.d.comb += wcur.clr_ready.eq(1)
                m.next = "W_RES"
            with m.State("W_RES"):
                th = tcam(res.line)
                m.d.comb += sf.result.ready.eq(1)
                m.d.sync += [r.eq(res), *hit_entry(th), r_wh.eq(1), r_w.eq(cur_w),
                             q_done.eq(0)]
                m.next = "W_GO"
            with m.State("W_GO"):
                w = wk[cur_w]
                with m.If(w.snoop):
                    # (a_op and a_uqid were loaded with the dispatch) ANSWER's command of the copies, offered
                    # here already: a probed snoop always has one unless a snoop took the copies meanwhile
                    m.d.sync += [a_state.eq(r_state), a_maybe_m.eq(r_maybe_m), a_probed.eq(1), a_fromwork.eq(1)]
                    m.next = "ANSWER"
                    with m.If(r.hit & (r.entry.presence != 0)):
                        command_copies(w_nxt)
                        with m.If(self.cmd.ready):
                            m.next = "ANSWER_RSP"
                with m.Elif(~r.hit):                      # a snoop took the line: nothing to evict
                    m.d.comb += [cqids.free_valid.eq(1), cqids.free_cqid.eq(w.evict_cqid)]
                    m.d.comb += wcur.clr_valid.eq(1)
                    m.d.sync += [rescan.eq(1), replay_go.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    with m.If(r.entry.presence != 0):
                        m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                                     self.cmd.p.caches.eq(r.entry.presence), self.cmd.p.op.eq(CmdOp.INV)]
                        with m.If(self.cmd.ready):
                            m.next = "EV_RSP"
                    with m.Else():
                        m.d.sync += [cmd_dirty.eq(0), cmd_data.eq(0)]
                        m.next = "EV_ISSUE"
            await_cmd_rsp("EV_RSP", "EV_ISSUE", latch_line)
            with m.State("EV_ISSUE"):
                w = wk[cur_w]
                dirty = r.entry.dirty | cmd_dirty
                sf_update(SFOp.FREE, r.line, r.hit_way)
                m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(w.evict_cqid)]
                with m.If(dirty):
                    new_txn(w.evict_cqid, Req.DirtyEvict, r.line, STATE_CODE[D.MI_A], 0, 0, 0, 0, 0)
                with m.Elif(r.entry.state == SFState.E):
                    new_txn(w.evict_cqid, Req.CleanEvict, r.line, STATE_CODE[D.EI_A], 0, 0, 0, 0, 0)
                with m.Else():
                    new_txn(w.evict_cqid, Req.CleanEvictNoData, r.line, STATE_CODE[D.SI_A], 0, 0, 0, 0, 0)
                m.d.comb += wcur.clr_valid.eq(1)
                m.d.sync += [rescan.eq(1), replay_go.eq(1)]
                m.next = "IDLE"

            # ---------------------------------------------------------------- host responses
            with m.State("RSP"):
                # IDLE read the buffer at this CQID: the line to send (a Bogus one is zeros), or the line
                # a completed request hands to the cache; RSP_DATA reads it again for ADVANCE
                m.d.comb += buf_r.addr.eq(ev.cqid)
                m.d.sync += [cmd_data.eq(Mux(e_send & e_bogus, 0, buf_r.data))]
                with m.If(~ev_live):
                    count_error(ErrorKind.UNKNOWN_CQID)
                    m.next = "IDLE"
                with m.Elif(~ev_ok | ~e_legal):
                    count_error(ErrorKind.UNDECLARED)
                    m.next = "IDLE"
                with m.Else():
                    set_state(cur_t, e_new)
                    with m.If(ev_code == _EVENT_CODE["GO-S"]):
                        m.d.comb += [tracker.set.grant.eq(1), tracker.set.granted_e.eq(0)]
                    with m.If(ev_code == _EVENT_CODE["GO-E"]):
                        m.d.comb += [tracker.set.grant.eq(1), tracker.set.granted_e.eq(1)]
                    with m.If(e_send):
                        m.d.sync += bogus.eq(e_bogus)
                        m.next = "RSP_DATA"
                    with m.Else():                      # cmd_data has the line (loaded above)
                        advance(e_new, from_rsp=True)
            with m.State("RSP_DATA"):
                m.d.comb += [data_valid.eq(1), self.d2h_data.p.hdr.uqid.eq(ev.rsp_data),
                             self.d2h_data.p.hdr.bogus.eq(bogus)]
                m.d.comb += buf_r.addr.eq(ev.cqid)
                with m.If(data_sent):
                    m.next = "ADVANCE"
            with m.State("DATA"):
                with m.If(~dv_live):
                    count_error(ErrorKind.UNKNOWN_CQID)
                    m.next = "IDLE"
                with m.Elif(~d_legal):
                    count_error(ErrorKind.UNDECLARED)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(dv_cqid)]
                    set_state(cur_t, d_new)
                    advance(d_new, line_ready=True)     # cmd_data has the line (since IDLE)
            with m.State("ADVANCE"):                    # after RSP_DATA
                # the completed line goes to the cache from cmd_data: RSP_DATA read the buffer at this
                # CQID (C_RES .. C_DONE do not touch cmd_data)
                m.d.sync += cmd_data.eq(buf_r.data)
                advance(ct.state)
            with m.State("C_RES"):               # a read/ownership request completed: fill the cache
                m.d.comb += sf.result.ready.eq(1)
                m.d.sync += r.eq(res)
                m.next = "C_FILL"
            with m.State("C_FILL"):
                k = ct.cache
                mine = Signal(K)
                m.d.comb += mine.eq(1 << k)
                others = r.entry.presence & ~mine
                with m.If(ct.store & (ct.state == STATE_CODE[D.E]) & (others != 0)):
                    m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(ct.line),
                                 self.cmd.p.caches.eq(others), self.cmd.p.op.eq(CmdOp.INV)]
                    with m.If(self.cmd.ready):
                        m.next = "C_INV_RSP"
                with m.Else():
                    fill_sf(ct.state)
                    tell_cache()                        # in the cycle the fill is written
            await_cmd_rsp("C_INV_RSP", "C_FILL2")
            with m.State("C_FILL2"):
                sf_update(SFOp.MODIFY, ct.line, ct.way, SFState.E, 0, 1 << ct.cache, touch=1)
                tell_cache()
            with m.State("C_DONE"):               # tell the cache (the line is in cmd_data since it completed)
                tell_cache()

            # ---------------------------------------------------------------- rescan of waiting accesses
            with m.State("SCAN"):
                # the next access to try: the first one at or after scan_i, in the first round only a
                # woken one (the others are passed over in no cycle)
                with m.If(~scan_found):
                    with m.If(progress & (q_len != 0)):     # once more round what is still waiting
                        m.d.sync += [scan_i.eq(0), progress.eq(0), scan_all.eq(1)]
                    with m.Elif(scan_report):               # (its first cycle shows SCAN on ``dispatch``)
                        m.next = "IDLE"
                    with m.Else():                          # the rescan is over: the next event now
                        chain()
                with m.Else():
                    k_at = queue[scan_at]
                    m.d.comb += [look_valid.eq(1), look_line.eq(ops[k_at].req.line), sd_r.addr.eq(k_at),
                                 pick.eq(1), pick_k.eq(k_at)]
                    m.d.sync += [cur_k.eq(k_at), scan_i.eq(scan_at)]
                    m.next = "S_RES"
            with m.State("S_RES"):
                th, wh = tcam(res.line), wcam(res.line)
                m.d.comb += sf.result.ready.eq(1)
                m.d.sync += [r.eq(res), *hit_entry(th), r_wh.eq(wh.any()),
                             cmd_data.eq(sd_r.data),           # a store's / uncached write's line
                             cur.kind.eq(cur_op.req.kind), cur.line.eq(cur_op.req.line),
                             cur.variant.eq(cur_op.req.variant), cur.victim_valid.eq(cur_op.victim_valid),
                             cur.victim.eq(cur_op.victim)]
                m.next = "S_TRY"
            with m.State("S_TRY"):
                k = cur_k
                req = cur
                mine = Signal(K)
                m.d.comb += mine.eq(1 << k)
                hit = r.hit & (r.entry.state != SFState.PLACEHOLDER)
                peers = r.entry.presence & ~mine
                have_cqid = cqids.one_free
                kind = req.kind

                def fail(*why):
                    """The access waits on (its reasons: "cqid", "work", "loc"); the scan goes on."""
                    wait_for(*why)
                    m.d.sync += scan_i.eq(scan_i + 1)
                    m.next = "SCAN"

                def wait_for(*why):
                    m.d.comb += [try_wait.eq(1), try_cqid.eq("cqid" in why), try_work.eq("work" in why),
                                 try_loc.eq("loc" in why)]

                def issued():                           # off the queue; the cache waits for cpu_rsp
                    dequeue()
                    scan_on()

                def txn(code, state, has_way=0, way=0):
                    m.d.comb += cqids.alloc.ready.eq(1)
                    new_txn(cqids.alloc.payload, code, req.line, STATE_CODE[state], k, 1,
                            kind == CpuKind.STORE, has_way, way)

                def back_invalidate(line, way, presence):
                    m.d.comb += cqids.alloc.ready.eq(1)
                    new_work(line, way, evict=1, evict_cqid=cqids.alloc.payload)
                    m.d.sync += [bi_line.eq(line), bi_caches.eq(presence)]
                    wait_for("loc")                     # the back-invalidation's work on the line
                    m.next = "S_PROBE"

                def miss(code):
                    start = REQUEST_START[(code, D.I)]
                    with m.If(~have_cqid):
                        fail("cqid")
                    with m.Elif(res_alloc_free):
                        sf_update(SFOp.ALLOCATE, req.line, r.alloc_way, SFState.PLACEHOLDER, 0, 0)
                        txn(code, start, 1, r.alloc_way)
                        m.d.sync += ops[k].victim_valid.eq(0)
                        issued()
                    with m.Elif(r.alloc == AllocKind.VICTIM):
                        with m.If(cur.victim_valid & victim_busy):
                            fail("loc")                 # our victim is still being back-invalidated
                        with m.Elif(~cqids.two_free | ~w_free.any()):
                            fail("loc", "cqid", "work")
                        with m.Else():
                            m.d.sync += [ops[k].victim_valid.eq(1), ops[k].victim.eq(r.victim_line)]
                            back_invalidate(r.victim_line, r.alloc_way, r.victim.presence)
                    with m.Else():                      # every way busy
                        fail("loc", "cqid", "work")

                gone = (kind == CpuKind.EVICT) & (~hit | ((r.entry.presence & mine) == 0))
                with m.If(gone):                        # the model checks this before the line's
                    m.d.sync += reply_state.eq(CacheState.I)            # pending work
                    m.next = "S_REPLY"                  # the cache no longer holds it: done
                with m.Elif(r_th | r_wh):
                    fail("loc")                         # a request or probes pending on the line
                with m.Elif(kind == CpuKind.LOAD):
                    with m.If(hit):                     # another internal cache has it: fill from it
                        m.d.sync += reply_state.eq(CacheState.S)
                        m.next = "S_LFILL"
                    with m.Elif(req.variant):
                        miss(Req.RdAny)
                    with m.Else():
                        miss(Req.RdShared)
                with m.Elif(kind == CpuKind.STORE):
                    with m.If(hit & (r.entry.state == SFState.E)):   # device exclusive: take it inside
                        m.d.sync += reply_state.eq(CacheState.M)   # cmd_data: the store's line
                        m.next = "S_SFILL"
                    with m.Elif(hit):                   # device holds it in S: upgrade
                        with m.If(~have_cqid):
                            fail("cqid")
                        with m.Elif(req.variant):
                            txn(Req.RdOwnNoData, REQUEST_START[(Req.RdOwnNoData, D.S)], 1, r.hit_way)
                            issued()
                        with m.Else():
                            txn(Req.RdOwn, REQUEST_START[(Req.RdOwn, D.S)], 1, r.hit_way)
                            issued()
                    with m.Elif(req.variant):
                        miss(Req.RdOwnNoData)
                    with m.Else():
                        miss(Req.RdOwn)
                with m.Elif(kind == CpuKind.EVICT):
                    with m.If((peers != 0) | have_cqid):
                        take_copy()                     # take the copy out of the cache first
                    with m.Else():
                        fail("cqid")
                with m.Else():                          # uncached: flush the device's own copies first
                    with m.If(hit):
                        with m.If(cqids.two_free & w_free.any()):
                            back_invalidate(req.line, r.hit_way, r.entry.presence)
                        with m.Else():
                            fail("loc", "cqid", "work")
                    with m.Elif(~have_cqid):
                        fail("cqid")
                    with m.Else():
                        m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(cqids.alloc.payload)]   # cmd_data: its line
                        for name, code in _UNCACHED.items():
                            with m.If(kind == CpuKind[name.upper()]):
                                txn(code, REQUEST_START[(code, D.I)])
                        issued()

            with m.State("S_EVICT"):                    # (the caches were not ready in S_TRY)
                take_copy()
            await_cmd_rsp("S_EVICT_RSP", "S_EVICT_SET", latch_line)
            with m.State("S_EVICT_SET"):
                req = cur
                peers = r.entry.presence & ~(Const(1, K) << cur_k)
                with m.If(peers != 0):                  # others still hold it: no message
                    sf_update(SFOp.MODIFY, r.line, r.hit_way, r.entry.state, r.entry.dirty, peers)
                    m.d.sync += reply_state.eq(CacheState.I)
                    m.next = "S_REPLY"
                with m.Else():
                    sf_update(SFOp.FREE, r.line, r.hit_way)
                    cqid = cqids.alloc.payload
                    m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(cqid), cqids.alloc.ready.eq(1)]
                    code = Signal(Req, init=Req.DirtyEvict)
                    state = Signal(_STATE_BITS)
                    with m.If(r.entry.dirty | cmd_dirty):
                        m.d.comb += [code.eq(Req.DirtyEvict), state.eq(STATE_CODE[REQUEST_START[(Req.DirtyEvict, D.M)]])]
                    with m.Elif(r.entry.state == SFState.E):
                        m.d.comb += [code.eq(Mux(req.variant, Req.CleanEvictNoData, Req.CleanEvict)),
                                     state.eq(STATE_CODE[D.EI_A])]
                    with m.Else():
                        # S: CleanEvict is for E lines only (cxl.coherence.REQUEST_START)
                        m.d.comb += [code.eq(Req.CleanEvictNoData),
                                     state.eq(STATE_CODE[REQUEST_START[(Req.CleanEvictNoData, D.S)]])]
                    new_txn(cqid, code, r.line, state, cur_k, 1, 0, 0, 0)
                    dequeue()
                    scan_on()
            with m.State("S_PROBE"):                    # back-invalidation: one probe to the coalescer
                m.d.comb += coal_push.eq(1)             # (or its queue)
                m.d.sync += scan_i.eq(scan_i + 1)
                m.next = "SCAN"
            with m.State("S_LFILL"):                    # internal fill for a load: peers E/M -> S
                m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                             self.cmd.p.caches.eq(r.entry.presence & ~(Const(1, K) << cur_k)),
                             self.cmd.p.op.eq(CmdOp.TO_S)]
                with m.If(self.cmd.ready):
                    m.next = "S_LFILL_RSP"
            await_cmd_rsp("S_LFILL_RSP", "S_LFILL_SET", latch_line)
            with m.State("S_LFILL_SET"):
                sf_update(SFOp.MODIFY, r.line, r.hit_way, r.entry.state, r.entry.dirty | cmd_dirty,
                          r.entry.presence | (Const(1, K) << cur_k), touch=1)
                m.next = "S_REPLY"
            with m.State("S_SFILL"):                    # internal fill for a store: invalidate the peers
                peers = r.entry.presence & ~(Const(1, K) << cur_k)
                with m.If(peers != 0):
                    m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line), self.cmd.p.caches.eq(peers),
                                 self.cmd.p.op.eq(CmdOp.INV)]
                    with m.If(self.cmd.ready):
                        m.next = "S_SFILL_RSP"
                with m.Else():
                    m.next = "S_SFILL_SET"
            await_cmd_rsp("S_SFILL_RSP", "S_SFILL_SET")
            with m.State("S_SFILL_SET"):
                sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.E, r.entry.dirty, Const(1, K) << cur_k,
                          touch=1)
                m.next = "S_REPLY"
            with m.State("S_REPLY"):                    # finished inside the device: tell the cache
                m.d.comb += [self.cpu_rsp.valid.eq(1), self.cpu_rsp.p.cache.eq(cur_k),
                             self.cpu_rsp.p.line.eq(cur.line), self.cpu_rsp.p.state.eq(reply_state)]
                with m.If(self.cpu_rsp.ready):
                    m.d.sync += ops[cur_k].valid.eq(0)
                    dequeue()
                    scan_on()

        with m.If(load_h2d_line):
            m.d.sync += cmd_data.eq(data_in_.data)
        with m.If(take_snp | load_snp):
            m.d.sync += snp.eq(self.h2d_req.p)
        # The CPU access offered is written into its cache's slot (ops[k].req and the store data) whenever
        # that slot is free, taken or not: a free slot's request is read by nothing (only the accesses
        # waiting, ops[k].valid, are tried), and the cycle that takes the access writes it as well.  So
        # these 600-odd flops' enables wait for no dispatch decision (through cpu_req.ready, the DCOH's
        # critical path on the ECP5 before, docs/synth.md).
        m.d.comb += sd_w.en.eq(cpu_slot_free)
        with m.If(cpu_slot_free):
            k_in = self.cpu_req.p.cache
            m.d.sync += [ops[k_in].req.kind.eq(self.cpu_req.p.kind), ops[k_in].req.line.eq(self.cpu_req.p.line),
                         ops[k_in].req.variant.eq(self.cpu_req.p.variant)]
        # IDLE's dispatch (idle_dispatch), driven here for every state that runs it, and chain_work's.
        # (ANSWER_RSP is not among the states that leave ``cmd`` free: its cycle takes the answer to the
        # last command, and the caches take a command only after the cycle its predecessor's answer went)
        m.d.comb += cmd_free_here.eq(Cat(engine.ongoing(st) for st in (
            "IDLE", "SNP_SLOW", "ANSWER_SEND", "ANSWER_DATA")).any())
        # These assignments come after the FSM, so they take precedence over a state's own in the same
        # cycle, as the dispatch's did when it came last in that state.
        go = {n: Signal(name=f"go_{n}") for n in ("work", "scan", "rsp", "data", "replay", "snoop", "cpu",
                                                   "cpu_look")}
        chained_work = {"work": cw_work, "scan": cw_scan}
        for n in go:
            m.d.comb += go[n].eq((go_any & dec[n]) | (go_aft & aft[n]) | chained_work.get(n, 0))
        with m.If(go_any | go_aft):
            # the line of a lookup issued by the dispatch (a replay, a new snoop, or a new CPU access
            # when neither of those is there), driven whether or not one is issued, so that it does not
            # wait for the priority decision (the snoop's line selected first, then against the CPU
            # access's: the same function with the CPU's line innermost mapped to ~1 500 more LUT4 on
            # the ECP5, docs/synth.md)
            snoop_line = Mux(replay, slow_snp.addr, self.h2d_req.p.addr)
            m.d.comb += look_line.eq(Mux(self.h2d_req.valid | replay, snoop_line, self.cpu_req.p.line))
            # cmd_data is dead here: it takes the H2D Data line whether or not the message is taken
            # (its load enable is then the state alone), and the buffer is read at the H2D Rsp's CQID
            # (RSP loads the line from it if the response asks for data)
            m.d.comb += [load_h2d_line.eq(1), buf_r.addr.eq(rsp_in.cqid),
                         self.h2d_rsp.ready.eq(go["rsp"]), self.h2d_data.ready.eq(go["data"]),
                         self.h2d_req.ready.eq(go["snoop"] & sf.lookup.ready), self.cpu_req.ready.eq(go["cpu"]),
                         look_valid.eq(go["replay"] | go["snoop"] | go["cpu_look"]),
                         take_snp.eq(go["snoop"])]
        with m.If(go_any & dec["empty_scan"]):
            m.d.sync += rescan.eq(0)
        for n, code in (("work", Dispatch.WORK), ("scan", Dispatch.SCAN), ("rsp", Dispatch.RSP),
                        ("data", Dispatch.DATA), ("replay", Dispatch.REPLAY), ("cpu", Dispatch.CPU)):
            with m.If(go[n]):
                m.d.comb += self.dispatch.eq(code)
        with m.If(go["snoop"]):
            m.d.comb += self.dispatch.eq(Mux(sf.lookup.ready, Dispatch.SNOOP, Dispatch.NONE))
        with m.If(scan_report):
            m.d.comb += self.dispatch.eq(Dispatch.SCAN)
        # chain_work's SCAN, then the event it chained (``dispatch``); a chained dispatch that takes nothing
        # leaves ``dispatch`` at SCAN alone.  (A chained snoop always has the lookup port: chain() does not
        # dispatch while a result is held.)
        m.d.comb += self.scan_before.eq(cw_scan & Cat(go[n] for n in ("work", "rsp", "data", "replay", "snoop",
                                                                       "cpu")).any())
        m.d.sync += Assert(~self.scan_before |
                           ((self.dispatch != Dispatch.NONE) & (self.dispatch != Dispatch.SCAN)),
                           "scan_before without an event after the SCAN")
        # the line of the work item WORK dispatches (for testbenches: a shadow model works that line then)
        m.d.comb += self.work_line.eq(wk[work_ready_idx].line)
        with m.If(go["work"]):
            # the work item's snoop and its lookup (work_next)
            w_next = wk[work_ready_idx]
            m.d.comb += [work_table.take.valid.eq(1), work_table.take.idx.eq(work_ready_idx)]
            m.d.sync += [cur_w.eq(work_ready_idx), in_work.eq(1),
                         a_op.eq(w_next.snp_op), a_uqid.eq(w_next.snp_uqid)]
            with m.If(w_next.known):
                # what W_RES would latch from the lookup: the kept entry (a hit: the snoop probed its
                # copies), no request on the line, the work's own entry
                m.d.sync += [r.line.eq(w_next.line), r.hit.eq(1), r.hit_way.eq(w_next.way), r.entry.eq(w_next.sf),
                             r_th.eq(0), r_wh.eq(1), r_w.eq(work_ready_idx), q_done.eq(0)]
                # ... and W_GO's command of the copies, offered in the dispatch's own cycle when the
                # dispatching state neither drives the cmd port nor takes an answer from the caches
                # (they answer one command at a time); the work then goes straight to ANSWER_RSP if
                # the caches take it (else W_GO offers it again)
                with m.If(cmd_free_here & (w_next.sf.presence != 0)):
                    command_copies(k_nxt, w_next.line, w_next.sf.presence)
                    m.d.comb += early_cmd_taken.eq(self.cmd.ready)
                    m.d.sync += [a_state.eq(k_state), a_maybe_m.eq(k_maybe_m), a_probed.eq(1), a_fromwork.eq(1)]
            with m.Elif(~sf.result.valid):
                m.d.comb += [look_valid.eq(1), look_line.eq(w_next.line)]
        with m.If(go["scan"]):
            m.d.sync += [rescan.eq(0), scan_i.eq(0), progress.eq(0), scan_all.eq(0), in_work.eq(0)]
        with m.If(go["rsp"]):
            m.d.sync += [*latch_rsp, replay_go.eq(1), cur_t.eq(t_idx(rsp_in.cqid))]
        with m.If(go["data"]):
            m.d.sync += [*latch_data, replay_go.eq(1), cur_t.eq(t_idx(data_in_.hdr.cqid))]
        with m.If(go["replay"]):
            # the held snoop is looked up again (SNP_RES reads ``snp``; a replay never shares its cycle
            # with take_snp or load_snp)
            m.d.sync += [replay.eq(0), replay_go.eq(0), snp.eq(slow_snp)]
        m.d.sync += Assert(~go["replay"] | ~(take_snp | load_snp), "a replay and a new snoop load snp together")
        with m.If(go["snoop"]):
            m.d.sync += second_held.eq(0)
        with m.If(go["cpu"]):
            k_in = self.cpu_req.p.cache
            m.d.sync += [ops[k_in].valid.eq(1), ops[k_in].victim_valid.eq(0),
                         queue[go_q].eq(k_in), q_len.eq(go_q + 1),
                         rescan.eq(0), scan_i.eq(0), progress.eq(0), scan_all.eq(0)]
        with m.If(go["cpu_look"]):
            m.d.sync += cur_k.eq(self.cpu_req.p.cache)
            m.d.comb += [sd_r.addr.eq(self.cpu_req.p.cache), pick.eq(1), pick_k.eq(self.cpu_req.p.cache)]

        # ---- the wake-up rule's registers (see ``why_cqid``): what a failed try waits for, and the
        # events that free it.  A line is freed by a completion (its tracker entry, at ``cur_t``), by the
        # end of a line's work (its work entry) and by a snoop answer that changed its snoop-filter entry
        # with no request on the line; each also frees its set's ways for ``loc``.
        def same_set(a, b):
            return (a[:set_bits] == b[:set_bits]) if set_bits else Const(1)
        freed_lines = ((tracker.free.valid, ct.line), (wcur.clr_valid, wk[cur_w].line), (snp_wake, r.line))
        m.d.sync += Assert(~tracker.free.valid | (tracker.free.idx == cur_t),
                           "a tracker entry freed other than the one at cur_t (the wake-up rule reads ct)")
        for k in range(K):
            loc_freed = Cat(v & same_set(ops[k].req.line, line) for v, line in freed_lines).any()
            wake = ((why_cqid[k] & cqids.free_valid) | (why_work[k] & wcur.clr_valid) | (why_loc[k] & loc_freed))
            with m.If(wake | (go["cpu"] & (self.cpu_req.p.cache == k))):
                m.d.sync += woken[k].eq(1)
            with m.If(pick & (pick_k == k)):           # its try comes after every event so far
                m.d.sync += woken[k].eq(0)
            with m.If(try_wait & (cur_k == k)):
                m.d.sync += [why_cqid[k].eq(try_cqid), why_work[k].eq(try_work), why_loc[k].eq(try_loc)]

        # ---- the snoop side path: snoops that change nothing, answered while the engine waits on a cache
        # The engine waits for an internal cache's handshake in the middle of an event (a command, its
        # answer, a cpu_rsp); a cache that holds it back would otherwise stall every snoop, snoop-filter
        # misses included.  While the engine sits in such a state, and the handshake does not complete in
        # this cycle (so it is still there in the next one), the side path looks up the snoop offered on
        # h2d_req without taking it; in the next cycle it takes the snoop if the fast path's rule answers
        # it (a miss in the snoop filter, the tracker and the work table, or an S line the snoop leaves
        # in S) and its line is none the waiting event touches (r, ct, cur), and commits the answer into
        # a response register that goes out before any response of the engine's.  It is dispatched
        # (SNOOP) in that cycle: the shadow model has taken the waiting event at its dispatch and takes
        # the rescan after it at its SCAN (scan_report), so the snoop comes between them there too, and
        # it answers alike because the event changes no other line and no waiting access has been tried
        # in either.  In a rescan's own states only the access being tried may wait (the shadow takes a
        # rescan whole).  No snoop is held (replay: later snoops wait behind it).  The lookup result is
        # always taken in the next cycle, so the engine finds the lookup port free when it leaves the
        # wait; a chained dispatch in that cycle sees the result and leaves the dispatch to IDLE
        # (chain()), the one cycle this path can cost.
        def waiting(states, handshake_pending):
            # (FSM.ongoing of a name the FSM does not have adds a state that is never entered: a misspelt
            # name would switch the side path off there without a word)
            unknown = [st for st in states if st not in engine.encoding]
            assert not unknown, f"snoop side path: no engine state {unknown}"
            return Cat(engine.ongoing(st) for st in states).any() & handshake_pending
        cmd_waits = ("SNP_QUERY", "ANSWER", "W_GO", "C_FILL")
        cmd_rsp_waits = ("SNP_QUERY_RSP", "ANSWER_RSP", "EV_RSP", "C_INV_RSP")
        scan_cmd_waits = ("S_EVICT", "S_LFILL", "S_SFILL")
        scan_cmd_rsp_waits = ("S_EVICT_RSP", "S_LFILL_RSP", "S_SFILL_RSP")
        cmd_pending = self.cmd.valid & ~self.cmd.ready
        cmd_rsp_pending = ~self.cmd_rsp.valid
        cpu_rsp_pending = self.cpu_rsp.valid & ~self.cpu_rsp.ready
        event_wait = (waiting(cmd_waits, cmd_pending) | waiting(cmd_rsp_waits, cmd_rsp_pending) |
                      waiting(("C_DONE",), cpu_rsp_pending))
        scan_wait = (waiting(scan_cmd_waits, cmd_pending) | waiting(scan_cmd_rsp_waits, cmd_rsp_pending) |
                     waiting(("S_REPLY",), cpu_rsp_pending))
        side_window = Signal()
        m.d.comb += side_window.eq((event_wait | (scan_wait & (q_len == 1))) & ~replay)
        side_look = Signal()            # the side path looked the offered snoop up in the last cycle
        side_issue = side_window & ~side_look & ~side_rsp & self.h2d_req.valid & sf.lookup.ready
        with m.If(side_issue):
            m.d.comb += [look_valid.eq(1), look_line.eq(self.h2d_req.p.addr)]
        m.d.sync += side_look.eq(side_issue)
        side_keeps, side_keep_rsp = keeps_s(self.h2d_req.p.opcode)
        engine_dispatch = Cat(*go.values()).any()
        side_take = Signal()
        with m.If(side_look):
            m.d.comb += sf.result.ready.eq(1)
            # (a stream keeps its payload until taken; the line is compared all the same, so that a sender
            # that does not is answered for what it offers now, or not at all)
            offered = self.h2d_req.valid & (self.h2d_req.p.addr == res.line)
            touched = (res.line == r.line) | (res.line == ct.line) | (res.line == cur.line)
            unchanged = ~res.hit | (res.hit_clean_s & side_keeps)
            m.d.comb += side_take.eq(offered & ~tcam(res.line).any() & ~wcam(res.line).any() & ~touched &
                                     unchanged & ~engine_dispatch & ~scan_report)
        with m.If(side_take):
            m.d.comb += [self.h2d_req.ready.eq(1), self.dispatch.eq(Dispatch.SNOOP)]
            m.d.sync += [side_rsp.eq(1), side_rsp_op.eq(Mux(res.hit, side_keep_rsp, Rsp.RspIHitI)),
                         side_rsp_uqid.eq(self.h2d_req.p.uqid)]
        with m.If(side_rsp):
            m.d.comb += [self.d2h_rsp.p.opcode.eq(side_rsp_op), self.d2h_rsp.p.uqid.eq(side_rsp_uqid)]
            with m.If(rsp_port_sent):
                m.d.sync += side_rsp.eq(0)

        # work waiting for its probe to be acknowledged is the caches' move, not the engine's
        # ... and a D2H request still queued for transmission is not idle either
        queued = Cat(f.level != 0 for f in class_fifos).any()
        m.d.comb += self.idle.eq(engine.ongoing("IDLE") & ~rescan & ~work_ready.any() & ~(replay & replay_go) &
                                 ~queued & ~side_rsp)
        return m
