"""The system testbench's device side for the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py).

tb/system_tb.py's :class:`DeviceSide` with one part changed: the shadow device follows the pipelined
engine's commit ports (hdl/dcoh/pipe/engine.py) instead of the serializing DCOH's ``dispatch``.  Each
cycle, in the engine's commit order:

* the messages the DCOH took from the link (``took_snoop`` / ``took_rsp`` / ``took_data``): each must be
  the next its channel delivered (the RTL link keeps a channel in order); a snoop waits for its commit
  under its line, an H2D Rsp or Data in the response path's intake order;
* a probe message the caches took (they take every one at once): the shadow's ``close_probe``;
* snoop C answering a snoop (the shadow's ``on_snoop`` of the host's message, delivered from the
  model's link then);
* a completion (``freed``: ``Device.complete``, the shadow completing where the RTL's lane frees the
  CQID, ``defer_complete``);
* request C: an access issued, finished inside the device or evicted (``_try_issue`` of that cache's
  access, which must succeed), or a back-invalidation started (the same try, which must fail having
  started one);
* the snoop answer lane: after a probe (``finish_probe``), else the snoop's ``on_snoop``;
* a probe added by a snoop's work entry (the snoop's ``on_snoop``, which opens the probe);
* response C applying an H2D Rsp or Data (delivered from the model's link then).

The shadow tries an access only where the RTL commits it (``defer_service``); a cache hit (the cache BFM
finishes it alone) is taken while the DCOH is idle, and tried at once.  Everything else (the host, the
flit monitor, the message and cache comparisons, the invariants) is tb/system_tb.py's.

:class:`CommitFollower` is that shadow logic, given the ports' values by a function, so that the
per-cycle side here (:class:`PipelinedSide`, from the monitor vector) and the batched one
(tb/system_batch.py, from the device's records) share it.
"""

from collections import deque

from cxl.messages import Channel
from hdl.dcoh.pipe.response_path import ResponseCommit
from hdl.dcoh.pipe.snoop_pipe import CommitC
from hdl.device import PIPELINED_EVENTS
from tb.engine_shadow import ShadowDisagrees, shadow_commit, shadow_hit
from tb.system_tb import DeviceSide
from tb.system_top import MON_FIELD_WIDTH, mon_layout

__all__ = ["CommitFollower", "PipelinedSide"]

_MON, _ = mon_layout(pipelined=True)
_BIT = {n: 1 << p for n, p in _MON.items()}
_COMMIT_C = list(CommitC)
_RSP_COMMIT = list(ResponseCommit)
_MON_NAME = {"probe_valid": "probe__valid"}          # follow_commits' names -> the monitor's
_HANDLE = {"probe": "probe__payload"}                # -> the port handles'
_MASK = {n: (1 << MON_FIELD_WIDTH.get(_MON_NAME.get(n, n), 1)) - 1
         for n in (*_MON, "probe_valid")}
# any of these bits: the engine changed something this cycle
_STEPS = sum(_MASK[n] << _MON[n] for n in PIPELINED_EVENTS) | _BIT["probe__valid"]


class CommitFollower:
    """The shadow's part of a device side that follows the pipelined DCOH's commit ports, whichever way the
    testbench reads them (this file's :class:`PipelinedSide` from the per-cycle monitor, tb/system_batch.py
    from the batched device's records).  Mixed into a :class:`tb.system_tb.DeviceSide`."""

    probes_in_steps = True

    def follow_init(self):
        self.shadow.defer_complete = True           # completes where the RTL's lane frees the CQID
        self.snoops = {}                            # line -> the host's snoop the DCOH took, not yet committed
        self.taken = deque()                        # H2D Rsp / Data the DCOH took, not yet applied

    def _took_next(self, chan):
        """The DCOH took a message on ``chan``: the next one the RTL link delivered on it."""
        q = self.in_rtl[chan]
        if not q:
            self.fail(f"the DCOH took a {chan.name} message, but the link delivered none")
        return q.popleft()

    def _snoop(self, line):
        entry = self.snoops.pop(line, None)
        if entry is None:
            self.fail(f"the DCOH committed a snoop to line {line:#x}, but took none to it "
                      f"(taken: {sorted(hex(x) for x in self.snoops)})")
        self._deliver(entry)

    def take_access(self, now):
        """The DCOH took the access its cpu_req offered (``self.cpu_cur``)."""
        if not self.shadow.take(self.cpu_cur, now):
            self.fail(f"the shadow refuses {self.cpu_cur!r}: its cache {self.cpu_cur.k} is busy")

    def follow_commits(self, get, now):
        """One cycle's intake and commits, in the engine's order.  ``get(name)``: the value of a commit
        port (hdl/dcoh/pipe/dcoh_top.py COMMIT_PORTS), of ``took_snoop`` / ``took_rsp`` / ``took_data``,
        of ``probe_valid`` (the caches took a probe message) or ``probe`` (its payload)."""
        dev, count = self.shadow, self.bench.commit_count
        # ---- what the DCOH took from the link (its commits are cycles later)
        if get("took_snoop"):
            entry = self._took_next(Channel.H2D_REQ)
            line = entry[1].line
            if line in self.snoops:
                self.fail(f"the host sent a second snoop to line {line:#x} while the first is unanswered")
            self.snoops[line] = entry
        for name, chan in (("took_rsp", Channel.H2D_RSP), ("took_data", Channel.H2D_DATA)):
            if get(name):
                self.taken.append(self._took_next(chan))
        # ---- the commits, in the engine's order
        if get("probe_valid"):                          # the caches take every probe at once
            self.probe_acked(get("probe"), now)
        c = _COMMIT_C[get("commit_c")]
        if c is CommitC.ANSWER:
            count["snoop_c"] += 1
            self._snoop(get("commit_c_line"))
        elif c is CommitC.DROP:
            self.fail(f"the DCOH dropped a snoop to line {get('commit_c_line'):#x} (a reserved opcode)")
        if get("freed_valid"):
            cqid = get("freed_cqid")
            if cqid not in dev.txns:
                self.fail(f"the DCOH completed CQID {cqid}, which its shadow has not started")
            count["completion"] += 1
            dev.complete(cqid, now)
        access, bi = get("commit"), get("commit_bi")
        if access or bi:
            count["access" if access else "back_invalidation"] += 1
            try:
                shadow_commit(dev, get("commit_cache"), now, back_invalidation=not access)
            except ShadowDisagrees as e:
                self.fail(str(e))
        if get("commit_lane"):
            count["snoop_lane"] += 1
            line = get("commit_lane_line")
            if get("commit_lane_probed"):
                if line not in self.acked:
                    self.fail(f"the DCOH finished line {line:#x} after a probe its caches have not taken")
                self.acked.discard(line)
                dev.finish_probe((line,), now)
            else:
                self._snoop(line)
        if get("commit_probe") and not get("commit_probe_evict"):
            count["snoop_probe"] += 1
            self._snoop(get("commit_probe_line"))
        r = _RSP_COMMIT[get("rsp_commit")]
        if r is not ResponseCommit.NONE:
            if not self.taken:
                self.fail(f"the DCOH applied an H2D message ({r.name}) it did not take")
            entry = self.taken.popleft()
            if r is ResponseCommit.DROP:
                self.fail(f"the DCOH dropped {entry[1]!r} as a protocol error")
            want = Channel.H2D_RSP if r is ResponseCommit.RSP else Channel.H2D_DATA
            if entry[1].chan is not want:
                self.fail(f"the DCOH applied an {want.name}, but took {entry[1]!r} first")
            count["response"] += 1
            self._deliver(entry)
        dev.transmit(now)

    def hit_taken(self, op, now):
        """A hit in the RTL's cache (taken while the DCOH is idle): the shadow takes it and tries it at once,
        and nothing else (its waiting accesses wait for the RTL's commits)."""
        try:
            shadow_hit(self.shadow, op, now)
        except ShadowDisagrees as e:
            self.fail(f"{e}; the RTL's cache {op.k} has {self.bfm.caches[op.k].get(op.line)}")
        self.bench.hits += 1
        self.bench.touch(op.line)

    def drained(self):
        return super().drained() and not self.snoops and not self.taken


class PipelinedSide(CommitFollower, DeviceSide):
    """The per-cycle testbench's device side: the commit ports from the monitor vector and their handles."""

    def __init__(self, bench, d):
        super().__init__(bench, d)
        self.follow_init()

    def engine_steps(self, bits, now):
        h = self.h
        took_access = self.cpu_cur is not None and bits & _BIT["cpu_req__ready"]
        if took_access:
            self.take_access(now)
        if not bits & _STEPS:
            return bool(took_access)

        def get(name):
            at = _MON.get(_MON_NAME.get(name, name))
            if at is not None:
                return (bits >> at) & _MASK[name]
            return int(h(_HANDLE.get(name, name)).value)
        self.follow_commits(get, now)
        return True
