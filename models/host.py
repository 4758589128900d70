"""Golden model of the host home agent.

Per line the host keeps which devices hold it and how ('S', or 'E' for an owner in E or M: E -> M is
silent, so the host cannot tell them apart), and memory.  Requests to one line are served one at a
time in arrival order; the GO the host sends is the serialization point.  Snoops follow HOST_TABLE
(cxl/coherence.py): SnpData to the owner for RdShared/RdAny, SnpCur to the owner for RdCurr, SnpInv to every
other holder for RdOwn, RdOwnNoData, ItoMWr, WrInv and CLFlush.  UQIDs name the host's buffers for
snoop data and pulled write data (the WritePull family carries the UQID in RspData).

Opcodes the host does not serve (WrCur, WOWrInv, WOWrInvF, CacheFlushed) raise UndeclaredTransition.

Directory policy (Config.host_dir).  ``exact``: the holders of every line, without bound.  ``finite``: a
set-associative snoop filter (Config.host_dir_shape: sets x ways, the device's tag store and tree
pseudo-LRU of models/dcoh.py) with one entry per line some device may hold, inclusive of the devices'
copies (docs/sources.md §3.3: a host's snoop filter is finite and bounds what devices may cache).  A read
(RdShared, RdAny, RdOwn, RdOwnNoData) of a line without an entry takes a free way of its set; with none
free, the host back-invalidates the pseudo-LRU entry whose line is idle: SnpInv to every holder (the
snoop that leaves a copy in I; a dirty owner answers RspIFwdM with the line, which goes to memory,
docs/sources.md §1.4-1.5, CXL 3.x §3.2.4.4.2 and Table 3-26), and reuses the way only when every answer
(and its data) is in.  While a set has a back-invalidation under way, every request to a line of that
set waits, in arrival order; so does a read that finds every way of its set busy.

Host traffic (:meth:`Host.host_access`): the host's own accesses to a line, serialized with the
devices' requests to it like one more request: ``read`` (SnpData: the host wants a copy it may keep
shared, so an owner keeps at most S and returns a dirty line, CXL 3.x §3.2.4.4.1), ``read_current``
(SnpCur: the current value, no ownership, the owner may keep its state, §3.2.4.4.3) and ``write``
(SnpInv: every copy goes, §3.2.4.4.2), then memory is read or written.  Config.host_snoop_scope says
whom they snoop: the directory's holders (SnpData/SnpCur the owner, SnpInv every holder) or every device
(those without the line answer RspIHitI, legal for each snoop).  The host's own caches are outside the
model: keeping or dropping a copy there needs no CXL.cache message.
"""

import enum
from collections import deque

from cxl.messages import (Channel, D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp,
                          H2DRspOpcode as HRsp, GOState, MAX_IDS)
from .link import Msg
from cxl.coherence import HOST_TABLE, SNOOP_RESPONSES, UndeclaredTransition

from .dcoh import ProtocolError, SnoopFilter

__all__ = ["Host", "HostOp", "HOST_ACCESS"]


class HostOp(enum.Enum):
    """What the host does on its own (the requester is the host, not a device): snoop, then read or write
    memory.  The value: its name and the snoop it sends."""
    BackInvalidate = ("back-invalidate", Snp.SnpInv)   # the finite directory frees an entry: holders to I
    Read = ("read", Snp.SnpData)                # a host read that may keep the line shared
    ReadCurrent = ("read_current", Snp.SnpCur)  # a host read of the current value, no ownership
    Write = ("write", Snp.SnpInv)               # a host write of the whole line

    @property
    def snoop(self):
        return self.value[1]

    __hash__ = object.__hash__      # identity, as states.MESI (hot code hashes it)


# Host accesses by the name drivers use (Workload, the explorer, the state machine, tests).
HOST_ACCESS = {op.value[0]: op for op in (HostOp.Read, HostOp.ReadCurrent, HostOp.Write)}

_READS = (Req.RdShared, Req.RdAny, Req.RdOwn, Req.RdOwnNoData)

_RESULT = {  # response -> (state the responder is left in, whether data follows)
    Rsp.RspIHitI: (None, False), Rsp.RspIHitSE: (None, False), Rsp.RspIFwdM: (None, True),
    Rsp.RspSHitSE: ("S", False), Rsp.RspSFwdM: ("S", True),
    Rsp.RspVHitV: ("=", False), Rsp.RspVFwdV: ("=", True),
}


_GO_I = GOState.Invalid.value
# The enum members hot code uses, as module constants (``_<enum>_<member>``): in the compiled build a
# module constant is one cached lookup, where an enum's attribute goes through its metaclass.
_Ch_H2D_DATA, _Ch_H2D_REQ, _Ch_H2D_RSP = Channel.H2D_DATA, Channel.H2D_REQ, Channel.H2D_RSP
_GO_Exclusive, _GO_Shared = GOState.Exclusive, GOState.Shared
_HRsp_GO, _HRsp_GO_WritePull, _HRsp_GO_WritePull_Drop = HRsp.GO, HRsp.GO_WritePull, HRsp.GO_WritePull_Drop
_HRsp_WritePull = HRsp.WritePull
_HostOp_BackInvalidate, _HostOp_Write = HostOp.BackInvalidate, HostOp.Write
_Req_CleanEvict, _Req_DirtyEvict, _Req_ItoMWr = Req.CleanEvict, Req.DirtyEvict, Req.ItoMWr
_Req_RdAny, _Req_RdCurr, _Req_RdOwnNoData = Req.RdAny, Req.RdCurr, Req.RdOwnNoData
_Req_RdShared, _Req_WrInv = Req.RdShared, Req.WrInv
_Rsp_RspVFwdV = Rsp.RspVFwdV
_Snp_SnpInv = Snp.SnpInv
_HOST_SNOOP = {op: op.snoop for op in HostOp}      # HostOp.snoop without the enum's value property


class HostTxn:
    __slots__ = ("dev", "op", "cqid", "line", "value", "pending", "fwd", "pull", "expect_bogus", "snap", "t0")

    def __init__(self, dev, op, cqid, line, value, now):
        """``dev`` None: the host's own access (``op`` a HostOp)."""
        self.dev, self.op, self.cqid, self.line, self.value = dev, op, cqid, line, value
        self.pending = 0          # snoops not yet fully answered
        self.fwd = None           # data forwarded by a snoop
        self.pull = None          # UQID of the write data being pulled
        self.expect_bogus = False
        self.snap = None          # ghost value where a SnpCur serialized this read (RdCurr)
        self.t0 = now

    def key(self):
        return (self.dev, self.op, self.cqid, self.line, self.value, self.pending, self.fwd, self.pull,
                self.expect_bogus)

    def __repr__(self):
        if self.dev is None:
            return f"host {self.op.name} (the host's own) line {self.line:#x}"
        return f"host {self.op.name} from dev{self.dev} CQID {self.cqid} line {self.line:#x}"


class _SnoopWait:
    __slots__ = ("txn", "dev", "snoop", "rsp", "data", "has_data", "snap")

    def __init__(self, txn, dev, snoop):
        self.txn, self.dev, self.snoop = txn, dev, snoop
        self.rsp, self.data, self.has_data, self.snap = None, None, False, None

    def key(self):
        return (self.txn.line, self.dev, self.snoop, self.rsp, self.data, self.has_data, self.snap)


class EveryNth:
    """A host policy applied to a fraction of the cases: :meth:`tick` once per case, True for every
    1/fraction-th (a count, not a random draw, so a run is the same for the same seed; 0: never, 1: always)."""
    __slots__ = ("fraction", "credit")

    def __init__(self, fraction):
        self.fraction, self.credit = fraction, 0.0

    def tick(self):
        self.credit += self.fraction
        if self.credit >= 1:
            self.credit -= 1
            return True
        return False


class Host:
    def __init__(self, cfg, links, checker):
        self.cfg, self.links, self.checker = cfg, links, checker
        self._data_first = EveryNth(cfg.host_data_first)     # per read: its data goes before the GO
        self._data_late = EveryNth(cfg.host_data_late)       # per GO-first read: its data lags the GO
        self._pull_clean = EveryNth(cfg.clean_evict_pull)    # per CleanEvict: the host pulls the clean data
        self.mem = {}
        self.dir = {}             # line -> {dev: 'S' | 'E'}
        self.active = {}          # line -> HostTxn
        self.queue = {}           # line -> deque of (dev, msg, t)
        self.snoops = {}          # uqid -> _SnoopWait
        self.pulls = {}           # uqid -> HostTxn
        self.used_uqids = set()   # the lowest free UQID is allocated (keeps explored states canonical)
        self.served = 0
        self.bogus_dropped = 0    # write-back data marked Bogus (the line was snooped away first)
        self.now = 0
        # finite directory (Config.host_dir): which lines have an entry (the holders stay in self.dir)
        self.sf = SnoopFilter(*cfg.host_dir_shape) if cfg.host_dir == "finite" else None
        self.evicting = {}        # set -> the line whose entry is being back-invalidated
        self.set_wait = {}        # set -> deque of HostTxn waiting for that set (each holds its line)
        self._retrying = set()    # sets whose waiters are being restarted (see _retry_set)
        self.counts = {"back_invalidations": 0, "host_read": 0, "host_read_current": 0, "host_write": 0,
                       "data_first": 0, "data_late": 0}

    # ---------------------------------------------------------------- helpers
    def _send(self, dev, msg, now, lag=0):
        link = self.links[dev]
        link.send(msg, now, self.cfg.host_latency + lag)

    def _uqid(self):
        u = 0
        used = self.used_uqids
        while u in used:
            u += 1
        if u >= MAX_IDS:
            raise ProtocolError(f"host ran out of UQIDs ({MAX_IDS} in use)")
        used.add(u)
        return u

    def _free(self, uqid):
        self.used_uqids.remove(uqid)

    def _rsp(self, txn, op, rsp_data, now):
        self._send(txn.dev, Msg(_Ch_H2D_RSP, op, txn.cqid, txn.line, rsp_data=rsp_data), now)

    def memory(self, line):
        return self.mem.get(line, self.checker.initial)

    def outstanding_items(self):
        """What is not finished, as (age, label, transaction): those under way, then those queued."""
        items = [(self.now - t.t0, "", t) for t in self.active.values()]
        items += [(self.now - t.t0, "queued: ", t) for q in self.queue.values() for t in q]
        return items

    def outstanding(self):
        return [(age, f"{label}{t!r}") for age, label, t in self.outstanding_items()]

    # ---------------------------------------------------------------- D2H Req
    def on_d2h_req(self, dev, msg, now):
        self.now = now
        if msg.op not in HOST_TABLE:
            raise UndeclaredTransition("host home agent", f"line {msg.line:#x}", msg.op)
        self._arrive(HostTxn(dev, msg.op, msg.uid, msg.line, msg.data, now), now)

    def host_access(self, kind, line, value, now):
        """The host's own access to ``line``: ``kind`` one of HOST_ACCESS ("read", "read_current",
        "write"); ``value`` the line a write stores.  Serialized with the devices' requests to the line."""
        self.now = now
        op = HOST_ACCESS.get(kind)
        if op is None:
            raise ValueError(f"host access {kind!r}: must be one of {', '.join(HOST_ACCESS)}")
        self.counts["host_" + kind] += 1
        self._arrive(HostTxn(None, op, None, line, value if op is _HostOp_Write else None, now), now)

    def _arrive(self, txn, now):
        if txn.line in self.active:
            self.queue.setdefault(txn.line, deque()).append(txn)
        else:
            self._admit(txn, now)

    # ---------------------------------------------------------------- finite directory
    def _admit(self, txn, now):
        """Start ``txn`` (its line is idle), or, with a finite directory, make it wait for its set: while
        the set has a back-invalidation under way, or (for a read that needs a new entry) behind an
        earlier such read, or until a way can be freed."""
        self.active[txn.line] = txn
        sf = self.sf
        if sf is not None:
            s = sf.set_of(txn.line)
            if s in self.evicting or (self._needs_entry(txn) and s in self.set_wait) or not self._place(txn):
                self.set_wait.setdefault(s, deque()).append(txn)
                self._maybe_evict(s, now)
                return
        self._start(txn, now)

    def _needs_entry(self, txn):
        """Only a device read adds a holder, so only it needs an entry its line does not have yet."""
        return txn.dev is not None and txn.op in _READS and txn.line not in self.sf.entries

    def _place(self, txn):
        """Whether ``txn`` may start as far as the directory goes: its line has an entry (touched, for the
        pseudo-LRU), or it needs none, or a way of its set is free (taken now)."""
        sf = self.sf
        e = sf.entries.get(txn.line)
        if e is not None:
            sf.touch(e.set, e.way)
            return True
        if not self._needs_entry(txn):
            return True
        way = sf.free_way(sf.set_of(txn.line))
        if way is None:
            return False
        sf.allocate(txn.line, way)
        return True

    def _maybe_evict(self, s, now):
        """A waiter of set ``s`` needs an entry and no way is free: back-invalidate the pseudo-LRU entry
        whose line is idle.  With none idle, the requests on those lines finish first (they wait for no
        waiter: a waiter holds no way), and each finish retries the set."""
        q = self.set_wait.get(s)
        sf = self.sf
        if not q or s in self.evicting or sf.free_way(s) is not None:
            return
        # a waiter that needs an entry; a loop, not any() over a generator: the compiled build types this
        # method (models/host.pxd), and Cython compiles no closure there
        for t in q:
            if self._needs_entry(t):
                break
        else:
            return
        way = sf.victim(s, self.active)
        if way is None:
            return
        victim = sf.tags[s][way]
        self.counts["back_invalidations"] += 1
        self.checker.touched.add(victim)
        ev = HostTxn(None, _HostOp_BackInvalidate, None, victim, None, now)
        self.active[victim] = ev
        self.evicting[s] = victim
        self._start(ev, now)

    def _retry_set(self, s, now):
        """Start the waiters of set ``s`` the directory now admits, in arrival order (a read that needs a
        new entry never overtakes an earlier one), then back-invalidate for the first that still waits."""
        if s in self._retrying:
            return                    # an outer call is restarting them; it looks again after each start
        self._retrying.add(s)
        try:
            moved = True
            while moved and s in self.set_wait:
                moved = False
                waiting, rest = self.set_wait.pop(s), deque()
                blocked = False
                for txn in waiting:
                    needs = self._needs_entry(txn)
                    if s not in self.evicting and not (needs and blocked) and self._place(txn):
                        self._start(txn, now)
                        moved = True
                    else:
                        blocked = blocked or needs
                        rest.append(txn)
                rest.extend(self.set_wait.pop(s, ()))     # arrived while the others were started
                if rest:
                    self.set_wait[s] = rest
        finally:
            self._retrying.discard(s)
        self._maybe_evict(s, now)

    def _start(self, txn, now):
        line = txn.line
        self.active[line] = txn
        holders = self.dir.get(line, {})
        if txn.dev is None:           # the host's own: HostOp
            snoop = _HOST_SNOOP[txn.op]
            if txn.op is _HostOp_BackInvalidate:
                whom = "holders"
            elif self.cfg.host_snoop_scope == "all":
                whom = "all"
            else:
                whom = "others" if snoop is _Snp_SnpInv else "owner"
            rule = (snoop, whom)
        else:
            rule = HOST_TABLE[txn.op]["snoop"]
        targets = []
        if rule is not None:
            snoop, whom = rule
            if whom == "owner":
                targets = [d for d, s in holders.items() if s == "E" and d != txn.dev]
            elif whom == "all":
                targets = list(range(len(self.links)))
            else:
                targets = [d for d in holders if d != txn.dev]
            for d in sorted(targets):
                uqid = self._uqid()
                self.snoops[uqid] = _SnoopWait(txn, d, snoop)
                self._send(d, Msg(_Ch_H2D_REQ, snoop, uqid, line), now)
        txn.pending = len(targets)
        if not targets:
            self._grant(txn, now)

    # ---------------------------------------------------------------- snoop answers
    def on_d2h_rsp(self, dev, msg, now):
        self.now = now
        w = self.snoops.get(msg.uid)
        if w is None or w.dev != dev:
            raise ProtocolError(f"host: {msg.op.name} from dev{dev} for UQID {msg.uid}, which names no "
                                f"snoop to that device")
        if w.rsp is not None:
            raise ProtocolError(f"host: second response {msg.op.name} for UQID {msg.uid}")
        if msg.op not in SNOOP_RESPONSES[w.snoop]:
            raise ProtocolError(f"host: dev{dev} answered {w.snoop.name} to line {w.txn.line:#x} with "
                                f"{msg.op.name}, which that snoop does not allow")
        w.rsp = msg.op
        w.snap = msg.data
        state, w.has_data = _RESULT[msg.op]
        holders = self.dir.setdefault(w.txn.line, {})
        if state is None:
            holders.pop(dev, None)
        elif state == "S":
            holders[dev] = "S"
        if w.data is not None and not w.has_data:
            raise ProtocolError(f"host: dev{dev} sent data with {msg.op.name}, which carries none")
        self._snoop_progress(msg.uid, w, now)

    def on_d2h_data(self, dev, msg, now):
        self.now = now
        w = self.snoops.get(msg.uid)
        if w is not None and w.dev == dev:
            if w.data is not None or (w.rsp is not None and not w.has_data):
                raise ProtocolError(f"host: unexpected snoop data from dev{dev} for UQID {msg.uid}")
            if msg.bogus:
                raise ProtocolError(f"host: bogus snoop data from dev{dev} for UQID {msg.uid}")
            w.data = msg.data
            self._snoop_progress(msg.uid, w, now)
            return
        txn = self.pulls.pop(msg.uid, None)
        if txn is None or txn.dev != dev:
            raise ProtocolError(f"host: D2H Data from dev{dev} for UQID {msg.uid}, which names no buffer")
        self._free(msg.uid)
        txn.pull = None
        self._pulled(txn, msg, now)

    def _snoop_progress(self, uqid, w, now):
        if w.rsp is None or (w.has_data and w.data is None):
            return
        del self.snoops[uqid]
        self._free(uqid)
        txn = w.txn
        if w.snap is not None:
            txn.snap = w.snap
        if w.has_data:
            txn.fwd = w.data
            if w.rsp is not _Rsp_RspVFwdV:          # the snooped copy gave up M: memory is now current
                self.mem[txn.line] = w.data
                self.checker.read(txn.line, w.data, "host: snoop data from dev{}", (w.dev,))
        txn.pending -= 1
        if txn.pending == 0:
            self._grant(txn, now)

    # ---------------------------------------------------------------- grants
    def _grant(self, txn, now):
        line, op, dev = txn.line, txn.op, txn.dev
        if dev is None:
            self._host_done(txn, now)
            return
        holders = self.dir.setdefault(line, {})
        value = txn.fwd if txn.fwd is not None else self.memory(line)
        if op in _READS:                # RdShared, RdAny, RdOwn, RdOwnNoData
            others = [d for d in holders if d != dev]
            if op is _Req_RdShared or (op is _Req_RdAny and others):
                holders[dev], state = "S", _GO_Shared
            else:
                if others:
                    raise AssertionError(f"host: granting E on line {line:#x} to dev{dev} while {others} hold it")
                holders[dev], state = "E", _GO_Exclusive
            data_first = False
            if op is not _Req_RdOwnNoData:
                self.checker.read(line, value, "host: data for {.name} from dev{}", (op, dev))
                data_first = self._data_first.tick()
                if data_first:
                    self.counts["data_first"] += 1
                    self._send(dev, Msg(_Ch_H2D_DATA, None, txn.cqid, line, data=value), now)
            self._rsp(txn, _HRsp_GO, state._value_, now)
            if op is not _Req_RdOwnNoData and not data_first:
                lag = 0
                if self._data_late.tick():
                    lag = self.cfg.host_data_lag
                    self.counts["data_late"] += 1
                self._send(dev, Msg(_Ch_H2D_DATA, None, txn.cqid, line, data=value), now, lag)
            self._finish(txn, now)
        elif op is _Req_RdCurr:
            if txn.snap is not None:   # serialized when the owner answered SnpCur
                if value != txn.snap:
                    self.checker.read(line, value, "host: data for RdCurr from dev{} (SnpCur said {})",
                                      (dev, txn.snap))
            else:
                self.checker.read(line, value, "host: data for RdCurr from dev{}", (dev,))
            self._send(dev, Msg(_Ch_H2D_DATA, None, txn.cqid, line, data=value), now)
            self._finish(txn, now)
        elif op is _Req_ItoMWr or op is _Req_DirtyEvict or (op is _Req_CleanEvict and self._pull_clean.tick()):
            if op is _Req_ItoMWr:
                self.checker.write(line, txn.value, "ItoMWr from dev{} (GO)", (dev,))
            else:
                txn.expect_bogus = holders.get(dev) != "E"
                if op is _Req_CleanEvict:
                    txn.expect_bogus = dev not in holders
            holders.pop(dev, None)
            txn.pull = self._uqid()
            self.pulls[txn.pull] = txn
            self._rsp(txn, _HRsp_GO_WritePull, txn.pull, now)
        elif op is _Req_WrInv:
            txn.pull = self._uqid()
            self.pulls[txn.pull] = txn
            self._rsp(txn, _HRsp_WritePull, txn.pull, now)
        elif op is _Req_CleanEvict:
            holders.pop(dev, None)
            self._rsp(txn, _HRsp_GO_WritePull_Drop, 0, now)
            self._finish(txn, now)
        else:   # CLFlush, CleanEvictNoData
            holders.pop(dev, None)
            self._rsp(txn, _HRsp_GO, _GO_I, now)
            self._finish(txn, now)

    def _pulled(self, txn, msg, now):
        line = txn.line
        if txn.op is _Req_DirtyEvict or txn.op is _Req_CleanEvict:
            if msg.bogus != txn.expect_bogus:
                raise ProtocolError(f"host: {txn.op.name} data from dev{txn.dev} line {line:#x} has Bogus="
                                    f"{int(msg.bogus)}, expected {int(txn.expect_bogus)}")
            if msg.bogus:
                self.bogus_dropped += 1
            else:
                self.checker.read(line, msg.data, "host: {.name} data from dev{}", (txn.op, txn.dev))
                self.mem[line] = msg.data
        elif txn.op is _Req_ItoMWr:
            if msg.bogus or msg.data != txn.value:
                raise ProtocolError(f"host: ItoMWr data from dev{txn.dev} differs from the request")
            self.mem[line] = msg.data
        elif txn.op is _Req_WrInv:
            self.mem[line] = msg.data
            self.checker.write(line, msg.data, "WrInv from dev{} (GO)", (txn.dev,))
            self._rsp(txn, _HRsp_GO, _GO_I, now)
        self._finish(txn, now)

    def _host_done(self, txn, now):
        """Every snoop of the host's own transaction answered (data in): read or write memory."""
        line, op = txn.line, txn.op
        if op is _HostOp_BackInvalidate:
            if self.dir.get(line):
                raise ProtocolError(f"host: back-invalidation of line {line:#x} left holders {self.dir[line]}")
            self.dir.pop(line, None)
            self.sf.free(line)
            del self.evicting[self.sf.set_of(line)]
        elif op is _HostOp_Write:
            self.mem[line] = txn.value
            self.checker.write(line, txn.value, "host write (its snoops answered)")
        else:
            value = txn.fwd if txn.fwd is not None else self.memory(line)
            if txn.snap is not None and value == txn.snap:
                self.checker.read_at_serialization(line, value, "host read_current (SnpCur)")
            else:
                self.checker.read(line, value, "host {0.value[0]}", (op,))
        self._finish(txn, now)

    def _finish(self, txn, now):
        line = txn.line
        del self.active[line]
        if not self.dir.get(line):
            self.dir.pop(line, None)
            sf = self.sf
            if sf is not None and line in sf.entries:
                sf.free(line)             # no holder left: the entry goes without a snoop
        if txn.dev is not None:
            self.served += 1
        q = self.queue.get(line)
        if q:
            nxt = q.popleft()
            if not q:
                del self.queue[line]
            self._admit(nxt, now)
        if self.sf is not None:
            self._retry_set(self.sf.set_of(line), now)

    def idle(self):
        return not self.active and not self.queue and not self.snoops and not self.pulls

    def check_directory(self):
        """The finite directory's own structure, and an entry for every line with a holder (inclusion of
        what devices hold is checked against their caches by models.system)."""
        sf = self.sf
        if sf is None:
            return
        sf.check()
        for line, holders in self.dir.items():
            if holders and line not in sf.entries:
                raise AssertionError(f"host directory: line {line:#x} has holders {holders} but no entry")

    def key(self):
        return (tuple(sorted(self.mem.items())),
                tuple(sorted((l, tuple(sorted(h.items()))) for l, h in self.dir.items())),
                tuple(sorted((l, t.key()) for l, t in self.active.items())),
                tuple(sorted((l, tuple(t.key() for t in q)) for l, q in self.queue.items())),
                tuple(sorted((u, w.key()) for u, w in self.snoops.items())),
                tuple(sorted((u, t.line) for u, t in self.pulls.items())),
                self.sf.key() if self.sf is not None else None,
                tuple(sorted((s, tuple(t.line for t in q)) for s, q in self.set_wait.items())))
