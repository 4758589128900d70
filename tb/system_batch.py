"""The batched system testbench: the checks of tb/system_tb.py, with Python woken every K cycles.

The devices: ``batched_unit`` (tb/system_top.py ``build_batched_unit``: a ``batched_device`` of
tb/batched_device.py and its recorder), Verilated once and instantiated N times by the native driver
(tb/native.py), which Python reads and writes through memory, not through a simulator interface.  Each
device's internal caches and their traffic source run in RTL (tb/rtl_caches.py), the host's messages wait
in RTL queues until their cycle, and everything the checks need is recorded per cycle in RTL
(tb/stamped.py).  Python looks every K cycles (``batch``, default 9), reads the records of all devices,
works through them in cycle order (device 0 first within a cycle, as tb/system_tb.py does), and pushes
what the host sent meanwhile and the next accesses.

The host answers ``max(K + 1, Config.host_latency)`` cycles after the D2H message it answers (the
per-cycle testbench answers the next cycle): a reply computed at a look is then never later than its
cycle, so the timing does not depend on K (``batch.late`` in the summary counts replies that were late
all the same: a burst above the queues' lanes).  ``pipeline``: the devices run their next K cycles on a
thread of the driver while Python works through the last K; the answers then go in a look later, so the
host answers ``max(2K + 1, Config.host_latency)`` cycles after a message (the same 10 cycles for K up to 4,
and the same run).  The host's deliberate lags (Config.host_data_lag) come on top, as in
tb/system_tb.py, and so do its orders: a snoop goes only after every earlier H2D Rsp to its line has
reached the DCOH, a GO only after the data the host sent before it for the same CQID (gates of
tb/stamped.py ReleaseQueue, counted by the RTL).

Checked, as in tb/system_tb.py: every D2H message against the shadow's; every H2D message the DCOH takes
is the one the host sent; the shadow takes the DCOH's events in its dispatch order (the pipelined DCOH,
``--pipelined-dcoh``: in the order of its intake and commit ports, tb/system_pipe.py's
:class:`~tb.system_pipe.CommitFollower`, read from the records); after every event
the golden model's invariants; SWMR and data value over the RTL's caches whenever one changes (on a
mirror of them, :class:`tb.cache_bfm.CacheBFM`, that follows every command, install and hit the RTL
reports, and every answer the RTL's caches give is checked against it); the caches against the shadow's
whenever a device settles; the flit monitor (tb/flit_checker.py); the RTL's error bit, its caches' and
its queues' errors; forward progress; everything drained at the end.  A failure names the seed and the
cycle of the record that showed it.

Run: :func:`run` (tb/run_system.py calls it; ``SIM_PROFILE=<file>`` writes a cProfile of the
testbench).  ``SIM_BREAK`` (tests only): ``flit`` as in tb/system_tb.py; ``mirror`` gives the mirror of
the RTL's caches a wrong line once, which the next check of an answer of the RTL's caches or of the
settled caches must catch; ``freed`` (the pipelined DCOH) hides one completion from the shadow, whose
next step on that line or CQID must then disagree with the RTL.

Accesses: each internal cache draws them from a generator of its own, so that no draw depends on when a
look happens, and issues a quota of them, at first ceil(N / (devices x caches)) for N =
``transactions``; since N counts the requests the DCOHs complete, the quota is estimated again from the
requests per access while the run goes (:meth:`BatchBench._requota`).  The run is the same for any K
(tests/test_system_batch.py checks K = 2, 8 and a pipelined K = 4 give the same summary) as long as no
queue runs dry (OP_DEPTH accesses per cache, tb/batched_device.py).
"""

import math
import random
import time
from collections import deque

from amaranth.hdl import Shape
from amaranth.lib import data

from cxl.messages import Channel
from hdl.dcoh.dcoh import CmdOp, CpuKind, Dispatch
from hdl.device import PIPELINED_EVENTS
from hdl.link.ports import channel_shape
from models.dcoh import cache_hit
from tb.batched_device import (D2H_CHANNELS, H2D_CHANNELS, DEPTH, LANES, OP_DEPTH, OP_LANES, VALUE_BITS, WINDOW,
                               BatchedDevice)
from tb.cache_bfm import CacheBFM
from tb.flit_checker import FlitChecker
from tb.rtl_caches import CacheErrors, TrafficOp
from tb.stamped import STAMP_BITS, ReleaseQueue
from tb.system_top import UNIT_RESET_CYCLES
from tb.system_pipe import CommitFollower
from tb.system_tb import DeviceSide, SystemBench, SystemMismatch, _CACHE_STATE, _DISPATCH, run_bench
from tb.vip import ChannelCodec, StructCodec

_SNOOP_CODE = Dispatch.SNOOP.value
_WORK_CODE = Dispatch.WORK.value

__all__ = ["BatchBench", "run", "SIMULATOR"]

# accesses before a cache's quota at which the quota is estimated again (BatchBench._requota): more than a
# cache is ever fed ahead of what it started
QUOTA_MARGIN = 2 * OP_DEPTH
_KIND = {k.name.lower(): k.value for k in CpuKind}


class _Lanes:
    """Packs up to LANES entries (cycle, gate, payload) into one push of a ReleaseQueue of ``payload``."""

    def __init__(self, payload, lanes=LANES):
        entry = ReleaseQueue(payload, lanes=lanes).entry
        self.codec = StructCodec(entry)
        self.bits = 1 + entry.size           # a lane: valid, then the entry

    def pack(self, entries):
        v = 0
        for i, (at, gate, payload) in enumerate(entries):
            v |= (1 | self.codec.encode(at=at, gate=gate, payload=payload) << 1) << (i * self.bits)
        return v


class BatchedSide(DeviceSide):
    """One batched RTL device: its shadow, the mirror of its RTL caches, what it has pushed and read."""

    def __init__(self, bench, d):
        self.bench, self.d = bench, d
        dut = bench.dut
        self.h = lambda name: getattr(dut, f"d{d}_{name}")
        self.shadow = bench.sysm.devices[d]
        self.shadow.defer_service = True                  # service() at the engine's SCAN (DeviceSide.dispatch)
        self.link = bench.sysm.links[d]
        self.bfm = CacheBFM(bench.cfg.caches)             # the mirror of the RTL's caches
        self.codec = {c: ChannelCodec(c, Shape.cast(channel_shape(c)).width, f"d{d}_{c.name.lower()}") for c in H2D_CHANNELS + D2H_CHANNELS}
        self.pending = {c: deque() for c in H2D_CHANNELS}  # (entry, at, gate) not pushed yet
        self.queued = {c: deque() for c in H2D_CHANNELS}   # pushed, not yet taken by the RTL link
        self.in_rtl = {c: deque() for c in H2D_CHANNELS}   # taken by the RTL link, not yet by the DCOH
        self.sent = {c: 0 for c in H2D_CHANNELS}           # messages given to the queue so far, per channel
        self.last_rsp = {}                                 # line -> number of the last H2D Rsp to it
        self.last_data = {}                                # CQID -> number of the last H2D Data for it
        self.seq = {c: 0 for c in H2D_CHANNELS}
        self.ops_seq = 0
        self.pop_seq = 0
        self.held = None
        self.cpu_cur = None
        self.acked = set()                                 # as DeviceSide's: probes' lines not yet worked
        self.worked = set()
        self.recent = deque(maxlen=12)                     # as DeviceSide's: the last dispatches
        self.fed = [deque() for _ in range(bench.cfg.caches)]   # accesses pushed, not started
        self.to_send = 0                                   # misses not yet taken by the DCOH
        self.owed = deque()                                # the answers the RTL's caches owe (mirror's)
        self.was_idle = False
        self.poll_h = self.h("poll")
        self.now_h = self.h("now")
        self.rec_h = [self.h(f"rec{i}") for i in range(bench.window)]
        self.overflow_h = self.h("rec_overflow")
        self.push_h = {c: self.h(f"{c.name.lower()}_push") for c in H2D_CHANNELS}
        self.seq_h = {c: self.h(f"{c.name.lower()}_seq") for c in H2D_CHANNELS}
        self.ops_h, self.ops_seq_h = self.h("ops_push"), self.h("ops_seq")
        self.pop_h, self.pop_seq_h = self.h("rec_pop"), self.h("rec_pop_seq")
        self.status = None

    # ------------------------------------------------------------------ host -> queues
    def h2d_sent(self, entry, release):
        m = entry[1]
        c = m.chan
        self.sent[c] += 1
        gate = 0
        if c is Channel.H2D_REQ:
            gate = self.last_rsp.get(m.line, 0)
        elif c is Channel.H2D_RSP:
            gate = self.last_data.get(m.uid, 0)
            self.last_rsp[m.line] = self.sent[c]
        else:
            self.last_data[m.uid] = self.sent[c]
        self.pending[c].append((entry, release + self.bench.host_delay, gate))

    def push(self, now):
        """Give the RTL queues what the host sent (up to LANES per queue per look) and the next accesses;
        returns True if something is left for the next look."""
        bench = self.bench
        status = self.status
        left = False
        for c, (off, mask) in bench.space_fields:
            p = self.pending[c]
            if not p:
                continue
            n = min(len(p), LANES, (status >> off) & mask)
            if not n:
                left = True
                continue
            entries = []
            for _ in range(n):
                entry, at, gate = p.popleft()
                if at <= now:
                    bench.late += 1
                entries.append((at, gate, self._payload(entry)))
                self.queued[c].append(entry)
            self.push_h[c].value = bench.lanes[c].pack(entries)
            self.seq[c] ^= 1
            self.seq_h[c].value = self.seq[c]
            left |= bool(p)
        # accesses: at most OP_DEPTH per cache fed and not started (its RTL FIFO), so the shared queue never blocks
        entries = []
        off, mask = bench.ops_space_field
        free = min(OP_LANES, (status >> off) & mask)
        wanting = [k for k in range(bench.cfg.caches) if len(self.fed[k]) < OP_DEPTH]
        while wanting and len(entries) < free:     # one per cache in turn: every cache gets its share
            for k in list(wanting):
                nxt = bench.next_access(self.d, k) if len(self.fed[k]) < OP_DEPTH else None
                if nxt is None:
                    wanting.remove(k)
                    continue
                op, think = nxt
                entries.append((0, 0, bench.op_codec.encode(cache=k, kind=_KIND[op.kind], line=op.line, value=op.value,
                                                           variant=op.variant, think=think)))
                self.fed[k].append(op)
                if len(entries) == free:
                    break
        if entries:
            self.ops_h.value = bench.op_lanes.pack(entries)
            self.ops_seq ^= 1
            self.ops_seq_h.value = self.ops_seq
        return left

    # ------------------------------------------------------------------ records -> checks
    def record(self, t, v):
        """Everything device ``d`` did in cycle ``t`` (the record ``v``), in tb/system_tb.py cycle()'s order.
        Returns whether it was more than flits (a record of flits alone changes nothing the checks after
        a cycle look at: no model state, no RTL cache)."""
        bench = self.bench
        f = bench.field
        bit = bench.bit                      # the record's one-bit fields, as masks of the stamped word
        if not v & bench.event_mask:          # flits and quiet only: most records
            if v & bench.flit_valid_mask:
                self._flits(t, v)
            settled = bool(v & bit["quiet"]) and not self.to_send and not self.held
            if settled and not self.was_idle:         # _settle(), inline: the common case
                self.compare_caches()
            self.was_idle = settled
            return False
        if v & bit["error"]:
            self.fail(self.rtl_errors())
        if v & bit["cpu_req_valid"]:
            k = f(v, "cpu_req_cache")
            self.cpu_cur = self.bfm.busy[k]
            if self.cpu_cur is None:
                self.fail(f"the DCOH took a cpu_req of cache {k}, whose RTL cache waits on nothing")
            self.to_send -= 1
        self.engine_record(t, v)
        self.cpu_cur = None
        taken = f(v, "h2d_taken")
        if taken:
            for i, c in enumerate(H2D_CHANNELS):
                if (taken >> i) & 1:
                    self.entered_link(c, self.queued[c].popleft())
        for c, valid, name in (bench.d2h_fields if v & bench.d2h_mask else ()):
            if v & valid:
                payload = f(v, name)
                if c is Channel.D2H_DATA:           # the header and the line's low bits (tb/batched_device.py)
                    p = bench.line_codec["d2h_data"].decode(payload)
                    self._narrow(p, "D2H data")
                    payload = p["hdr"] | p["data"] << bench.d2h_hdr_bits
                self.d2h(c, t, payload)
        # the caches' side: commands, their answers, installs, probes taken (most records have none)
        changed = self._cache_events(t, v) if v & bench.cache_side_mask else False
        hit, miss = (f(v, "hit"), f(v, "miss")) if v & bench.hitmiss_mask else (0, 0)
        for k in (range(bench.cfg.caches) if hit | miss else ()):
            if (hit >> k) & 1 or (miss >> k) & 1:
                if not self.fed[k]:
                    self.fail(f"RTL cache {k} started an access that was never fed")
                op = self.fed[k].popleft()
                bench.access_started(t, self.d, k)
                is_hit = bool((hit >> k) & 1)
                if cache_hit(self.bfm.caches[k], op) != is_hit:
                    self.fail(f"RTL cache {k} {'hit' if is_hit else 'missed'} {op!r}; its mirror holds "
                              f"{self.bfm.caches[k].get(op.line)}")
                self.bfm.access(op)
                if is_hit:
                    self.hit_taken(op, t)
                    changed = True
                else:
                    self.to_send += 1
        if v & bench.flit_valid_mask:
            self._flits(t, v)
        bench.last_event = t                 # a message, a dispatch or a cache event: not only flits
        self._settle(bool(v & bit["quiet"]), changed)
        return True

    def engine_record(self, t, v):
        """What the DCOH did in record ``v``, for the shadow: its ``dispatch`` (and the SCAN before it)."""
        bench = self.bench
        f = bench.field
        code = f(v, "dispatch")
        if code:
            if v & bench.bit["scan_before"]:
                self.scan_before(t)
            bench.dispatch_count[code] += 1
            if code == _SNOOP_CODE and self.owed:     # the engine waits for that answer: the side path took it
                bench.snoops_while_cmd_owed += 1
            if code == _WORK_CODE:
                line = bench.line_codec["work_line"].decode(f(v, "work_line"))
                self._narrow(line, "the WORK line")
                self.dispatch(_DISPATCH[code], t, line["data"])
            else:
                self.dispatch(_DISPATCH[code], t)

    def _cache_events(self, t, v):
        """The caches' side of record ``v``: a cmd's answer (checked against the mirror), a cmd, an install,
        a probe taken.  Returns whether an RTL cache changed."""
        bench = self.bench
        f = bench.field
        bit = bench.bit
        changed = False
        if v & bit["cmd_rsp_valid"]:
            got = bench.line_codec["cmd_rsp"].decode(f(v, "cmd_rsp"))
            self._narrow(got, "a cmd's answer")
            want = self.owed.popleft() if self.owed else None
            if want is None or (got["dirty"], got["excl"], got["data"]) != want:
                self.fail(f"the RTL's caches answered a cmd with dirty={got['dirty']} excl={got['excl']} "
                          f"data={got['data']:#x}; their mirror says {want}")
        if v & bit["cmd_valid"]:
            c = bench.cmd_codec.decode(f(v, "cmd"))
            self.owed.append(self.bfm.command(c["line"], c["caches"], CmdOp(c["op"]).name))
            bench.touch(c["line"])
            changed = True
        if v & bit["cpu_rsp_valid"]:
            c = bench.line_codec["cpu_rsp"].decode(f(v, "cpu_rsp"))
            self._narrow(c, "cpu_rsp")
            try:
                self.bfm.install(c["cache"], c["line"], _CACHE_STATE[c["state"]], c["data"])
            except RuntimeError as e:
                self.fail(str(e))
            if bench.broken == "mirror" and c["state"].name in ("S", "E"):
                bench.broken = None          # SIM_BREAK=mirror: the mirror takes a wrong line, once
                self.bfm.caches[c["cache"]][c["line"]][1] ^= 1
            bench.touch(c["line"])
            changed = True
        if v & bit["probe_valid"] and not self.probes_in_steps:
            self.probe_acked(f(v, "probe"), t)
        return changed

    def _narrow(self, fields, what):
        if fields["wide"]:
            self.fail(f"{what} carries a line with bits above the low {VALUE_BITS} set; every line the model "
                      f"writes is below 2^{VALUE_BITS}")

    def _flits(self, t, v):
        """Record ``v`` holds a flit: the whole record goes to the flit checker, which cuts the flits out."""
        bench = self.bench
        if bench.broken == "flit":           # SIM_BREAK=flit: flit_seen changes one flit on its way
            for wire, valid, (off, mask) in bench.flit_fields:
                if v & valid:
                    self.flit_seen(wire, (v >> off) & mask, t)
            return
        bench.flit_checker.take_record(t, self.d, v)

    def _settle(self, quiet, changed):
        """The caches against the shadow's whenever the device has settled (tb/system_tb.py cycle())."""
        settled = quiet and not self.to_send and not self.held
        if settled and (changed or not self.was_idle):
            self.compare_caches()
        self.was_idle = settled

    def rtl_errors(self):
        self.bench.dut.wait()                # the counters are read with the devices standing still
        why = [super().rtl_errors().removeprefix("RTL error: ")]
        errs = int(self.h("cache_errors").value)
        if errs:
            names = [n for n, (off, _) in self.bench.cache_err_fields if (errs >> off) & 1]
            why.append(f"the RTL's caches: {'+'.join(names)}")
        ov = int(self.h("overflows").value)
        if ov:
            names = [n for i, n in enumerate(("ops", "h2d_req", "h2d_rsp", "h2d_data")) if (ov >> i) & 1]
            why.append(f"queue overflow: {'+'.join(names)}")
        return "RTL error: " + "; ".join(why)

    def drained(self):
        return (all(b is None for b in self.bfm.busy) and not any(self.fed) and not self.to_send and
                not self.owed and not self.acked and self.held is None and
                not any(self.pending.values()) and not any(self.queued.values()) and not any(self.in_rtl.values()))


class BatchedPipelinedSide(CommitFollower, BatchedSide):
    """A batched device with the pipelined DCOH: its shadow follows the commit ports in the records
    (tb/system_pipe.py :class:`CommitFollower`)."""

    def __init__(self, bench, d):
        super().__init__(bench, d)
        self.follow_init()

    def engine_record(self, t, v):
        bench = self.bench
        if self.cpu_cur is not None and v & bench.bit["cpu_req_valid"]:
            self.take_access(t)
        if v & bench.steps_mask:
            f = bench.field
            get = lambda name: f(v, name)       # noqa: E731
            if bench.broken == "freed" and get("freed_valid"):
                bench.broken = None             # SIM_BREAK=freed: the shadow misses one completion
                get = lambda name: 0 if name == "freed_valid" else f(v, name)   # noqa: E731
            self.follow_commits(get, t)


class BatchBench(SystemBench):

    def __init__(self, dut, params, seed, transactions, think=8, flit_monitor=True, trace=None, host="", batch=8,
                 pipeline=False):
        if batch < 1:
            raise ValueError(f"batch={batch}: Python must look every K >= 1 cycles")
        p = params["dcoh"]
        dev = BatchedDevice(dcoh=p, link=params["link"], pipelined=bool(params.get("pipelined")))   # its layouts
        self.window = WINDOW
        self.batch = batch
        self.late = 0
        # a record's fields, by shifts from the stamped word (the cycle is its low STAMP_BITS)
        self._fields = {name: (STAMP_BITS + f.offset, (1 << f.width) - 1) for name, f in dev.layout}
        self.bit = {name: 1 << off for name, (off, mask) in self._fields.items() if mask == 1}
        self.flit_fields = [(w, self.bit[f"{w}_valid"], self._fields[w]) for w in ("up", "down")]
        super().__init__(dut, params, seed, transactions, think, flit_monitor, trace, host)
        # records with a flit go to the flit checker whole (none when there is no checker)
        self.flit_valid_mask = sum(valid for _, valid, _ in self.flit_fields) if self.flit_checker else 0
        # the host's answer to a message of cycle t is pushed at the first look after t (K cycles later at
        # most), or, pipelined, at the look after that one (2K): it is due no earlier than that
        self.pipeline = pipeline
        self.host_delay = max((2 * batch if pipeline else batch) + 1, self.cfg.host_latency)
        # Accesses are drawn ahead of time, when a look tops up the queues: so that the run does not depend
        # on K, each internal cache draws from a generator of its own (the layouts stay the workload's),
        # issues a quota of its own, and the host's own accesses are drawn when a device's access starts.
        caches = self.cfg.caches
        self.quota = math.ceil(transactions / (self.devices * caches)) if trace is None else 0
        self.started = [[0] * caches for _ in range(self.devices)]   # accesses each RTL cache started
        self.next_check = self.quota // 2    # the quota is estimated again when a cache has started this many
        self.issued = [[0] * caches for _ in range(self.devices)]
        self.op_rng = [[random.Random(f"{seed} accesses {d} {k}") for k in range(caches)] for d in range(self.devices)]
        self.last_event = 0
        self.d2h_fields = [(c, self.bit[f"{c.name.lower()}_valid"], c.name.lower()) for c in D2H_CHANNELS]
        # groups of fields record() tests at once before it looks at each
        self.d2h_mask = sum(valid for _, valid, _ in self.d2h_fields)
        self.cache_side_mask = sum(self.bit[f"{n}_valid"] for n in ("cmd_rsp", "cmd", "cpu_rsp", "probe"))
        self.hitmiss_mask = sum(mask << off for off, mask in (self._fields["hit"], self._fields["miss"]))
        # the fields that make a record more than flits and quiet: the strobes only (a payload field
        # holds whatever its port carries while not valid, so it says nothing about an event)
        strobes = [n for n in self._fields if n.endswith("_valid") and n not in ("up_valid", "down_valid")]
        # what the DCOH did: the dispatch, or the pipelined DCOH's intake and commits (with the probe taken,
        # one of its steps): a record with none of these leaves the shadow alone
        steps = PIPELINED_EVENTS if self.pipelined else ("dispatch",)
        self.steps_mask = self._mask(*steps, *(("probe_valid",) if self.pipelined else ()))
        self.event_mask = self._mask("h2d_taken", "hit", "miss", "error", *strobes, *steps)
        self.lanes = {c: _Lanes(channel_shape(c)) for c in H2D_CHANNELS}
        ops = TrafficOp(p["caches"], dev.linked.dcoh.addr_width)
        self.op_codec = StructCodec(ops)
        self.op_lanes = _Lanes(ops, OP_LANES)
        self.status_codec = StructCodec(dev.status_layout)
        # the status fields push() reads at every look, by shift and mask
        status_fields = {name: (f.offset, (1 << f.width) - 1) for name, f in dev.status_layout}
        self.space_fields = [(c, status_fields[f"{c.name.lower()}_space"]) for c in H2D_CHANNELS]
        self.ops_space_field = status_fields["ops_space"]
        # the records' lines: low VALUE_BITS and a "wide" bit (tb/batched_device.py)
        self.line_codec = {n: StructCodec(dev.layout[n].shape)
                           for n in ("d2h_data", "cmd_rsp", "cpu_rsp", "work_line") if n in self._fields}
        self.d2h_hdr_bits = data.Layout.cast(dev.layout["d2h_data"].shape)["hdr"].width
        self.status_bits = dev.status_layout.size
        self.status_mask = (1 << self.status_bits) - 1
        self.cache_err_fields = [(n, (f.offset, 1)) for n, f in CacheErrors()]

    def _mask(self, *names):
        """The bits of these record fields in a stamped record (a name may come twice)."""
        bits = 0
        for n in names:
            off, mask = self._fields[n]
            bits |= mask << off
        return bits

    def side_for(self, d):
        return (BatchedPipelinedSide if self.pipelined else BatchedSide)(self, d)

    def new_flit_checker(self):
        return FlitChecker(record_fields=[(w, valid, off, mask) for w, valid, (off, mask) in self.flit_fields])

    def next_access(self, d, k):
        """The next access of cache ``k`` of device ``d`` and its think time, or None (its quota is done)."""
        if self.issued[d][k] >= self.quota:
            return None
        self.issued[d][k] += 1
        w = self.workload
        rng, w.rng = w.rng, self.op_rng[d][k]
        try:
            op = w.next_op(k)
        finally:
            w.rng = rng
        # values unique per cache and below 2^32 (the host writes 2^32 and above, models/system.py Workload)
        op.value = ((d * self.cfg.caches + k) << 24) | self.issued[d][k]
        return op, self.op_rng[d][k].randrange(self.think + 1)

    def access_started(self, t, d, k):
        """Cache ``k`` of device ``d`` started an access in cycle ``t``: the host's own traffic comes with it
        (Config.host_traffic), and the quota may be estimated again."""
        if self.cfg.host_traffic and self.host_rng.random() < self.cfg.host_traffic:
            self.sysm.host.host_access(*self.workload.host_op(self.host_rng), t)
        self.started[d][k] += 1
        if self.started[d][k] >= self.next_check:
            self._requota()

    def _requota(self):
        """``transactions`` counts the requests the DCOHs complete, but the caches are fed accesses, of which
        some hit and some make no request (an internal fill) or two (an eviction after a back-invalidation).
        So the quota of accesses per cache is set again from the requests per access so far (finished and
        outstanding; 1 % more, so that the run does not end a few short), when the first cache has started
        half of it, and again each time the first cache comes within QUOTA_MARGIN accesses of it.  It
        happens at a record, in cycle order, and no cache has been fed up to its quota yet (a cache is fed
        at most OP_DEPTH accesses ahead of what it started), so the run stays the same for any K.  The
        quota only grows: what was fed already is never taken back."""
        caches = self.devices * self.cfg.caches
        started = sum(map(sum, self.started))
        requests = self.done + sum(len(d.txns) for d in self.sysm.devices)
        if requests:
            want = math.ceil(self.transactions * 1.01 * started / requests / caches)
            self.quota = max(self.quota, want)
        done = max(map(max, self.started))
        self.next_check = max(done + 1, self.quota - QUOTA_MARGIN)

    def issuing(self):
        return any(n < self.quota for row in self.issued for n in row)

    def field(self, v, name):
        off, mask = self._fields[name]
        return (v >> off) & mask

    def write(self, handle, value):          # DeviceSide's per-cycle writes: the batched devices have none
        raise AssertionError("the batched testbench drives no per-cycle port")

    async def start(self):
        dut = self.dut
        for side in self.devs:
            for c in H2D_CHANNELS:
                side.push_h[c].value = 0
                side.seq_h[c].value = 0
            side.ops_h.value = 0
            side.ops_seq_h.value = 0
            side.h("record_flits").value = int(self.flit_checker is not None)   # flits only for the monitor
            side.pop_h.value = 0
            side.pop_seq_h.value = 0
        dut.step(UNIT_RESET_CYCLES)          # the devices reset themselves on these edges
        for side in self.devs:               # the first accesses, taken in the first cycle after reset,
            side.status = int(side.poll_h.value) & self.status_mask  # whatever K (think times count from reset)
            side.push(0)
        dut.step(1)                          # looks happen between two edges, where nothing moves

    async def _run(self, max_cycles, progress):
        sysm = self.sysm
        devs = self.devs
        dut = self.dut
        drained_since = None
        t0 = time.perf_counter()
        again = False
        while True:
            # a look: the devices stand still, ``now`` is their cycle counter
            now = int(devs[0].now_h.value)
            merged, again_records = self._take_records(now)
            # pipelined: the devices run their next K cycles while Python works through these records and
            # the host answers them; what it pushes goes in at the next look, K cycles on, which host_delay
            # allows for (see __init__).  After a look that left records or messages behind, a single cycle.
            overlap = self.pipeline and not again_records and not again
            if overlap:
                dut.start(self.batch)
            try:
                self._work_through(merged)
            finally:
                dut.wait()
            if overlap:
                now = int(devs[0].now_h.value)
            self.now = sysm.now = now
            again = False
            for side in devs:
                again |= side.push(now)
            self.watch(now, progress)
            if max_cycles is not None and now >= max_cycles:
                break
            if not self.issuing():
                quiet = all(d.drained() for d in devs) and sysm.quiescent() and all(
                    self.status_codec.decode(d.status)["drained"] for d in devs)
                if quiet:
                    drained_since = now if drained_since is None else drained_since
                    if now - drained_since >= 100:      # nothing more may come out
                        self.now = self.last_event + 100    # the end, whatever K: 100 cycles after the last
                        break                               # message, dispatch or cache event (flits go on)
                else:
                    drained_since = None
            if not overlap:
                dut.step(1 if again_records or again else self.batch)
        self.wall = time.perf_counter() - t0
        self.final_checks()

    def _take_records(self, now):
        """Every device's records of the cycles before ``now`` (a window each), dropped from the recorders;
        returns them as (cycle, device, record) in cycle order (device 0 first within a cycle) and whether
        a device has more than its window (then only the cycles no device may still have unread are taken)."""
        cycle_mask = (1 << STAMP_BITS) - 1
        limit = now - 1
        batches = []
        again = False
        for side in self.devs:
            poll = int(side.poll_h.value)
            side.status = poll & self.status_mask
            count = poll >> self.status_bits
            if count >= DEPTH and int(side.overflow_h.value):     # only a full recorder can lose one
                raise SystemMismatch(f"seed {self.seed} cycle {now} dev{side.d}: the recorder overflowed")
            n = min(count, self.window)
            recs = [int(side.rec_h[i].value) for i in range(n)]
            batches.append(recs)
            if count > n:
                limit = min(limit, recs[-1] & cycle_mask)
                again = True
        merged = []
        for side, recs in zip(self.devs, batches):
            used = 0
            for r in recs:
                t = r & cycle_mask
                if t > limit:
                    break
                merged.append((t, side.d, r))
                used += 1
            if used:
                side.pop_h.value = used
                side.pop_seq ^= 1
                side.pop_seq_h.value = side.pop_seq
        merged.sort(key=lambda x: (x[0], x[1]))
        return merged, again

    def _work_through(self, merged):
        """The records, cycle by cycle: each device's events, then the checks after the cycle (not after a
        cycle of flits alone).  Touches no port (the devices may be running): only the model, the mirrors
        and the host's queues in Python."""
        devs = self.devs
        sysm = self.sysm
        last = None
        events = False                       # the cycle had more than flits: its checks follow it
        for t, d, v in merged:
            if t != last:
                if events:
                    self.after_cycle(last)
                self.now = sysm.now = last = t
                events = False
            events |= devs[d].record(t, v)
        if events:
            self.after_cycle(last)

    def summary(self):
        s = super().summary()
        s["batch"] = {"cycles": self.batch, "host_delay": self.host_delay, "late": self.late,
                      "pipeline": self.pipeline, "model_s": round(self.dut.model_seconds(), 3)}
        s["simulator"] = SIMULATOR
        # the snoops each DCOH took while its RTL caches held it up (tb/rtl_caches.py)
        s["snoops_while_held"] = sum(int(dev.h("snoops_while_held").value) for dev in self.devs)
        return s


def run(lib, ports, unit_params, devices, seed, transactions, out, think=8, flit_monitor=True, host="", batch=8,
        pipeline=False, progress=False):
    """One run of ``devices`` batched devices on the native Verilator model (tb/native.py: ``lib``, ``ports``
    and ``unit_params`` from its ``build``); returns the summary (written to ``out`` too; on a mismatch
    ``violations`` 1 and ``error``, naming the seed)."""
    import gc
    import warnings
    from amaranth.hdl import UnusedElaboratable
    from tb.native import NativeSystem
    params = {"devices": devices, **unit_params}
    system = NativeSystem(lib, ports, devices)
    # the bench elaborates nothing: it builds RTL components only for their layouts and encodings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            bench = BatchBench(system, params, seed, transactions, think, flit_monitor, host=host, batch=batch,
                               pipeline=pipeline)
            bench.show_progress = progress
            try:
                summary = _to_end(run_bench(bench, seed, out))
            except SystemMismatch as e:
                summary = {"engine": "rtl", "devices": devices, "transactions": bench.done, "violations": 1,
                           "seed": seed, "cycles": bench.now, "error": str(e), "latency_cycles": {},
                           "simulator": SIMULATOR}
        finally:
            system.close()
            bench = None
            gc.collect()
    return summary


SIMULATOR = "verilator-native"


def _to_end(coro):
    """Runs a coroutine that never waits (the testbench's, on the native model) to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the native testbench awaited something: nothing here can wake it")
