"""Golden model of the host home agent.

Per line the host keeps which devices hold it and how ('S', or 'E' for an owner in E or M: E -> M is
silent, so the host cannot tell them apart), and memory.  Requests to one line are served one at a
time in arrival order; the GO the host sends is the serialization point.  Snoops follow HOST_TABLE
(cxl/coherence.py): SnpData to the owner for RdShared/RdAny, SnpCur to the owner for RdCurr, SnpInv to every
other holder for RdOwn, RdOwnNoData, ItoMWr, WrInv and CLFlush.  UQIDs name the host's buffers for
snoop data and pulled write data (the WritePull family carries the UQID in RspData).

Opcodes the host does not serve (WrCur, WOWrInv, WOWrInvF, CacheFlushed) raise UndeclaredTransition.
"""

from collections import deque

from cxl.messages import (Channel, D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp,
                          H2DRspOpcode as HRsp, GOState, MAX_IDS)
from .link import Msg
from cxl.coherence import HOST_TABLE, SNOOP_RESPONSES, UndeclaredTransition

from .members import Members
from .dcoh import ProtocolError

__all__ = ["Host"]

# The enums' members for hot code (see models/members.py): the same objects, cheaper to look up.
_Req, _Rsp, _Snp, _HRsp = Members(Req), Members(Rsp), Members(Snp), Members(HRsp)
_GO, _Ch = Members(GOState), Members(Channel)
_READS = (Req.RdShared, Req.RdAny, Req.RdOwn, Req.RdOwnNoData)

_RESULT = {  # response -> (state the responder is left in, whether data follows)
    Rsp.RspIHitI: (None, False), Rsp.RspIHitSE: (None, False), Rsp.RspIFwdM: (None, True),
    Rsp.RspSHitSE: ("S", False), Rsp.RspSFwdM: ("S", True),
    Rsp.RspVHitV: ("=", False), Rsp.RspVFwdV: ("=", True),
}


_GO_I = _GO.Invalid.value


class HostTxn:
    __slots__ = ("dev", "op", "cqid", "line", "value", "pending", "fwd", "pull", "expect_bogus", "snap", "t0")

    def __init__(self, dev, msg, now):
        self.dev, self.op, self.cqid, self.line, self.value = dev, msg.op, msg.uid, msg.line, msg.data
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
        return f"host {self.op.name} from dev{self.dev} CQID {self.cqid} line {self.line:#x}"


class _SnoopWait:
    __slots__ = ("txn", "dev", "snoop", "rsp", "data", "has_data", "snap")

    def __init__(self, txn, dev, snoop):
        self.txn, self.dev, self.snoop = txn, dev, snoop
        self.rsp, self.data, self.has_data, self.snap = None, None, False, None

    def key(self):
        return (self.txn.line, self.dev, self.snoop, self.rsp, self.data, self.has_data, self.snap)


class Host:
    def __init__(self, cfg, links, checker):
        self.cfg, self.links, self.checker = cfg, links, checker
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

    # ---------------------------------------------------------------- helpers
    def _send(self, dev, msg, now):
        self.links[dev].send(msg, now, self.cfg.host_latency)

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
        self._send(txn.dev, Msg(_Ch.H2D_RSP, op, txn.cqid, txn.line, rsp_data=rsp_data), now)

    def memory(self, line):
        return self.mem.get(line, self.checker.initial)

    def outstanding(self):
        out = [(self.now - t.t0, repr(t)) for t in self.active.values()]
        out += [(self.now - t, f"host queued {m.op.name} from dev{d} line {m.line:#x}")
                for q in self.queue.values() for d, m, t in q]
        return out

    # ---------------------------------------------------------------- D2H Req
    def on_d2h_req(self, dev, msg, now):
        self.now = now
        if msg.op not in HOST_TABLE:
            raise UndeclaredTransition("host home agent", f"line {msg.line:#x}", msg.op)
        if msg.line in self.active:
            self.queue.setdefault(msg.line, deque()).append((dev, msg, now))
        else:
            self._start(HostTxn(dev, msg, now), now)

    def _start(self, txn, now):
        line = txn.line
        self.active[line] = txn
        holders = self.dir.get(line, {})
        rule = HOST_TABLE[txn.op]["snoop"]
        targets = []
        if rule is not None:
            snoop, whom = rule
            if whom == "owner":
                targets = [d for d, s in holders.items() if s == "E" and d != txn.dev]
            else:
                targets = [d for d in holders if d != txn.dev]
            for d in sorted(targets):
                uqid = self._uqid()
                self.snoops[uqid] = _SnoopWait(txn, d, snoop)
                self._send(d, Msg(_Ch.H2D_REQ, snoop, uqid, line), now)
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
            if w.rsp is not _Rsp.RspVFwdV:          # the snooped copy gave up M: memory is now current
                self.mem[txn.line] = w.data
                self.checker.read(txn.line, w.data, f"host: snoop data from dev{w.dev}")
        txn.pending -= 1
        if txn.pending == 0:
            self._grant(txn, now)

    # ---------------------------------------------------------------- grants
    def _grant(self, txn, now):
        line, op, dev = txn.line, txn.op, txn.dev
        holders = self.dir.setdefault(line, {})
        value = txn.fwd if txn.fwd is not None else self.memory(line)
        if op in _READS:                # RdShared, RdAny, RdOwn, RdOwnNoData
            others = [d for d in holders if d != dev]
            if op is _Req.RdShared or (op is _Req.RdAny and others):
                holders[dev], state = "S", _GO.Shared
            else:
                if others:
                    raise AssertionError(f"host: granting E on line {line:#x} to dev{dev} while {others} hold it")
                holders[dev], state = "E", _GO.Exclusive
            self._rsp(txn, _HRsp.GO, state._value_, now)
            if op is not _Req.RdOwnNoData:
                self.checker.read(line, value, f"host: data for {op.name} from dev{dev}")
                self._send(dev, Msg(_Ch.H2D_DATA, None, txn.cqid, line, data=value), now)
            self._finish(txn, now)
        elif op is _Req.RdCurr:
            if txn.snap is not None:   # serialized when the owner answered SnpCur
                if value != txn.snap:
                    self.checker.read(line, value, f"host: data for RdCurr from dev{dev} (SnpCur said "
                                      f"{txn.snap})")
            else:
                self.checker.read(line, value, f"host: data for RdCurr from dev{dev}")
            self._send(dev, Msg(_Ch.H2D_DATA, None, txn.cqid, line, data=value), now)
            self._finish(txn, now)
        elif op is _Req.ItoMWr or op is _Req.DirtyEvict or (op is _Req.CleanEvict and self.cfg.clean_evict_data):
            if op is _Req.ItoMWr:
                self.checker.write(line, txn.value, f"ItoMWr from dev{dev} (GO)")
            else:
                txn.expect_bogus = holders.get(dev) != "E"
                if op is _Req.CleanEvict:
                    txn.expect_bogus = dev not in holders
            holders.pop(dev, None)
            txn.pull = self._uqid()
            self.pulls[txn.pull] = txn
            self._rsp(txn, _HRsp.GO_WritePull, txn.pull, now)
        elif op is _Req.WrInv:
            txn.pull = self._uqid()
            self.pulls[txn.pull] = txn
            self._rsp(txn, _HRsp.WritePull, txn.pull, now)
        elif op is _Req.CleanEvict:
            holders.pop(dev, None)
            self._rsp(txn, _HRsp.GO_WritePull_Drop, 0, now)
            self._finish(txn, now)
        else:   # CLFlush, CleanEvictNoData
            holders.pop(dev, None)
            self._rsp(txn, _HRsp.GO, _GO_I, now)
            self._finish(txn, now)

    def _pulled(self, txn, msg, now):
        line = txn.line
        if txn.op is _Req.DirtyEvict or txn.op is _Req.CleanEvict:
            if msg.bogus != txn.expect_bogus:
                raise ProtocolError(f"host: {txn.op.name} data from dev{txn.dev} line {line:#x} has Bogus="
                                    f"{int(msg.bogus)}, expected {int(txn.expect_bogus)}")
            if msg.bogus:
                self.bogus_dropped += 1
            else:
                self.checker.read(line, msg.data, f"host: {txn.op.name} data from dev{txn.dev}")
                self.mem[line] = msg.data
        elif txn.op is _Req.ItoMWr:
            if msg.bogus or msg.data != txn.value:
                raise ProtocolError(f"host: ItoMWr data from dev{txn.dev} differs from the request")
            self.mem[line] = msg.data
        elif txn.op is _Req.WrInv:
            self.mem[line] = msg.data
            self.checker.write(line, msg.data, f"WrInv from dev{txn.dev} (GO)")
            self._rsp(txn, _HRsp.GO, _GO_I, now)
        self._finish(txn, now)

    def _finish(self, txn, now):
        line = txn.line
        del self.active[line]
        if not self.dir.get(line):
            self.dir.pop(line, None)
        self.served += 1
        q = self.queue.get(line)
        if q:
            dev, msg, t = q.popleft()
            if not q:
                del self.queue[line]
            nxt = HostTxn(dev, msg, t)
            self._start(nxt, now)

    def idle(self):
        return not self.active and not self.queue and not self.snoops and not self.pulls

    def key(self):
        return (tuple(sorted(self.mem.items())),
                tuple(sorted((l, tuple(sorted(h.items()))) for l, h in self.dir.items())),
                tuple(sorted((l, t.key()) for l, t in self.active.items())),
                tuple(sorted((l, tuple((d, m) for d, m, _ in q)) for l, q in self.queue.items())),
                tuple(sorted((u, w.key()) for u, w in self.snoops.items())),
                tuple(sorted((u, t.line) for u, t in self.pulls.items())))
