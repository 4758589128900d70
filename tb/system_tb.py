"""cocotb system testbench: N RTL devices (DCOH + 68B-flit link) under the golden model's host home
agent, scoreboarded against a shadow golden model.

Toplevel: ``system_top`` from tb/system_top.py (N ``linked_device`` instances).  Per device the host
side is the host end of its flit link; the device side is the DCOH's internal-cache ports.

Who is who
----------
* **Host BFM**: ``models.host.Host`` itself, inside a ``models.system.System`` (untimed).  What it
  sends to device ``d`` goes into the model link's in-flight list *and* is driven into the RTL at
  ``d<d>_h2d_*`` (polled VIP ports, encodings from ``cxl.messages`` via ``models.link.encode``); what
  the RTL delivers at ``d<d>_d2h_*`` is matched with the model's in-flight message and handed to the
  Host.  A snoop enters the RTL link once every earlier H2D Rsp to its line has entered it (the host's
  order); from there the link and the DCOH must keep the ordering rule of models/link.py by themselves.
* **Shadow devices**: the System's ``Device`` objects are not simulated on their own; each one is
  the shadow of RTL device ``d`` and takes the events the RTL engine takes, in the order and cycle it
  takes them (the DCOH's ``dispatch`` port: snoop, held-snoop replay, H2D Rsp, H2D Data, CPU access,
  a probe's work, the rescan of the waiting accesses), plus the probes the internal caches acknowledge
  (``close_probe`` of exactly the lines the RTL's probe names, each worked at the engine's WORK of it,
  ``work_line``; the caches take every probe at once).  The shadow tries its waiting accesses only at
  the engine's SCAN (``Device.defer_service``), so the snoops the DCOH's side path answers while an
  event waits come before that rescan in both; the DCOH serializes everything else, so the RTL and its
  shadow must agree message for message.
* **Internal caches**: ``tb.cache_bfm.CacheBFM`` per device (the model's MESI rules), fed by the
  model's seeded ``Workload`` (true/false sharing, set conflicts, a random pool; layouts rotate per
  seed).  A cache hit touches no DCOH state, so the BFM takes one only while the DCOH is idle, and
  the shadow takes it at the same point.

Checked
-------
* every D2H message (opcode, CQID/UQID, address, data line, Bogus) equals one the shadow sent;
  anything the RTL sends that the shadow did not is a mismatch, and so is a shadow message that
  never comes (at the end);
* the H2D message the RTL engine takes is the one the host sent (per-channel order through the link);
* after every event: the golden model's own invariants on the shadow (SWMR, data value, snoop-filter
  inclusion, credits) -- ``System.check_step``;
* every cycle in which an internal cache changes: SWMR over the RTL's observable state (all BFM
  caches of all devices), and the data values of the settled devices' copies against the last
  serialized write (a device's shadow serializes its own write when the engine takes the event, a
  few cycles before the RTL has updated that device's other copies);
* whenever a DCOH is idle: its internal caches equal its shadow's;
* at the end: everything drained, caches equal, ``System.check_all``, forward progress (watchdog);
* flit monitor: every flit on every wire decodes under the golden ``models.flit.Unpacker`` rules
  (tb/flit_checker.py: the flits, stamped with their cycle, are decoded in batches by a process of its
  own; a broken rule fails the run a batch later, naming the flit's cycle, device and wire).

Coverage printed (and in the summary): the (state, event) pairs the shadows took and the flit slot
formats / flit kinds seen.  A failure names its seed: ``make sim SEED=<seed>`` reproduces it.

Host home agent: the Config defaults of models/config.py (finite directory, host traffic), changed by
``SIM_HOST`` (``name=value,...`` Config fields, e.g. ``host_dir=exact,host_traffic=0``).  The host's own
accesses (Config.host_traffic per device access, drawn by ``Workload.host_op`` from a generator of their
own) come with the random workload only; a replayed trace is replayed as it is.

Settings (environment, set by tb/run_system.py): ``SIM_PARAMS`` (the build's system_params_<N>dev.json),
``SIM_TRANSACTIONS``, ``SEED``, ``SIM_THINK``, ``SIM_OUT`` (summary JSON), ``SIM_FLIT_MONITOR``, ``SIM_HOST``;
``SIM_PROFILE=<file>`` writes a cProfile of the testbench's Python; ``SIM_BREAK`` (tests only) breaks a
check's input on purpose to show the check fails: ``cmd_data`` corrupts the line the cache BFM returns for
dirty data, ``flit`` the CRC of one downstream protocol flit of dev0 as the flit checker sees it.
"""

import json
import os
import random
import sys
import time
from collections import Counter, deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hdl.dcoh.dcoh import DCOH, CacheState, CmdOp, CpuKind, Dispatch
from hdl.link.port import LinkErrorCause
from cxl.messages import Channel
from models.checker import InvariantViolation
from models.config import Config
from models.coverage import closure_report
from models.dcoh import CpuOp, cache_hit
from models.link import Link, encode as encode_msg
from cxl.coherence import Perm
from models.latency import latency_entry
from models.system import System, Workload, state_event_coverage
from tb.cache_bfm import CacheBFM
from tb.progress import Progress
from tb.seed import env_seed
from tb.system_top import mon_layout
from tb.flit_checker import FlitChecker, FlitRuleBroken
from tb.vip import ChannelCodec, StructCodec

__all__ = ["SystemMismatch", "SystemBench"]


class SystemMismatch(AssertionError):
    """The RTL and the golden model disagree (the message names the seed, cycle and device)."""


_MON, _ = mon_layout()
_BIT = {n: 1 << p for n, p in _MON.items() if n != "dispatch"}
_DISPATCH_SHIFT = _MON["dispatch"]
_ERROR = _BIT["error"]
_H2D = (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA)
_D2H = (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA)
_READY = {Channel.H2D_REQ: _BIT["h2d_req__ready"], Channel.H2D_RSP: _BIT["h2d_rsp__ready"],
          Channel.H2D_DATA: _BIT["h2d_data__ready"]}
_VALID = {Channel.D2H_REQ: _BIT["d2h_req__valid"], Channel.D2H_RSP: _BIT["d2h_rsp__valid"],
          Channel.D2H_DATA: _BIT["d2h_data__valid"]}
_DISPATCH = list(Dispatch)                      # code -> member (Amaranth enums are not ints)
_WORK_CODE = Dispatch.WORK.value
_SCAN_CODE = Dispatch.SCAN.value
# the events the engine's own dispatch decision takes (not the snoop side path's)
_ENGINE_EVENTS = (Dispatch.RSP, Dispatch.DATA, Dispatch.REPLAY, Dispatch.CPU)
_SCAN_BEFORE = _BIT["scan_before"]
_CACHE_STATE = {CacheState.I: "I", CacheState.S: "S", CacheState.E: "E", CacheState.M: "M"}


def _freed_text(key):
    """One key of ``Device.woken`` (a CQID, a work entry, a line, a snoop-filter set) for a failure message."""
    return key if isinstance(key, str) else f"{key[0]} {key[1]:#x}"


class HostSendSpy(Link):
    """The golden model's link to device ``d``, which hands every message the host sends on it to that
    device's testbench side (``bench.devs[d].h2d_sent``) to drive into the RTL.  The RTL's host answers
    at once (the RTL link's latency stands in for the model's), but keeps any lag beyond its lookup that
    the host gives a message on purpose.  A subclass rather than a method replaced on one link: the
    compiled golden model's links take no attributes of their own (models/link.pxd)."""

    def __init__(self, cfg, timed, bench, d):
        super().__init__(cfg, timed)
        self.bench, self.d = bench, d

    def send(self, msg, now, extra=0):
        super().send(msg, now, extra)
        if not msg.chan.upstream:
            self.bench.devs[self.d].h2d_sent(self.flight[False][-1],
                                             now + max(0, extra - self.bench.cfg.host_latency))


class DeviceSide:
    """One RTL device: its ports, its cache BFM and traffic, and its shadow in the model."""

    def __init__(self, bench, d):
        self.bench, self.d = bench, d
        dut = bench.dut
        handles = {}

        def h(name):                                 # handles looked up once
            x = handles.get(name)
            if x is None:
                x = handles[name] = getattr(dut, f"d{d}_{name}")
            return x
        self.h = h
        self.shadow = bench.sysm.devices[d]
        self.shadow.defer_service = True                # service() at the engine's SCAN (dispatch below)
        self.link = bench.sysm.links[d]
        self.bfm = CacheBFM(bench.cfg.caches)
        self.codec = {c: ChannelCodec(c, len(h(f"{c.name.lower()}__payload")), f"d{d}_{c.name.lower()}")
                      for c in _H2D + _D2H}
        self.h2d_queue = {c: deque() for c in _H2D}    # (model flight entry, release cycle) not yet driven
        self.h2d_cur = dict.fromkeys(_H2D)              # entry being offered
        self.in_rtl = {c: deque() for c in _H2D}       # entries taken by the RTL link, not yet by the DCOH
        self.held = None                                # the snoop the RTL holds for replay
        self.cpu_queue = deque()                        # misses waiting for the cpu_req port
        self.cpu_cur = None
        self.cmd_rsp = None                             # (dirty, excl, data) being offered
        self.acked = set()                              # lines of acknowledged probes, each worked at its WORK
        self.worked = set()                             # lines worked since the last SCAN
        self.recent = deque(maxlen=12)                  # the last dispatches (cycle, code), for failures
        self.pending_op = [None] * bench.cfg.caches     # a generated hit waiting for an idle DCOH
        self.next_issue = [bench.rng.randrange(bench.think + 1) for _ in range(bench.cfg.caches)]
        self.was_idle = False
        # what cycle() touches every cycle, looked up once: (channel, ready bit, payload, valid) per H2D
        # channel, (flit-valid bit, word, name) per wire, (channel, valid bit) per D2H channel
        self.h2d_ports = tuple((c, _READY[c], h(f"{c.name.lower()}__payload"), h(f"{c.name.lower()}__valid"))
                               for c in _H2D)
        self.d2h_ports = tuple((c, _VALID[c]) for c in _D2H)
        self.wires = tuple((_BIT[f"{name}_flit"], h(f"{name}_word"), name)
                           for name in ("up", "down")) if bench.flit_checker else ()
        self.h2d_idle = True                            # no H2D message offered or queued
        for c in _D2H:
            bench.write(h(f"{c.name.lower()}__ready"), 1)
        for name in ("cpu_rsp__ready", "cmd__ready", "probe__ready"):
            bench.write(h(name), 1)
        for name in ("cpu_req__valid", "cmd_rsp__valid", "cpu_req__payload",
                     "cmd_rsp__payload") + tuple(f"{c.name.lower()}__{x}" for c in _H2D for x in ("valid", "payload")):
            bench.write(h(name), 0)

    def fail(self, what):
        raise SystemMismatch(f"seed {self.bench.seed} cycle {self.bench.now} dev{self.d}: {what}")

    # ------------------------------------------------------------------ the shadow takes an event
    def _first(self, chan, skip=None):
        for i, e in enumerate(self.link.flight[False]):
            if e[1].chan is chan and e is not skip:
                return i, e
        self.fail(f"the RTL engine took a {chan.name} message, but none is in flight from the host")

    def _deliver(self, entry):
        flight = self.link.flight[False]
        for i, e in enumerate(flight):
            if e is entry:
                self.bench.sysm.deliver(self.d, False, i)
                return
        raise AssertionError("entry vanished from the model link")

    def entered_link(self, chan, entry):
        """The RTL link took ``entry`` on ``chan`` from the host.  A snoop that finds an H2D Rsp to its line
        still in the link (taken by it, not yet by the DCOH) is counted: the link and the DCOH must keep
        the two in order by themselves."""
        if chan is Channel.H2D_REQ:
            line = entry[1].line
            if any(e[1].line == line for e in self.in_rtl[Channel.H2D_RSP]):
                self.bench.snoops_behind_rsp += 1
        self.in_rtl[chan].append(entry)

    def _took(self, chan, entry):
        """The DCOH took ``entry`` off ``chan``: it must be the next one the RTL link delivered."""
        q = self.in_rtl[chan]
        if not q or q[0] is not entry:
            self.fail(f"the DCOH took {chan.name} {entry[1]!r}, but the link delivered "
                      f"{q[0][1] if q else 'nothing'} first")
        q.popleft()

    def scan_before(self, now):
        """The engine's ``scan_before``: the SCAN that ended a run of work, before this cycle's ``dispatch``."""
        self.bench.dispatch_count[_SCAN_CODE] += 1
        self.dispatch(Dispatch.SCAN, now)

    def dispatch(self, code, now, work_line=None):
        """The RTL engine started ``code`` (``work_line``: the line of a WORK) in cycle ``now``."""
        dev = self.shadow
        self.recent.append((now, code.name))
        if self.worked and code in _ENGINE_EVENTS:
            # a run of work ends with its SCAN (the model's service() after flushing the probes) before
            # any other event; only the snoop side path may answer a snoop inside the run, as that
            # changes nothing.  (A SCAN lost between the run and the next event, ``scan_before`` not
            # taken, would otherwise go unseen: an empty SCAN changes nothing else in the shadow.)
            self.fail(f"the DCOH dispatched {code.name} after a run of work (lines "
                      f"{sorted(hex(x) for x in self.worked)}) without the SCAN that ends it")
        if dev.woken and dev.queue and (code in _ENGINE_EVENTS or (code == Dispatch.WORK and not self.worked)):
            # the engine skips the rescan after an event that woke no waiting access; the shadow's wake-up
            # rule (Device.woken, sound by its own check) says which accesses the events since its last
            # SCAN woke, so an engine that skips a rescan the model needs is caught at its next event,
            # before the rescan's absence could show as a message much later (or as a hang).  Snoops are
            # left out: the side path answers them between an event and its SCAN.
            woken = dev.woken_accesses()
            if woken:
                freed = ", ".join(sorted(map(_freed_text, dev.woken)))
                self.fail(f"the DCOH dispatched {code.name} without the rescan that its waiting {woken} need "
                          f"(freed since its last SCAN: {freed}; the last dispatches: {list(self.recent)})")
        if code == Dispatch.SNOOP or code == Dispatch.REPLAY:
            if code == Dispatch.SNOOP:
                _, entry = self._first(Channel.H2D_REQ, self.held)
                self._took(Channel.H2D_REQ, entry)
            else:
                entry = self.held
                if entry is None:
                    self.fail("the DCOH replays a held snoop, but its shadow holds none")
            if dev.can_accept_snoop(entry[1]):
                self.held = None
                self._deliver(entry)
            else:
                self.held = entry           # the model's STALL: the RTL must hold it too
                return
        elif code == Dispatch.RSP or code == Dispatch.DATA:
            chan = Channel.H2D_RSP if code == Dispatch.RSP else Channel.H2D_DATA
            _, entry = self._first(chan)
            self._took(chan, entry)
            self._deliver(entry)
        elif code == Dispatch.CPU:
            op = self.cpu_cur
            if op is None:
                self.fail("the DCOH took a cpu_req while none was offered")
            if not dev.accept(op, now):
                self.fail(f"the shadow refuses {op!r}: its cache {op.k} is busy")
        elif code == Dispatch.WORK:
            if work_line in self.acked:
                self.acked.discard(work_line)
                dev.finish_probe((work_line,), now)
                self.worked.add(work_line)
            elif work_line not in self.worked:
                # (a line worked again in its run is the eviction after its snoop's answer: the shadow
                # did both at the first)
                self.fail(f"the DCOH works line {work_line:#x}, whose probe its caches have not "
                          f"acknowledged (acknowledged, not worked: {sorted(self.acked)})")
        elif code == Dispatch.SCAN:
            self.worked.clear()
            dev.service(now)
        else:
            return
        dev.transmit(now)

    # ------------------------------------------------------------------ host side
    def d2h(self, chan, now, payload=None):
        """The host end delivered a D2H message on ``chan`` (its payload: read from the port, or given)."""
        if payload is None:
            payload = self.h(f"{chan.name.lower()}__payload").value
        f = self.codec[chan].decode(payload)
        if chan is Channel.D2H_REQ:
            key = lambda m: m.op is f["opcode"] and m.uid == f["cqid"] and m.line == f["addr"]
            what = f"{f['opcode'].name} CQID {f['cqid']} line {f['addr']:#x}"
        elif chan is Channel.D2H_RSP:
            key = lambda m: m.op is f["opcode"] and m.uid == f["uqid"]
            what = f"{f['opcode'].name} UQID {f['uqid']}"
        else:
            key = lambda m: m.uid == f["uqid"]
            what = f"data UQID {f['uqid']} bogus {f['bogus']}"
        for attempt in range(2):
            for i, e in enumerate(self.link.flight[True]):
                m = e[1]
                if m.chan is chan and key(m):
                    if chan is Channel.D2H_DATA:
                        if bool(f["bogus"]) != m.bogus or (not m.bogus and f["data"] != m.data):
                            self.fail(f"D2H data UQID {m.uid}: RTL bogus={f['bogus']} data={f['data']:#x}, "
                                      f"model bogus={int(m.bogus)} data={m.data}")
                    self.bench.sysm.deliver(self.d, True, i)
                    self.bench.count_msg()
                    return
            self.shadow.transmit(now)        # a request the shadow queued but had not sent yet
        self.fail(f"the RTL sent {chan.name} {what}, which its shadow did not send; the shadow has "
                  f"{[e[1] for e in self.link.flight[True]]} in flight")

    def h2d_sent(self, entry, release):
        self.h2d_queue[entry[1].chan].append((entry, release))
        self.h2d_idle = False

    def _next_h2d(self, chan, now):
        """The next host message to drive into the RTL link on ``chan``, or None while it must wait:
        each channel is driven in the order the host sent it, and the head waits
          * for its release cycle (the lag the host gave it on purpose, Config.host_data_lag);
          * (a snoop) while an earlier H2D Rsp to its line has not entered the RTL link (the host's order;
            from there the link and the DCOH must keep it by themselves: models/link.py's ordering rule,
            docs/sources.md §1.1);
          * (a GO) while the data the host sent before it for the same CQID (Config.host_data_first) has not
            reached the DCOH: the RTL link gives the two channels no order, and a GO and its data
            offered in the same cycle reach the DCOH GO first, so without this rule the DCOH never takes
            a read's data before its GO (tests/test_system_rtl.py shows it)."""
        q = self.h2d_queue[chan]
        if not q:
            return None
        entry, release = q[0]
        if release > now:
            return None
        if chan is not Channel.H2D_DATA:
            flight = self.link.flight[False]
            msg = entry[1]
            for e in flight:
                if e is entry:
                    break
                if chan is Channel.H2D_REQ and e[1].chan is Channel.H2D_RSP and e[1].line == msg.line \
                        and not any(x is e for x in self.in_rtl[Channel.H2D_RSP]):
                    return None          # an earlier H2D Rsp to its line has not entered the RTL link yet
                if chan is Channel.H2D_RSP and e[1].chan is Channel.H2D_DATA and e[1].uid == msg.uid:
                    return None          # its data went first and has not reached the DCOH yet
        q.popleft()
        return entry

    def _payload(self, entry):
        m = entry[1]
        value = encode_msg(m)
        codec = self.codec[m.chan]
        return value | (m.data << codec.codec.width) if codec.with_data else value

    # ------------------------------------------------------------------ one cycle
    #: the probe message the caches take is a step of :meth:`engine_steps` (else of the cache side)
    probes_in_steps = False

    def engine_steps(self, bits, now):
        """What the DCOH did in this cycle, for the shadow: its ``dispatch``.  True if it dispatched."""
        code = (bits >> _DISPATCH_SHIFT) & 7
        if code:
            if bits & _SCAN_BEFORE:
                self.scan_before(now)
            self.bench.dispatch_count[code] += 1
            self.dispatch(_DISPATCH[code], now, int(self.h("work_line").value) if code == _WORK_CODE else None)
        return bool(code)

    def cycle(self, bits, now, issuing):
        bench = self.bench
        write = bench.write
        h = self.h
        if bits & _ERROR:
            self.fail(self.rtl_errors())
        busy = self.engine_steps(bits, now)
        # H2D sources: a transfer happened at the edge ending this cycle if valid & ready now.  With
        # nothing offered or queued (h2d_idle) every valid is already 0 and there is nothing to do.
        if not self.h2d_idle:
            h2d_cur, h2d_queue = self.h2d_cur, self.h2d_queue
            for chan, ready, payload, valid in self.h2d_ports:
                cur = h2d_cur[chan]
                if cur is not None:
                    if not bits & ready:
                        continue
                    self.entered_link(chan, cur)
                    h2d_cur[chan] = None
                if not h2d_queue[chan]:
                    write(valid, 0)
                    continue
                nxt = self._next_h2d(chan, now)
                if nxt is not None:
                    h2d_cur[chan] = nxt
                    write(payload, self._payload(nxt))
                    write(valid, 1)
                else:
                    write(valid, 0)
            if not any(h2d_queue.values()) and not any(h2d_cur.values()):
                self.h2d_idle = True        # the valids written above (0) are driven from the next edge
        for chan, valid in self.d2h_ports:
            if bits & valid:
                self.d2h(chan, now)
        changed = False
        # cache side
        if self.cmd_rsp is not None and bits & _BIT["cmd_rsp__ready"]:
            self.cmd_rsp = None
            write(h("cmd_rsp__valid"), 0)
        if bits & _BIT["cmd__valid"]:
            c = bench.cmd_codec.decode(int(h("cmd__payload").value))
            self.cmd_rsp = self.bfm.command(c["line"], c["caches"], CmdOp(c["op"]).name)
            dirty, excl, data = self.cmd_rsp
            if bench.broken == "cmd_data" and dirty:
                data ^= 1                  # SIM_BREAK=cmd_data: a corrupted line (the scoreboard must see it)
            write(h("cmd_rsp__payload"), bench.cmd_rsp_codec.encode(dirty=dirty, excl=excl, data=data))
            write(h("cmd_rsp__valid"), 1)
            bench.touch(c["line"])
            changed = True
        if bits & _BIT["cpu_rsp__valid"]:
            c = bench.cpu_rsp_codec.decode(int(h("cpu_rsp__payload").value))
            try:
                op = self.bfm.install(c["cache"], c["line"], _CACHE_STATE[CacheState(c["state"])], c["data"])
            except RuntimeError as e:
                self.fail(str(e))
            self.next_issue[op.k] = now + 1 + bench.rng.randrange(bench.think + 1)
            bench.touch(c["line"])
            changed = True
        if bits & _BIT["probe__valid"] and not self.probes_in_steps:     # the caches take every probe at once
            self.probe_acked(int(h("probe__payload").value), now)
        if self.cpu_cur is not None and bits & _BIT["cpu_req__ready"]:
            self.cpu_cur = None
        # (A probe acknowledged and not yet worked changes neither the RTL's caches nor the shadow's: the
        # engine's WORK of a line does both, so a hit in between reads the same line in both.)
        idle = bool(bits & _BIT["dcoh_idle"]) and not busy and self.cmd_rsp is None \
            and not bits & (_BIT["cmd__valid"] | _BIT["cpu_rsp__valid"])
        # traffic: each idle internal cache starts its next access when its think time is over
        for k in range(bench.cfg.caches):
            if self.bfm.busy[k] is not None or now < self.next_issue[k]:
                continue
            op = self.pending_op[k]
            if op is None:
                if not issuing():
                    continue
                op = bench.next_op(self.d, k)
                if op is None:
                    continue
            if cache_hit(self.bfm.caches[k], op):
                if not idle:
                    self.pending_op[k] = op         # a hit waits for the DCOH to be idle
                    continue
                self.pending_op[k] = None
                self.bfm.access(op)
                self.hit_taken(op, now)
                self.next_issue[k] = now + 1 + bench.rng.randrange(bench.think + 1)
                changed = True
            else:
                self.pending_op[k] = None
                self.bfm.access(op)
                self.cpu_queue.append(op)
        if self.cpu_cur is None and self.cpu_queue:
            op = self.cpu_cur = self.cpu_queue.popleft()
            write(h("cpu_req__payload"), bench.cpu_req_codec.encode(
                kind=CpuKind[op.kind.upper()], cache=op.k, line=op.line, variant=op.variant, data=op.value))
            write(h("cpu_req__valid"), 1)
        elif self.cpu_cur is None:
            write(h("cpu_req__valid"), 0)
        for flit_bit, word, name in self.wires:
            if bits & flit_bit:
                self.flit_seen(name, int(word.value), now)
        # the RTL's caches against the shadow's whenever the DCOH has settled
        settled = idle and self.cpu_cur is None and not self.held
        if settled and (changed or not self.was_idle):
            self.compare_caches()
        self.was_idle = settled
        return changed

    def probe_acked(self, payload, now):
        """The caches took the DCOH's probe message ``payload``: the shadow closes the probe of exactly those
        lines, and works each when the engine does (its WORK of that line)."""
        bench = self.bench
        p = bench.probe_codec.decode(payload)
        block = p["block"]
        blk = bench.cfg.coalesce_block
        lines = {block * blk + i for i in range(blk) if (p["lines"] >> i) & 1}
        if block not in self.shadow.coal.groups or not lines & set(self.shadow.coal.groups[block][1]):
            self.fail(f"the RTL probes block {block:#x} lines {sorted(lines)}, but the shadow has no "
                      f"such probe open (its groups: {self.shadow.coal.groups})")
        work = self.shadow.work
        self.acked.update(line for line in self.shadow.close_probe(block, lines) if line in work)

    def hit_taken(self, op, now):
        """Access ``op`` hit in the RTL's cache (``self.bfm`` has applied it): it must hit in the shadow too."""
        k = op.k
        busy = self.shadow.ops[k]
        if busy is not None or not self.shadow.accept(op, now) or self.shadow.ops[k] is not None:
            self.fail(f"{op!r} hits in the RTL's cache {k} ({self.bfm.caches[k].get(op.line)}) but not "
                      f"in its shadow's ({self.shadow.caches[k].get(op.line)}; its access outstanding: "
                      f"{busy!r})")
        self.bench.hits += 1
        self.bench.touch(op.line)

    def flit_seen(self, wire, word, now):
        """A flit crossed ``wire`` ("up"/"down") in cycle ``now``: to the flit checker (tb/flit_checker.py)."""
        bench = self.bench
        if bench.broken == "flit" and word & 1 == 0 and self.d == 0 and wire == "down":
            bench.broken = None        # SIM_BREAK=flit: one protocol flit's CRC seen wrong, once
            word ^= 1 << 512
        bench.flit_checker.take(now, self.d, wire, word)

    def rtl_errors(self):
        """What the RTL's ``error`` status bit stands for, read from its counters and causes."""
        h = self.h
        why = []
        for end, port in (("device", "link_error_cause"), ("host", "host_link_error_cause")):
            cause = int(h(port).value)
            if cause:
                names = "+".join(c.name for c in LinkErrorCause if cause & c)
                why.append(f"the {end} end's link stopped: {names}")
        for name, what in (("protocol_errors", "DCOH protocol errors"), ("rule_errors", "CRC-good flits rejected")):
            n = int(h(name).value)
            if n:
                why.append(f"{n} {what}")
        return "RTL error: " + ("; ".join(why) or "the error bit is set, but no counter or cause says why")

    def compare_caches(self):
        for k in range(self.bench.cfg.caches):
            if self.bfm.caches[k] != self.shadow.caches[k]:
                self.fail(f"internal cache {k}: RTL {self.bfm.caches[k]}, model {self.shadow.caches[k]}")

    def drained(self):
        return (all(b is None for b in self.bfm.busy) and not self.cpu_queue and self.cpu_cur is None
                and self.cmd_rsp is None and not self.acked and self.held is None
                and not any(self.h2d_queue.values()) and not any(self.h2d_cur.values())
                and not any(self.in_rtl.values()))


class SystemBench:
    show_progress = None             # the progress line: True/False, or None for SIM_PROGRESS=1

    def __init__(self, dut, params, seed, transactions, think=8, flit_monitor=True, trace=None, host=""):
        self.dut, self.params, self.seed, self.transactions = dut, params, seed, transactions
        self.pipelined = bool(params.get("pipelined"))
        self.mon_width = mon_layout(self.pipelined)[1]
        self.commit_count = Counter()       # the pipelined DCOH's commits by port
        p = params["dcoh"]
        self.devices = params["devices"]
        # The shadow: the RTL's parameters (its work table too: the shadow holds a snoop exactly when the
        # RTL's work table is full); links never short of credits (the RTL link has its own)
        self.cfg = Config(devices=self.devices, caches=p["caches"], sf_sets=p["sf_sets"], sf_ways=p["sf_ways"],
                          max_outstanding=p["tracker"], work_entries=p["work"], credits=1023,
                          coalesce_window=p["coalesce_window"],
                          coalesce_block=p["coalesce_block"], starvation_bound=p["starvation_bound"],
                          watchdog=200000).with_overrides(host)
        self.rng = random.Random(seed)
        self.think = think
        self.flit_monitor = flit_monitor
        self.flit_coverage = {}
        # every flit on every wire decoded by the golden unpacker, in a process of its own
        self.flit_checker = self.new_flit_checker() if flit_monitor else None
        self.broken = os.environ.get("SIM_BREAK")     # tests only: break the device side on purpose
        self.sysm = System(self.cfg, timed=False)
        for d in range(len(self.sysm.links)):           # before the device sides take their links
            self.sysm.replace_link(d, HostSendSpy(self.cfg, False, self, d))
        self.workload = Workload(self.cfg, self.rng)
        self.host_rng = random.Random(f"host traffic {seed}")      # as models.system.run
        # a trace: each cache replays its accesses in order instead of the random workload
        self.trace = None
        if trace is not None:
            self.trace = {}
            for d, k, kind, line, value, variant in trace:
                if not (0 <= d < self.devices and 0 <= k < self.cfg.caches):
                    raise ValueError(f"trace access {kind} line {line:#x} names dev{d} cache {k}, but the "
                                     f"system has {self.devices} devices x {self.cfg.caches} caches")
                self.trace.setdefault((d, k), deque()).append(CpuOp(kind, k, line, value, variant))
        core = DCOH(**p)
        member = lambda name: core.signature.members[name].signature.members["payload"].shape
        self.cpu_req_codec = StructCodec(member("cpu_req"))
        self.cpu_rsp_codec = StructCodec(member("cpu_rsp"))
        self.cmd_codec = StructCodec(member("cmd"))
        self.cmd_rsp_codec = StructCodec(member("cmd_rsp"))
        self.probe_codec = StructCodec(member("probe"))
        self.writes = {}
        self.driven = {}
        self.now = 0
        self.messages = 0
        self.hits = 0
        self.done = 0
        self.latency = {}
        self.dispatch_count = [0] * 8
        self.snoops_while_cmd_owed = 0     # batched testbench: snoops the DCOH took while a cache owed it a
                                           # cmd's answer (the DCOH's snoop side path, docs/dcoh.md)
        self.snoops_behind_rsp = 0         # snoops that entered the RTL link behind an H2D Rsp to their line
                                           # still in it (DeviceSide.entered_link)
        self._last_done, self._last_done_at = 0, 0      # for watch()
        self.touched = set()
        self.devs = [self.side_for(d) for d in range(self.devices)]

    def side_for(self, d):
        """Device ``d``'s side (tb/system_batch.py has its own)."""
        if self.pipelined:                  # the pipelined DCOH: its shadow follows the commit ports
            from tb.system_pipe import PipelinedSide
            return PipelinedSide(self, d)
        return DeviceSide(self, d)

    def new_flit_checker(self):
        """The flit checker's process (tb/flit_checker.py); this testbench hands it flits one by one."""
        return FlitChecker()

    def next_op(self, d, k):
        if self.trace is None:
            if self.cfg.host_traffic and self.host_rng.random() < self.cfg.host_traffic:
                self.sysm.host.host_access(*self.workload.host_op(self.host_rng), self.sysm.now)
            return self.workload.next_op(k)
        q = self.trace.get((d, k))
        return q.popleft() if q else None

    def issuing(self):
        if self.trace is not None:
            return any(self.trace.values())
        return self.done < self.transactions

    def write(self, handle, value):
        """Drive ``handle`` from the next clock edge on; a value already driven is not written again
        (each write is a VPI call, and most cycles change nothing)."""
        if self.driven.get(handle) != value:
            self.driven[handle] = value
            self.writes[handle] = value

    def touch(self, line):
        self.touched.add(line)

    def count_msg(self):
        self.messages += 1

    def check_rtl_lines(self):
        """SWMR and data value over the RTL's observable state: every BFM cache of every device."""
        ghost = self.sysm.checker
        for line in self.touched:
            writers, holders = [], []
            for dev in self.devs:
                for k, cache in enumerate(dev.bfm.caches):
                    c = cache.get(line)
                    if c is None:
                        continue
                    who = f"dev{dev.d} cache {k} ({c[0].name})"
                    (writers if c[0].perm is Perm.READWRITE else holders).append(who)
                    # the shadow serializes a device's own write when the RTL engine takes the event;
                    # the RTL updates that device's other copies a few cycles later: values are
                    # compared once the device has settled (SWMR holds every cycle regardless)
                    if dev.was_idle and c[1] != ghost.value(line):
                        raise SystemMismatch(f"seed {self.seed} cycle {self.now}: data value: RTL {who} holds "
                                             f"{c[1]} in line {line:#x}; last write serialized was "
                                             f"{ghost.value(line)}")
            if len(writers) > 1 or (writers and holders):
                raise SystemMismatch(f"seed {self.seed} cycle {self.now}: SWMR on line {line:#x} in the RTL: "
                                     f"writers {writers}, readers {holders}")
        self.touched.clear()

    async def start(self):
        """Drive every input to its idle value, start the clock, and reset for 3 cycles."""
        dut = self.dut
        for handle, value in self.writes.items():      # every input driven before reset
            handle.value = value
        self.writes.clear()
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst.value = 0

    async def run(self, max_cycles=None):
        """Reset, then simulate until the workload is done and the system drained; returns the summary.
        ``SIM_PROGRESS=1`` (tb/run_system.py sets it for a single run) shows a progress line."""
        await self.start()
        total = self.transactions or sum(len(q) for q in (self.trace or {}).values())
        show = self.show_progress if self.show_progress is not None else os.environ.get("SIM_PROGRESS") == "1"
        progress = Progress(total, f"seed {self.seed}", enabled=show)
        try:
            await self._run(max_cycles, progress)
            if self.flit_checker is not None:
                self.flit_coverage.update(self.flit_checker.close())
        except FlitRuleBroken as e:
            raise SystemMismatch(f"seed {self.seed} {e} (found by the flit checker at cycle {self.now})") from None
        finally:
            progress.close()
            if self.flit_checker is not None:
                self.flit_checker.kill()
        return self.summary()

    async def _run(self, max_cycles, progress):
        dut = self.dut
        sysm = self.sysm
        devs = self.devs
        issuing = self.issuing
        drained_for = 0
        t0 = time.perf_counter()
        mon_h = dut.mon
        width = self.mon_width
        mask = (1 << width) - 1
        while True:
            await RisingEdge(dut.clk)
            for handle, value in self.writes.items():
                handle.value = value
            self.writes.clear()
            await ReadOnly()
            self.now = now = self.now + 1
            sysm.now = now
            try:
                mon = int(mon_h.value)
            except ValueError:
                bad = str(mon_h.value)[::-1]
                names = [f"dev{i // width} bit {i % width}" for i, c in enumerate(bad) if c not in "01"]
                raise SystemMismatch(f"seed {self.seed} cycle {self.now}: undefined (X/Z) status bits: "
                                     f"{names}") from None
            for dev in devs:
                dev.cycle((mon >> (dev.d * width)) & mask, now, issuing)
            self.after_cycle(now)
            self.watch(now, progress)
            if max_cycles is not None and now >= max_cycles:
                break
            if not issuing():
                if all(d.drained() for d in devs) and sysm.quiescent() and \
                        all(((mon >> (d.d * width)) & _BIT["dcoh_idle"]) for d in devs):
                    drained_for += 1
                    if drained_for >= 100:       # nothing more may come out
                        break
                else:
                    drained_for = 0
        self.wall = time.perf_counter() - t0
        self.final_checks()

    def watch(self, now, progress):
        """Progress shown when a transaction finished; forward progress: none for Config.watchdog cycles fails."""
        if self.done != self._last_done:
            self._last_done, self._last_done_at = self.done, now
            progress.update(self.done, now)
        elif now - self._last_done_at > self.cfg.watchdog:
            raise SystemMismatch(f"seed {self.seed} cycle {now}: no transaction finished for "
                                 f"{self.cfg.watchdog} cycles; outstanding: {self.sysm.outstanding()[:8]}")

    def after_cycle(self, now):
        """After every cycle in which something happened: the golden model's invariants on what the cycle
        touched, SWMR and data value over the RTL's caches, the finished accesses' latencies."""
        sysm = self.sysm
        try:
            if sysm.checker.touched:
                sysm.check_step()
        except (InvariantViolation, AssertionError) as e:
            raise SystemMismatch(f"seed {self.seed} cycle {now}: golden-model invariant: {e}") from None
        if self.touched:
            self.check_rtl_lines()
        for dev in sysm.devices:
            if dev.done:
                for op, lat in dev.done:
                    self.latency.setdefault(op.name, []).append(lat)
                self.done += len(dev.done)
                dev.done.clear()

    def final_checks(self):
        """At the end: every cache equals its shadow's, nothing is left in flight, ``System.check_all``."""
        for dev in self.devs:
            dev.compare_caches()
            if any(dev.link.flight.values()):
                raise SystemMismatch(f"seed {self.seed}: dev{dev.d}: model messages never sent or "
                                     f"taken by the RTL: {dev.link.flight}")
        try:
            self.sysm.check_all()
        except (InvariantViolation, AssertionError) as e:
            raise SystemMismatch(f"seed {self.seed} end: golden-model invariant: {e}") from None

    def summary(self):
        coverage = state_event_coverage(self.sysm.devices)
        return {
            "engine": "rtl",
            "devices": self.devices,
            "transactions": self.done,
            "violations": 0,
            "seed": self.seed,
            "cycles": self.now,
            "messages": self.messages,
            "cache_hits": self.hits,
            "wall_s": round(self.wall, 3),
            "sim_cycles_per_s": round(self.now / self.wall) if self.wall else None,
            "latency_cycles": {op: latency_entry(Counter(v)) for op, v in sorted(self.latency.items())},
            "dispatch": {Dispatch(i).name: n for i, n in enumerate(self.dispatch_count) if i},
            "commits": dict(sorted(self.commit_count.items())),       # the pipelined DCOH's
            "snoops_while_cmd_owed": self.snoops_while_cmd_owed,
            "snoops_behind_rsp": self.snoops_behind_rsp,
            "coverage": {"state_event": coverage,
                         "flits": dict(sorted(self.flit_coverage.items())),
                         "closure": closure_report(coverage, self.flit_coverage)},
            "host": {"config": {k: v for k, v in self.cfg.as_dict().items() if k.startswith("host_")},
                     **self.sysm.host.counts},
            "coalescing": {"invalidations_in": sum(d.coal.msgs_in for d in self.sysm.devices),
                           "messages_out": sum(d.coal.msgs_out for d in self.sysm.devices)},
            "counters": dict(sorted(self.sysm.stats.items())),     # the shadows' (models/system.py's)
            "rtl": self.params,
        }


def _finish(bench, summary, seed, out):
    if "simulator" not in summary:
        summary["simulator"] = cocotb.SIM_NAME.lower().split()[0] if getattr(cocotb, "SIM_NAME", None) else None
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=2)


def _write_failure(summary, out):
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=2)
    text = f"FAILED: {summary['error']}\nreproduce with: make sim SEED={summary['seed']}"
    if hasattr(cocotb, "log"):               # inside a cocotb simulation
        cocotb.log.error(text)
    else:                                    # the native driver (tb/system_batch.py)
        print(text, file=sys.stderr, flush=True)


def _failed(bench, e, seed, out):
    _write_failure({"engine": "rtl", "devices": bench.devices, "transactions": bench.done, "violations": 1,
                    "seed": seed, "cycles": bench.now, "error": str(e), "latency_cycles": {}}, out)


def _settings():
    with open(os.environ["SIM_PARAMS"]) as f:
        params = json.load(f)
    return (params, env_seed(1), int(os.environ.get("SIM_TRANSACTIONS", "2000")),
            int(os.environ.get("SIM_THINK", "8")), os.environ.get("SIM_FLIT_MONITOR", "1") == "1",
            os.environ.get("SIM_OUT"), os.environ.get("SIM_HOST", ""))


async def run_bench(bench, seed, out):
    """``bench.run()``, the summary written to ``out`` (or the failure, naming the seed); ``SIM_PROFILE=<file>``
    writes a cProfile of the testbench's Python there.  Returns the summary."""
    profile = os.environ.get("SIM_PROFILE")
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    try:
        summary = await bench.run()
    except SystemMismatch as e:
        _failed(bench, e, seed, out)
        raise
    finally:
        if profile:
            prof.disable()
            prof.dump_stats(profile)
    _finish(bench, summary, seed, out)
    return summary


@cocotb.skipif(bool(os.environ.get("SIM_TRACE")), reason="a trace run: system_trace does the work")
@cocotb.test()
async def system_random(dut):
    """Seeded random traffic from every internal cache until SIM_TRANSACTIONS requests completed."""
    params, seed, transactions, think, flit_monitor, out, host = _settings()
    bench = SystemBench(dut, params, seed, transactions, think, flit_monitor, host=host)
    summary = await run_bench(bench, seed, out)
    cov = summary["coverage"]
    cocotb.log.info(f"seed {seed}: {summary['transactions']} transactions, {summary['cycles']} cycles, "
                    f"{summary['sim_cycles_per_s']} cycles/s; {len(cov['state_event'])} (state, event) pairs, "
                    f"{len(cov['flits'])} flit kinds/slot formats")


@cocotb.skipif(not os.environ.get("SIM_TRACE"), reason="no trace to replay (SIM_TRACE is empty)")
@cocotb.test()
async def system_trace(dut):
    """Replays the trace in SIM_TRACE (JSON: {"name", "ops": [[dev, cache, kind, line, value, variant],
    ...]}): each cache issues its accesses in order, with the RTL's timing.  One trace per simulation:
    a reset does not clear the snoop filter's memory (see docs/testbench.md)."""
    path = os.environ["SIM_TRACE"]
    params, seed, _, think, flit_monitor, out, host = _settings()
    try:                                         # a malformed trace: say so in the summary too
        with open(path) as f:
            t = json.load(f)
        bench = SystemBench(dut, params, seed, 0, think, flit_monitor, trace=t["ops"], host=host)
    except (OSError, ValueError, KeyError, TypeError) as e:
        _write_failure({"engine": "rtl", "violations": 1, "seed": seed, "error": f"trace {path}: {e!r}"}, out)
        raise
    try:
        summary = await bench.run()
    except SystemMismatch as e:
        _failed(bench, f"trace {t['name']}: {e}", seed, out)
        raise
    summary["trace"] = t["name"]
    _finish(bench, summary, seed, out)
