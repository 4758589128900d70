"""Golden model of one CXL.cache device: K internal MESI caches behind a DCOH.

The DCOH has
  * an inclusive snoop filter (sets x ways, tree pseudo-LRU) whose entries hold the device state of a
    line (S or E; ``dirty`` once an internal M copy was downgraded) and a presence vector over the K
    internal caches;
  * a request tracker: CQIDs, at most ``max_outstanding`` in use, at most one request per line; a host
    snoop that hits a line with a pending request is answered from the transient state
    (cxl.coherence.SNOOP_TABLE) or held (STALL);
  * the snoop handler: snoop-filter miss -> RspIHitI without touching the internal caches; a hit that
    must invalidate, downgrade or fetch from internal copies sends probes through
  * the invalidation coalescer: probes to the lines of one aligned block within ``coalesce_window``
    cycles are merged into one message per internal cache (counted: msgs in, msgs out);
  * QoS: per-channel credits (models.link), a three-class priority arbiter for D2H requests with a
    starvation bound, and a 2-bit DevLoad-style level from tracker occupancy.

A capacity eviction in the snoop filter back-invalidates the victim's internal copies (through the
coalescer), then evicts the line to the host (DirtyEvict with the dirty data, else CleanEvict /
CleanEvictNoData) before the way is reused.
"""

from collections import deque

from cxl.coherence import (MESI, Perm, DevState as D, STALL, GRANTED, REQUEST_START, GO_OF, INTERNAL_PERMISSION,
                           RESPONSE_TABLE, SNOOP_TABLE, snoop_transition, response_transition,
                           UndeclaredTransition)
from cxl.device import ACCESS_KINDS, REQUEST_PRIORITY
from cxl.messages import (Channel, D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DRspOpcode as HRsp,
                          GOState)

from .link import Msg

# The enum members hot code uses, as module constants (``_<enum>_<member>``): in the compiled build a
# module constant is one cached lookup, where an enum's attribute goes through its metaclass.
_Ch_D2H_DATA, _Ch_D2H_REQ, _Ch_D2H_RSP = Channel.D2H_DATA, Channel.D2H_REQ, Channel.D2H_RSP
_D_E, _D_I, _D_M, _D_MI_A, _D_S = D.E, D.I, D.M, D.MI_A, D.S
_HRsp_GO = HRsp.GO
_MESI_E, _MESI_M, _MESI_S = MESI.E, MESI.M, MESI.S
_Perm_NONE = Perm.NONE
_Req_CLFlush, _Req_CleanEvict, _Req_CleanEvictNoData = Req.CLFlush, Req.CleanEvict, Req.CleanEvictNoData
_Req_DirtyEvict, _Req_ItoMWr, _Req_RdAny, _Req_RdCurr = Req.DirtyEvict, Req.ItoMWr, Req.RdAny, Req.RdCurr
_Req_RdOwn, _Req_RdOwnNoData, _Req_RdShared, _Req_WrInv = Req.RdOwn, Req.RdOwnNoData, Req.RdShared, Req.WrInv
_Rsp_RspVFwdV, _Rsp_RspVHitV = Rsp.RspVFwdV, Rsp.RspVHitV
_READ_DATA = (Req.RdShared, Req.RdAny, Req.RdOwn)

__all__ = ["SnoopFilter", "Coalescer", "TxArbiter", "CpuOp", "Device", "ProtocolError", "cache_hit",
           "devload_level"]


_GO_STATES = {g._value_: g for g in GOState}
_STABLE = frozenset((_D_I, _D_S, _D_E, _D_M))       # DevState.stable, without the property call
_HOLDERS = {}                                       # presence vector -> the caches it names (_holders)


def _holders(e):
    """The internal caches whose bit is set in ``e.presence``, lowest first (a tuple, one per presence
    vector, made once: cheaper than walking the bits on every call)."""
    p = e.presence
    holders = _HOLDERS
    h = holders.get(p)
    if h is None:
        h = holders[p] = tuple([k for k in range(p.bit_length()) if (p >> k) & 1])
    return h


def _snoop_step(state, snoop):
    """``cxl.coherence.snoop_transition(state, snoop)``, with the table looked up here: the compiled
    build compiles this module, not cxl/coherence.py.  A pair the table lacks raises there."""
    table = SNOOP_TABLE
    r = table.get((state, snoop))
    return snoop_transition(state, snoop) if r is None else r


def _response_step(state, event):
    """``cxl.coherence.response_transition(state, event)``, looked up here (see :func:`_snoop_step`)."""
    table = RESPONSE_TABLE
    r = table.get((state, event))
    return response_transition(state, event) if r is None else r


class ProtocolError(RuntimeError):
    """A peer sent something the protocol does not allow here (names the message and the state)."""


# ------------------------------------------------------------------------------------------------
class SFEntry:
    __slots__ = ("state", "dirty", "presence", "set", "way")

    def __init__(self, set_, way):
        self.state = None          # None: placeholder for a line whose read/ownership request is pending
        self.dirty = False
        self.presence = 0
        self.set, self.way = set_, way

    def key(self):
        return (self.state, self.dirty, self.presence, self.way)


class SnoopFilter:
    """Set-associative tag store.  Replacement: the lowest-numbered free way; else the tree pseudo-LRU
    way; if that one is busy, the lowest-numbered way that is not busy (the RTL does the same)."""

    def __init__(self, sets, ways):
        self.sets, self.ways = sets, ways
        self.tags = [[None] * ways for _ in range(sets)]
        self.plru = [0] * sets           # bit n-1 is tree node n (heap order, root 1)
        self.entries = {}

    def set_of(self, line):
        return line & (self.sets - 1)

    def lookup(self, line):
        return self.entries.get(line)

    def touch(self, s, way):
        node = way + self.ways
        bits = self.plru[s]
        while node > 1:
            parent = node >> 1
            if node & 1:     # right child used: point the parent left
                bits &= ~(1 << (parent - 1))
            else:
                bits |= 1 << (parent - 1)
            node = parent
        self.plru[s] = bits

    def plru_way(self, s):
        node, bits = 1, self.plru[s]
        while node < self.ways:
            node = 2 * node + ((bits >> (node - 1)) & 1)
        return node - self.ways

    def free_way(self, s):
        tags = self.tags[s]
        for w in range(self.ways):
            if tags[w] is None:
                return w
        return None

    def victim(self, s, busy):
        tags = self.tags[s]
        w = self.plru_way(s)
        if tags[w] not in busy:
            return w
        for w in range(self.ways):
            if tags[w] not in busy:
                return w
        return None

    def allocate(self, line, way):
        s = self.set_of(line)
        assert self.tags[s][way] is None and line not in self.entries
        self.tags[s][way] = line
        e = self.entries[line] = SFEntry(s, way)
        self.touch(s, way)
        return e

    def free(self, line):
        e = self.entries.pop(line)
        self.tags[e.set][e.way] = None

    def check(self):
        for s, tags in enumerate(self.tags):
            live = [t for t in tags if t is not None]
            if len(live) != len(set(live)):
                raise AssertionError(f"snoop filter set {s} holds a tag twice: {tags}")
            for w, t in enumerate(tags):
                if t is not None and (self.entries[t].set, self.entries[t].way) != (s, w):
                    raise AssertionError(f"snoop filter index broken at set {s} way {w}")
        if len(self.entries) != sum(t is not None for tags in self.tags for t in tags):
            raise AssertionError("snoop filter entry count differs from its tags")

    def key(self):
        return (tuple(sorted((l, e.key()) for l, e in self.entries.items())), tuple(self.plru))


# ------------------------------------------------------------------------------------------------
class Coalescer:
    """Merges probes to the lines of one aligned block of ``block`` lines that arrive within
    ``window`` cycles of the first: one message per internal cache per block instead of one per line."""

    def __init__(self, window, block):
        self.window, self.block = window, block
        self.groups = {}            # block -> [deadline, [lines], cache mask]
        self.msgs_in = 0
        self.msgs_out = 0
        self.wake = None            # timed mode: the WakeTimes the simulator visits (models/link.py)

    def add(self, line, caches, now):
        b = line // self.block
        g = self.groups.get(b)
        if g is None:
            g = self.groups[b] = [now + self.window, [], 0]
            if self.wake is not None:
                self.wake.push(now + self.window)
        g[1].append(line)
        g[2] |= caches
        self.msgs_in += bin(caches).count("1")

    def due(self, now):
        return [b for b, g in self.groups.items() if g[0] <= now]

    def pop(self, b, only=None):
        """Close block ``b``'s group and return its lines.  ``only`` (a set of lines): take just those
        out of the group and leave the rest open -- what a timed DCOH does when its window closed
        before the other lines joined (the RTL's probe names its lines; tb/system_tb.py)."""
        if only is None:
            _, lines, caches = self.groups.pop(b)
            self.msgs_out += bin(caches).count("1")
            return lines
        g = self.groups[b]
        taken = [l for l in g[1] if l in only]
        g[1] = [l for l in g[1] if l not in only]
        self.msgs_out += bin(g[2]).count("1")
        if not g[1]:
            del self.groups[b]
        return taken

    def next_time(self):
        return min((g[0] for g in self.groups.values()), default=None)

    def key(self):
        return tuple(sorted((b, tuple(g[1])) for b, g in self.groups.items()))


# ------------------------------------------------------------------------------------------------
class TxArbiter:
    """Strict priority between classes, except that a class whose head has been passed over
    ``bound`` times is granted next (the lowest-priority such class first).  So a head waits at most
    ``bound + classes - 1`` grants."""

    CLASSES = 3

    def __init__(self, bound):
        if bound < 2:
            raise ValueError(f"bound={bound!r}: the starvation bound must be >= 2 (with 1, two classes "
                             "starved in turn are granted alternately and the third waits forever)")
        self.bound = bound
        self.queues = [deque() for _ in range(self.CLASSES)]
        self.passed = [0] * self.CLASSES
        self.max_passed = 0
        self.count = 0

    def push(self, txn):
        self.queues[REQUEST_PRIORITY[txn.op]].append(txn)
        self.count += 1

    def __len__(self):
        return self.count

    def pop(self):
        queues, passed = self.queues, self.passed
        waiting = [c for c in range(len(queues)) if queues[c]]
        starved = [c for c in waiting if passed[c] >= self.bound]
        c = starved[-1] if starved else waiting[0]
        for o in waiting:
            if o != c:
                passed[o] += 1
                self.max_passed = max(self.max_passed, passed[o])
        passed[c] = 0
        self.count -= 1
        return queues[c].popleft()

    def key(self):
        return (tuple(tuple(t.cqid for t in q) for q in self.queues), tuple(self.passed))


def devload_level(occupied, capacity, thresholds):
    """2-bit DevLoad-style level: 0 Light, 1 Optimal, 2 Moderate overload, 3 Severe overload
    (encodings from facts §3.2; the occupancy thresholds are a configuration assumption)."""
    f = occupied / capacity
    level = 0
    for t in thresholds:
        if f >= t:
            level += 1
    return level


# ------------------------------------------------------------------------------------------------
_WAIT_CQID = ("cqid",)      # a failed try that waits for a CQID (CpuOp.why)


class CpuOp:
    """One access from internal cache ``k``: load, store, evict, or an uncached request
    (rdcurr, itomwr, wrinv, clflush).  ``variant`` picks between equivalent opcodes
    (RdShared/RdAny, RdOwn/RdOwnNoData, CleanEvict/CleanEvictNoData)."""
    __slots__ = ("kind", "k", "line", "value", "variant", "t0", "victim", "why")
    KINDS = ACCESS_KINDS

    def __init__(self, kind, k, line, value=0, variant=0, t0=0):
        if kind not in self.KINDS:
            raise ValueError(f"unknown CPU operation {kind!r}")
        self.kind, self.k, self.line, self.value, self.variant, self.t0 = kind, k, line, value, variant, t0
        self.victim = None
        self.why = None         # what its last failed try waits for (Device.woken's keys); None: untried

    def key(self):
        return (self.kind, self.k, self.line, self.value, self.variant, self.victim)

    def __repr__(self):
        return f"{self.kind}(cache {self.k}, line {self.line:#x}" + \
            (f", value {self.value}" if self.kind in ("store", "itomwr", "wrinv") else "") + ")"


def cache_hit(cache, op):
    """True if access ``op`` finishes inside its internal cache (``cache``: line -> [MESI, value]) with
    no DCOH work: a load or RdCurr of a held line, a store with write permission (E -> M is silent), an
    eviction of a line not held.  The RTL testbench's cache BFM makes the same decision."""
    c = cache.get(op.line)
    if op.kind in ("load", "rdcurr"):
        return c is not None
    if op.kind == "store":
        return c is not None and (c[0] is _MESI_M or c[0] is _MESI_E)     # write permission
    if op.kind == "evict":
        return c is None
    return False


class Txn:
    """A tracker entry: one D2H request in flight."""
    __slots__ = ("cqid", "op", "line", "state", "cpu", "value", "data", "granted", "t0")

    def __init__(self, cqid, op, line, state, cpu, value, t0):
        self.cqid, self.op, self.line, self.state, self.cpu = cqid, op, line, state, cpu
        self.value, self.data, self.granted, self.t0 = value, None, None, t0

    def key(self):
        return (self.cqid, self.op, self.line, self.state, self.cpu.k if self.cpu else None,
                self.value, self.data, self.granted)

    def __repr__(self):
        return f"CQID {self.cqid} {self.op.name} line {self.line:#x} in {self.state.name}"


class LineWork:
    """Probes outstanding on a line: a host snoop waiting for them and/or a back-invalidation."""
    __slots__ = ("snoop", "evict")

    def __init__(self):
        self.snoop = None
        self.evict = None        # reserved CQID of the eviction that follows a back-invalidation


class Device:
    verify_wake = False         # (tests) after every rescan, check the accesses it left out (see ``woken``)

    def __init__(self, index, cfg, link, checker, stats=None):
        self.index, self.cfg, self.link, self.checker = index, cfg, link, checker
        self.caches = [dict() for _ in range(cfg.caches)]   # line -> [MESI, value]
        self.sf = SnoopFilter(cfg.sf_sets, cfg.sf_ways)
        self.txns = {}          # cqid -> Txn
        self.by_line = {}       # line -> Txn
        self.free_cqids = list(range(cfg.max_outstanding))
        self.work = {}          # line -> LineWork
        # the most lines self.work may hold (Config.work_entries; 0: no limit, never reached)
        self.work_cap = cfg.work_entries or float("inf")
        self.ops = [None] * cfg.caches
        self.active_ops = 0     # internal caches with an access outstanding (the entries of ``ops`` not None)
        self.queue = []         # accepted CpuOps not yet issued
        self.coal = Coalescer(cfg.coalesce_window, cfg.coalesce_block)
        self.arb = TxArbiter(cfg.starvation_bound)
        self.done = []          # completed (opcode, latency) since last drained by the system
        self.stats = stats if stats is not None else {}
        self.coverage = {}      # (state, event) -> times taken, for race tests and coverage reports
        self.now = 0
        # The waiting accesses are tried after every event (``service``), as part of it.  The shadow of
        # an RTL DCOH sets this: the engine rescans as a step of its own (its ``dispatch`` shows SCAN),
        # and snoops it answers on its side path in between must find the accesses not yet tried, so
        # the testbench calls ``service`` at that step instead (a completion and a probe's work then
        # leave it to the caller; an accepted access is still tried at once, as the engine does).
        self.defer_service = False
        # a shadow of a pipelined RTL DCOH, whose completions land after the response that makes them:
        # a request that reaches a stable state completes only at :meth:`complete`
        self.defer_complete = False
        # The wake-up rule: a waiting access is tried again only after an event freed what its last
        # failed try waits for (``CpuOp.why``, keys: a CQID, a work entry, its line, a way in its
        # snoop-filter set).  The events put the keys they free into ``woken``: a completed request
        # (a CQID, its line), a probe's work done (a work entry, its line and set, an eviction's unused
        # CQID), a snoop answer that downgraded or freed a snoop-filter entry with no request on its line
        # (its line and set); a new access is untried.  An access not woken would fail its try exactly
        # as in the last rescan, so it is left out of the rescan's first round, and the rescan is
        # skipped when none is woken (docs/dcoh.md, "Waking the waiting accesses").  ``verify_wake``
        # (tests): after each rescan, rescan every access, and raise if that changes anything.
        self.woken = set()
        self.skipped_services = 0       # rescans skipped with accesses waiting
        self.skipped_tries = 0          # tries of waiting accesses left out of a rescan's first round

    # ---------------------------------------------------------------- state queries
    def name(self):
        return f"dev{self.index}"

    def line_state(self, line):
        t = self.by_line.get(line)
        if t is not None:
            return t.state
        e = self.sf.entries.get(line)
        if e is None or e.state is None:
            return _D_I
        if e.dirty:
            return _D_M
        if e.state is _D_E:
            for k in _holders(e):
                if self.caches[k][line][0] is _MESI_M:
                    return _D_M
            return _D_E
        return _D_S

    def busy(self, line):
        return line in self.by_line or line in self.work

    def idle_cache(self, k):
        return self.ops[k] is None

    def outstanding_items(self):
        """What is not finished, as (age, label, item): the requests in flight, then the waiting accesses."""
        items = [(self.now - t.t0, "", t) for t in self.txns.values()]
        items += [(self.now - op.t0, "waiting ", op) for op in self.queue]
        return items

    def outstanding(self):
        """Everything not finished, with its age, for the watchdog."""
        return [(age, f"{self.name()} {label}{x!r}") for age, label, x in self.outstanding_items()]

    # ---------------------------------------------------------------- CPU side
    def accept(self, op, now):
        """Take an access from internal cache ``op.k``.  Hits finish at once; anything else waits in
        the DCOH until it can issue.  Returns False if the cache already has an access outstanding."""
        if not self.take(op, now):
            return False
        self.service(now)
        return True

    def take(self, op, now):
        """:meth:`accept` without trying the access: it waits until a rescan (or a shadow's
        ``_try_issue``) takes it up."""
        self.now = now
        if self.ops[op.k] is not None:
            return False
        op.t0 = now
        self.checker.touched.add(op.line)
        self.ops[op.k] = op
        self.active_ops += 1
        self.queue.append(op)
        return True

    def woken_accesses(self):
        """The waiting accesses the next rescan tries first: untried ones, and those whose failed try
        waits for something an event since the last rescan freed."""
        woken = self.woken
        return [op for op in self.queue if op.why is None or not woken.isdisjoint(op.why)]

    def service(self, now):
        """The rescan after an event: try the woken waiting accesses in arrival order, then, while one
        issues, every waiting access again (an issue can free a way or change a line that others wait
        on).  Skipped when none is woken."""
        self.now = now
        queue = self.queue
        if not queue:
            self.woken.clear()
            return
        first = self.woken_accesses()
        self.woken.clear()
        self.skipped_tries += len(queue) - len(first)
        if not first:
            self.skipped_services += 1
        elif self._round(first, now):
            while queue and self._round(list(queue), now):
                pass
        if self.verify_wake:
            self._verify_rescan(now)

    def _round(self, ops, now):
        """Try ``ops`` in order; whether one issued."""
        progress = False
        for op in ops:
            if self._try_issue(op, now):
                self.queue.remove(op)
                progress = True
        return progress

    def _verify_rescan(self, now):
        """After a rescan by the wake-up rule: a rescan of every waiting access must change nothing (no
        access issued, no back-invalidation started)."""
        before = (len(self.queue), len(self.work), len(self.free_cqids))
        self._round(list(self.queue), now)
        after = (len(self.queue), len(self.work), len(self.free_cqids))
        if after != before:
            raise AssertionError(f"{self.name()} cycle {now}: the wake-up rule left out an access whose try "
                                 f"changes the device (waiting accesses, work entries, free CQIDs: {before} -> "
                                 f"{after})")

    def _finish_op(self, op):
        self.ops[op.k] = None
        self.active_ops -= 1

    def _alloc_cqid(self):
        return self.free_cqids.pop(0) if self.free_cqids else None

    def _new_txn(self, op_code, line, from_state, cpu, value, now, cqid=None):
        """A new request ``op_code`` for ``line``, issued from ``from_state``: its transient state comes from
        REQUEST_START, and the (state, request) pair counts for coverage."""
        state = REQUEST_START[(op_code, from_state)]
        cov = (from_state._name_, op_code._name_)
        self.coverage[cov] = self.coverage.get(cov, 0) + 1
        if cqid is None:
            cqid = self._alloc_cqid()
        t = Txn(cqid, op_code, line, state, cpu, value, now)
        self.txns[cqid] = t
        self.by_line[line] = t
        self.arb.push(t)
        return t

    def _way_for(self, op, now):
        """A snoop-filter way for ``op.line``, or None after starting to free one."""
        s = self.sf.set_of(op.line)
        w = self.sf.free_way(s)
        if w is not None:
            return w
        if op.victim is not None and op.victim in self.work:
            op.why = (("set", s),)          # our victim is still being back-invalidated
            return None
        busy = set(self.by_line) | set(self.work)
        w = self.sf.victim(s, busy)
        if w is None or len(self.free_cqids) < 2 or len(self.work) >= self.work_cap:
            op.why = (("set", s), "cqid", "work")
            return None
        victim = self.sf.tags[s][w]
        op.victim = victim
        self._back_invalidate(victim, now)
        op.why = (("set", s),)
        return None

    def _new_work(self, line):
        """The work entry of ``line``, made if there is none (the caller has checked Config.work_entries)."""
        w = self.work.get(line)
        if w is None:
            if len(self.work) >= self.work_cap:
                raise AssertionError(f"{self.name()}: work for line {line:#x} with all {self.cfg.work_entries} "
                                     f"work entries in use")
            w = self.work[line] = LineWork()
            if self.cfg.work_entries:        # how full a finite work table got (all devices)
                self.stats["work_peak"] = max(self.stats.get("work_peak", 0), len(self.work))
        return w

    def _back_invalidate(self, line, now):
        work = self._new_work(line)
        work.evict = self._alloc_cqid()
        self.coal.add(line, self.sf.entries[line].presence, now)
        self.stats["sf_evictions"] = self.stats.get("sf_evictions", 0) + 1

    def _try_issue(self, op, now):
        line, k, kind = op.line, op.k, op.kind
        cache = self.caches[k]
        c = cache.get(line)
        if cache_hit(cache, op):
            if kind == "store":
                c[0], c[1] = _MESI_M, op.value
                self.checker.write(line, op.value, "dev{} cache {} store", (self.index, k))
            elif c is not None:
                self.checker.read(line, c[1], "dev{} cache {} {} hit", (self.index, k, kind))
            self._finish_op(op)
            return True
        if line in self.by_line or line in self.work:       # self.busy(line)
            op.why = (("line", line),)
            return False
        e = self.sf.entries.get(line)
        if kind == "load":
            if e is not None:       # another internal cache has it: fill from it, no host traffic
                self._internal_fill(e, k, line, write=False)
                self.checker.read(line, cache[line][1], "dev{} cache {} internal fill", (self.index, k))
                self._finish_op(op)
                return True
            return self._issue_miss(op, _Req_RdAny if op.variant else _Req_RdShared, now)
        if kind == "store":
            if e is not None and e.state is _D_E:
                self._internal_fill(e, k, line, write=True)
                cache[line] = [_MESI_M, op.value]
                self.checker.write(line, op.value, "dev{} cache {} store after internal upgrade", (self.index, k))
                self._finish_op(op)
                return True
            code = _Req_RdOwnNoData if op.variant else _Req_RdOwn
            if e is not None:       # device holds it in S: upgrade
                if not self.free_cqids:
                    op.why = _WAIT_CQID
                    return False
                self._new_txn(code, line, _D_S, op, op.value, now)
                return True
            return self._issue_miss(op, code, now)
        if kind == "evict":
            others = e.presence & ~(1 << k)
            if others:
                del cache[line]
                e.presence = others
                self._finish_op(op)
                return True
            if not self.free_cqids:
                op.why = _WAIT_CQID
                return False
            state = self.line_state(line)
            value = c[1]
            del cache[line]
            self.sf.free(line)
            if state is _D_M:
                code = _Req_DirtyEvict
            elif state is _D_E:
                code = _Req_CleanEvictNoData if op.variant else _Req_CleanEvict
            else:           # S: CleanEvict is for E lines only (cxl.coherence.REQUEST_START), whatever the variant
                code = _Req_CleanEvictNoData
            self._new_txn(code, line, state, op, value, now)
            return True
        # uncached requests: the device must not hold the line; flush its own copies first
        if e is not None:
            if e.state is not None and len(self.free_cqids) >= 2 and len(self.work) < self.work_cap:
                self._back_invalidate(line, now)
                op.why = (("line", line),)         # its own back-invalidation's work
            else:
                op.why = (("line", line), "cqid", "work")
            return False
        if not self.free_cqids:
            op.why = _WAIT_CQID
            return False
        code = {"rdcurr": _Req_RdCurr, "itomwr": _Req_ItoMWr, "wrinv": _Req_WrInv, "clflush": _Req_CLFlush}[kind]
        self._new_txn(code, line, _D_I, op, op.value, now)
        return True

    def _issue_miss(self, op, code, now):
        if not self.free_cqids:
            op.why = _WAIT_CQID
            return False
        w = self._way_for(op, now)
        if w is None:
            return False
        self.sf.allocate(op.line, w)
        self._new_txn(code, op.line, _D_I, op, op.value, now)
        op.victim = None
        return True

    def _internal_fill(self, e, k, line, write):
        """Give cache ``k`` a copy from its peers: for a read, downgrade any E/M peer to S; for a
        write (device exclusive), invalidate the peers."""
        value = None
        for j in list(_holders(e)):
            if j == k:
                continue
            st, v = self.caches[j][line]
            value = v
            if write:
                del self.caches[j][line]
            elif st is _MESI_M or st is _MESI_E:
                if st is _MESI_M:
                    e.dirty = True
                self.caches[j][line] = [_MESI_S, v]
        if write:
            e.presence = 1 << k
        else:
            if k not in _holders(e):
                self.caches[k][line] = [_MESI_S, value]
            e.presence |= 1 << k
        self.sf.touch(e.set, e.way)
        self.stats["internal_fills"] = self.stats.get("internal_fills", 0) + 1

    # ---------------------------------------------------------------- D2H request transmit (QoS)
    def transmit(self, now, limit=None):
        """Send queued D2H requests while credits last (``limit`` per call in timed mode)."""
        sent = 0
        link = self.link
        arb = self.arb
        while arb.count:
            if link.credits[_Ch_D2H_REQ] <= 0 or (limit is not None and sent >= limit):
                break
            t = arb.pop()
            op = t.op
            link.send(Msg(_Ch_D2H_REQ, op, t.cqid, t.line,
                          data=t.value if op is _Req_ItoMWr or op is _Req_WrInv else None), now)
            sent += 1
        return sent

    def devload(self):
        return devload_level(len(self.txns), self.cfg.max_outstanding, self.cfg.devload_thresholds)

    # ---------------------------------------------------------------- host snoops
    def can_accept_snoop(self, msg):
        line = msg.line
        w = self.work.get(line)
        if w is not None and w.snoop is not None:
            raise ProtocolError(f"{self.name()}: second snoop {msg.op.name} to line {line:#x} while one "
                                f"is still being answered")
        if w is not None:
            return True
        state = self.line_state(line)
        rsp, nxt, data = _snoop_step(state, msg.op)
        if rsp is STALL:        # held until the data arrives: counts as taken once per refusal
            cov = (state._name_, msg.op._name_)
            self.coverage[cov] = self.coverage.get(cov, 0) + 1
            return False
        if len(self.work) >= self.work_cap and self._snoop_probes(line, state, nxt, data):
            return False        # held until a work entry frees (Config.work_entries)
        return True

    def _snoop_probes(self, line, state, nxt, data):
        """Whether a snoop to ``line`` (no work on it) probes the internal caches: it fetches the data
        from them, or takes away permission a copy has (on_snoop's rule)."""
        e = self.sf.entries.get(line)
        if e is None or not e.presence:
            return False
        # the strongest permission a copy has (MESI.perm); a loop, not max() over a generator: the
        # compiled build types this method (models/dcoh.pxd), and Cython compiles no closure there
        copies = 0
        caches = self.caches
        for k in _holders(e):
            p = caches[k][line][0]._value_[1]
            if p > copies:
                copies = p
        return (data and state is not _D_MI_A) or INTERNAL_PERMISSION.get(nxt, _Perm_NONE) < copies

    def on_snoop(self, msg, now):
        self.now = now
        line = msg.line
        w = self.work.get(line)
        if w is not None:            # a back-invalidation is under way: answer after its probes
            w.snoop = msg
            return
        state = self.line_state(line)
        rsp, nxt, data = _snoop_step(state, msg.op)
        if self._snoop_probes(line, state, nxt, data):
            self._new_work(line).snoop = msg
            self.coal.add(line, self.sf.entries[line].presence, now)
            return
        self._answer_snoop(msg, now, 0)

    def _answer_snoop(self, msg, now, extra):
        line = msg.line
        state = self.line_state(line)
        rsp, nxt, data = _snoop_step(state, msg.op)
        assert rsp is not STALL
        cov = (state._name_, msg.op._name_)
        self.coverage[cov] = self.coverage.get(cov, 0) + 1
        value = None
        t = self.by_line.get(line)
        e = self.sf.entries.get(line)
        if data:
            if t is not None:
                value = t.value                       # MI_A: the write-back buffer holds it
            else:
                for k in _holders(e):        # the first copy in M (any copy if the entry is dirty)
                    c = self.caches[k][line]
                    if c[0] is _MESI_M or e.dirty:
                        value = c[1]
                        break
                else:
                    raise StopIteration     # as next() on no such copy did
        if t is not None:
            t.state = nxt
            if e is not None and INTERNAL_PERMISSION.get(nxt, _Perm_NONE) is _Perm_NONE and e.presence:
                for k in _holders(e):
                    del self.caches[k][line]
                e.presence, e.state, e.dirty = 0, None, False
        elif e is not None and nxt is not state:
            woken = self.woken                                        # a way freed, or the entry changed
            woken.add(("line", line))
            woken.add(("set", e.set))
            if nxt is _D_S:
                for k in _holders(e):
                    self.caches[k][line][0] = _MESI_S
                e.state, e.dirty = _D_S, False
            elif nxt is _D_I:
                for k in _holders(e):
                    del self.caches[k][line]
                self.sf.free(line)
            else:
                raise UndeclaredTransition(f"{self.name()} snoop apply", state, nxt)
        # SnpCur leaves the device its permission, so it may write again before the host uses the
        # answer: the read is serialized here.  The response notes the value then (ghost only).
        snap = self.checker.value(line) if rsp is _Rsp_RspVHitV or rsp is _Rsp_RspVFwdV else None
        self.link.send(Msg(_Ch_D2H_RSP, rsp, msg.uid, line, data=snap), now, extra)
        if data:
            self.link.send(Msg(_Ch_D2H_DATA, None, msg.uid, line, data=value), now, extra)
        name = rsp._name_
        self.stats[name] = self.stats.get(name, 0) + 1

    def flush(self, block, now, only=None):
        """The coalescer sends the merged probes of ``block`` (``only``: of just those lines, see
        ``Coalescer.pop``); their acknowledgements finish the snoops and back-invalidations that waited
        for them (:meth:`close_probe`, then :meth:`finish_probe`)."""
        self.finish_probe(self.close_probe(block, only), now)

    def close_probe(self, block, only=None):
        """The caches take the merged probe of ``block`` (``only``: of just those lines): its group is
        closed, so a later probe to the block opens a new one.  Returns the probe's lines; their work is
        still pending until :meth:`finish_probe`.  (Apart only for the shadow of an RTL DCOH, whose
        engine works the lines some cycles after the caches took the probe.)"""
        return self.coal.pop(block, only)

    def finish_probe(self, lines, now):
        """The work of an acknowledged probe's ``lines``: answer the snoops and finish the
        back-invalidations that waited for them; then the waiting accesses (unless ``defer_service``)."""
        self.now = now
        extra = self.cfg.probe_latency
        for line in lines:
            self.checker.touched.add(line)
            w = self.work.pop(line, None)
            if w is None:
                continue
            # its line and its work entry are free, and a back-invalidation frees a way of its set
            woken = self.woken
            woken.add(("line", line))
            woken.add(("set", self.sf.set_of(line)))
            woken.add("work")
            if w.snoop is not None:
                self._answer_snoop(w.snoop, now, extra)
            if w.evict is not None:
                self._evict_after_back_invalidation(line, w.evict, now)
        if not self.defer_service:
            self.service(now)

    def _evict_after_back_invalidation(self, line, cqid, now):
        state = self.line_state(line)
        if state is _D_I:             # a snoop took it meanwhile: nothing left to evict
            self.woken.add("cqid")
            self.free_cqids.append(cqid)
            self.free_cqids.sort()
            return
        e = self.sf.entries[line]
        value = None
        for k in _holders(e):
            st, v = self.caches[k].pop(line)
            if value is None or st is _MESI_M:
                value = v
        self.sf.free(line)
        code = {_D_M: _Req_DirtyEvict, _D_E: _Req_CleanEvict, _D_S: _Req_CleanEvictNoData}[state]
        self._new_txn(code, line, state, None, value, now, cqid=cqid)

    # ---------------------------------------------------------------- host responses and data
    def on_h2d_rsp(self, msg, now):
        self.now = now
        t = self.txns.get(msg.uid)
        if t is None:
            raise ProtocolError(f"{self.name()}: {msg.op.name} for CQID {msg.uid}, which is not in use")
        if msg.op is _HRsp_GO:
            if self.work:
                w = self.work.get(t.line)
                if w is not None and w.snoop is not None:
                    # CXL 3.x §3.2.5.2: no GO to an address while a snoop to it is pending (docs/sources.md
                    # §1.7); the RTL counts it (ErrorKind.GO_DURING_SNOOP) and answers after the data
                    raise ProtocolError(f"{self.name()}: GO for {t!r} while the snoop {w.snoop.op.name} "
                                        f"(UQID {w.snoop.uid}) to line {t.line:#x} is still being answered")
            g = _GO_STATES.get(msg.rsp_data & 0xF)         # GOState(value), without the enum call
            event = GO_OF.get(g) if g is not None else None
            if event is None:
                raise ProtocolError(f"{self.name()}: GO with state {msg.rsp_data:#x} for {t!r}")
        else:
            event = msg.op._name_
        nxt, action = _response_step(t.state, event)
        cov = (t.state._name_, event)
        self.coverage[cov] = self.coverage.get(cov, 0) + 1
        if event in ("GO-S", "GO-E"):
            t.granted = _D_S if event == "GO-S" else _D_E
        if action is not None:
            bogus = action == "send_bogus"
            self.link.send(Msg(_Ch_D2H_DATA, None, msg.rsp_data, t.line,
                               data=None if bogus else t.value, bogus=bogus), now)
        self._advance(t, nxt, now)

    def on_h2d_data(self, msg, now):
        self.now = now
        t = self.txns.get(msg.uid)
        if t is None:
            raise ProtocolError(f"{self.name()}: H2D Data for CQID {msg.uid}, which is not in use")
        nxt, _ = _response_step(t.state, "Data")
        cov = (t.state._name_, "Data")
        self.coverage[cov] = self.coverage.get(cov, 0) + 1
        t.data = msg.data
        self._advance(t, nxt, now)

    def _advance(self, t, nxt, now):
        if nxt == GRANTED:
            nxt = t.granted
        t.state = nxt
        if nxt in _STABLE and not self.defer_complete:
            self._complete(t, now)

    def complete(self, cqid, now):
        """With ``defer_complete``: request ``cqid``, in a stable state since its last response,
        completes now (as it would have then)."""
        self.now = now
        t = self.txns[cqid]
        if t.state not in _STABLE:
            raise AssertionError(f"{self.name()}: completion of {t!r}, which is not in a stable state")
        self._complete(t, now)

    def _complete(self, t, now):
        line, op = t.line, t.cpu
        del self.txns[t.cqid]
        del self.by_line[line]
        # its line (and a fill's entry) and its CQID: a way-waiter that wants a victim of this line's set
        # also waits for a CQID (CpuOp.why), so the set needs no key of its own here
        self.woken.add(("line", line))
        self.woken.add("cqid")
        self.free_cqids.append(t.cqid)
        self.free_cqids.sort()
        self.done.append((t.op, now - t.t0))
        if t.state is not _D_I:                   # a read or ownership request granted the line
            e = self.sf.entries[line]
            k = op.k
            if t.op in _READ_DATA:          # RdShared, RdAny, RdOwn
                self.checker.read(line, t.data, "dev{} {.name} data", (self.index, t.op))
            if t.state is _D_E and op.kind == "store":
                for j in _holders(e):
                    del self.caches[j][line]
                e.state, e.dirty, e.presence = _D_E, False, 1 << k
                self.caches[k][line] = [_MESI_M, op.value]
                self.checker.write(line, op.value, "dev{} cache {} store after {.name}", (self.index, k, t.op))
            else:
                e.state, e.dirty, e.presence = t.state, False, 1 << k
                self.caches[k][line] = [_MESI_S if t.state is _D_S else _MESI_E, t.data]
            self.sf.touch(e.set, e.way)
        elif t.op is _Req_RdCurr:
            self.checker.read_at_serialization(line, t.data, "dev{} RdCurr data", (self.index,))
        if op is not None:
            self._finish_op(op)
        if not self.defer_service:
            self.service(now)

    # ---------------------------------------------------------------- invariants and state
    def check_line(self, line):
        """Snoop-filter inclusion for one line: the presence vector is exactly the caches holding it."""
        e = self.sf.entries.get(line)
        held = sum(1 << k for k, c in enumerate(self.caches) if line in c)
        tracked = e.presence if e is not None else 0
        if held != tracked:
            raise AssertionError(f"inclusion broken: {self.name()} line {line:#x} is held by caches "
                                 f"{held:#b} but the snoop filter tracks {tracked:#b}")

    def check(self):
        """Snoop-filter inclusion and consistency, tracker consistency."""
        self.sf.check()
        for k, cache in enumerate(self.caches):
            for line, (st, _) in cache.items():
                e = self.sf.entries.get(line)
                if e is None or not (e.presence >> k) & 1:
                    raise AssertionError(f"inclusion broken: {self.name()} cache {k} holds line {line:#x} "
                                         f"in {st.name} but the snoop filter does not track it")
        for line, e in self.sf.entries.items():
            for k in _holders(e):
                if line not in self.caches[k]:
                    raise AssertionError(f"{self.name()} snoop filter says cache {k} holds line {line:#x}")
            if e.state is None and line not in self.by_line:
                raise AssertionError(f"{self.name()} placeholder entry for line {line:#x} with no request")
        if self.active_ops != sum(op is not None for op in self.ops):
            raise AssertionError(f"{self.name()} counts {self.active_ops} accesses outstanding, its caches "
                                 f"{sum(op is not None for op in self.ops)}")
        live = set(self.txns)
        if live & set(self.free_cqids) or len(live) + len(self.free_cqids) + \
                sum(w.evict is not None for w in self.work.values()) != self.cfg.max_outstanding:
            raise AssertionError(f"{self.name()} CQID accounting broken: live {sorted(live)}, "
                                 f"free {self.free_cqids}")

    def key(self):
        return (tuple(tuple(sorted((l, s.value[0], v) for l, (s, v) in c.items())) for c in self.caches),
                self.sf.key(), tuple(sorted(t.key() for t in self.txns.values())),
                tuple(sorted((l, (w.snoop, w.evict)) for l, w in self.work.items())),
                tuple(op.key() if op else None for op in self.ops), tuple(op.key() for op in self.queue),
                self.coal.key(), self.arb.key())
