"""The batched cocotb system testbench: the checks of tb/system_tb.py, with Python woken every K cycles.

Toplevel: ``system_top`` of ``batched_device`` instances (tb/batched_device.py, built by
``tb.run_system.build(..., batched=True)``).  Each device's internal caches and their traffic source run
in RTL (tb/rtl_caches.py), the host's messages wait in RTL queues until their cycle, and everything the
checks need is recorded per cycle in RTL (tb/stamped.py).  Python wakes every ``SIM_BATCH`` cycles (K,
default 8), reads the records of all devices, works through them in cycle order (device 0 first within
a cycle, as tb/system_tb.py does), and pushes what the host sent meanwhile and the next accesses.

The host answers ``max(K + 1, Config.host_latency)`` cycles after the D2H message it answers (the
per-cycle testbench answers the next cycle): a reply computed at a look is then never later than its
cycle, so the timing does not depend on K (``batch.late`` in the summary counts replies that were late
all the same: a burst above the queues' lanes).  The host's deliberate lags (Config.host_data_lag) come
on top, as in tb/system_tb.py, and so do its orders: a snoop goes only after every earlier H2D Rsp to
its line has reached the DCOH, a GO only after the data the host sent before it for the same CQID
(gates of tb/stamped.py ReleaseQueue, counted by the RTL).

Checked, as in tb/system_tb.py: every D2H message against the shadow's; every H2D message the DCOH takes
is the one the host sent; the shadow takes the DCOH's events in its dispatch order; after every event
the golden model's invariants; SWMR and data value over the RTL's caches whenever one changes (on a
mirror of them, :class:`tb.cache_bfm.CacheBFM`, that follows every command, install and hit the RTL
reports, and every answer the RTL's caches give is checked against it); the caches against the shadow's
whenever a device settles; the flit monitor (tb/flit_checker.py); the RTL's error bit, its caches' and
its queues' errors; forward progress; everything drained at the end.  A failure names the seed and the
cycle of the record that showed it.

Settings as tb/system_tb.py (``SIM_PARAMS``, ``SIM_TRANSACTIONS``, ``SEED``, ``SIM_THINK``, ``SIM_OUT``,
``SIM_FLIT_MONITOR``, ``SIM_HOST``, ``SIM_PROFILE``), and ``SIM_BATCH`` (K).  ``SIM_BREAK`` (tests only): ``flit`` as
there; ``mirror`` gives the mirror of the RTL's caches a wrong line once, which the next check of an
answer of the RTL's caches or of the settled caches must catch.

Accesses (``SIM_TRANSACTIONS`` = N): each internal cache issues ceil(N / (devices x caches)) of them,
drawn from a generator of its own, so that no draw depends on when a look happens: the run is the same
for any K up to ``Config.host_latency - 1`` (tests/test_system_batch.py checks K = 2 and 8 give the same
summary) as long as no queue runs dry (OP_DEPTH accesses per cache, tb/batched_device.py).
"""

import math
import os
import random
import time
from collections import deque

import cocotb
from amaranth.hdl import Shape
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer

from cxl.messages import Channel
from hdl.dcoh.dcoh import CmdOp, CpuKind
from hdl.link.ports import channel_shape
from models.dcoh import cache_hit
from tb.batched_device import (D2H_CHANNELS, H2D_CHANNELS, DEPTH, LANES, OP_DEPTH, OP_LANES, VALUE_BITS, WINDOW,
                               BatchedDevice)
from tb.cache_bfm import CacheBFM
from tb.rtl_caches import CacheErrors, TrafficOp
from tb.stamped import STAMP_BITS, ReleaseQueue
from tb.system_tb import DeviceSide, SystemBench, SystemMismatch, _CACHE_STATE, _DISPATCH, _settings, run_bench
from tb.vip import ChannelCodec, StructCodec

__all__ = ["BatchBench"]

PERIOD_NS = 10
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
        self.probe_phase = None
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
        space = bench.status_codec.decode(self.status)
        left = False
        for c in H2D_CHANNELS:
            p = self.pending[c]
            if not p:
                continue
            n = min(len(p), LANES, space[f"{c.name.lower()}_space"])
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
        free = min(OP_LANES, space["ops_space"])
        wanting = [k for k in range(bench.cfg.caches)]
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
        """Everything device ``d`` did in cycle ``t`` (the record ``v``), in tb/system_tb.py cycle()'s order."""
        bench = self.bench
        f = bench.field
        if not v & bench.event_mask:          # flits and quiet only: most records
            self._flits(t, v)
            self._settle(bool(f(v, "quiet")), False)
            return
        if f(v, "error"):
            self.fail(self.rtl_errors())
        code = f(v, "dispatch")
        if f(v, "cpu_req_valid"):
            k = f(v, "cpu_req_cache")
            self.cpu_cur = self.bfm.busy[k]
            if self.cpu_cur is None:
                self.fail(f"the DCOH took a cpu_req of cache {k}, whose RTL cache waits on nothing")
            self.to_send -= 1
        if code:
            bench.dispatch_count[code] += 1
            self.dispatch(_DISPATCH[code], t)
        self.cpu_cur = None
        taken = f(v, "h2d_taken")
        if taken:
            for i, c in enumerate(H2D_CHANNELS):
                if (taken >> i) & 1:
                    self.in_rtl[c].append(self.queued[c].popleft())
        for c in D2H_CHANNELS:
            name = c.name.lower()
            if f(v, f"{name}_valid"):
                payload = f(v, name)
                if c is Channel.D2H_DATA:           # the header and the line's low bits (tb/batched_device.py)
                    p = bench.line_codec["d2h_data"].decode(payload)
                    self._narrow(p, "D2H data")
                    payload = p["hdr"] | p["data"] << bench.d2h_hdr_bits
                self.d2h(c, t, payload)
        changed = False
        if f(v, "cmd_rsp_valid"):
            got = bench.line_codec["cmd_rsp"].decode(f(v, "cmd_rsp"))
            self._narrow(got, "a cmd's answer")
            want = self.owed.popleft() if self.owed else None
            if want is None or (got["dirty"], got["excl"], got["data"]) != want:
                self.fail(f"the RTL's caches answered a cmd with dirty={got['dirty']} excl={got['excl']} "
                          f"data={got['data']:#x}; their mirror says {want}")
        if f(v, "cmd_valid"):
            c = bench.cmd_codec.decode(f(v, "cmd"))
            self.owed.append(self.bfm.command(c["line"], c["caches"], CmdOp(c["op"]).name))
            bench.touch(c["line"])
            changed = True
        if f(v, "cpu_rsp_valid"):
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
        if f(v, "probe_valid"):
            self.probe_acked(f(v, "probe"), t)
        hit, miss = f(v, "hit"), f(v, "miss")
        for k in range(bench.cfg.caches):
            if (hit >> k) & 1 or (miss >> k) & 1:
                if not self.fed[k]:
                    self.fail(f"RTL cache {k} started an access that was never fed")
                op = self.fed[k].popleft()
                bench.access_started(t)
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
        self._flits(t, v)
        bench.last_event = t                 # a message, a dispatch or a cache event: not only flits
        self._settle(bool(f(v, "quiet")), changed)

    def _narrow(self, fields, what):
        if fields["wide"]:
            self.fail(f"{what} carries a line with bits above the low {VALUE_BITS} set; every line the model "
                      f"writes is below 2^{VALUE_BITS}")

    def _flits(self, t, v):
        bench = self.bench
        if bench.flit_checker is None:
            return
        f = bench.field
        for name in ("up", "down"):
            if f(v, f"{name}_valid"):
                self.flit_seen(name, f(v, name), t)

    def _settle(self, quiet, changed):
        """The caches against the shadow's whenever the device has settled (tb/system_tb.py cycle())."""
        settled = quiet and not self.to_send and not self.held
        if settled and (changed or not self.was_idle):
            self.compare_caches()
        self.was_idle = settled

    def rtl_errors(self):
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
                not self.owed and self.probe_phase is None and self.held is None and
                not any(self.pending.values()) and not any(self.queued.values()) and not any(self.in_rtl.values()))


class BatchBench(SystemBench):
    side_class = BatchedSide

    def __init__(self, dut, params, seed, transactions, think=8, flit_monitor=True, trace=None, host="", batch=8):
        if batch < 1:
            raise ValueError(f"SIM_BATCH={batch}: must be >= 1")
        p = params["dcoh"]
        dev = BatchedDevice(dcoh=p, link=params["link"])       # its layouts (not elaborated)
        self.window = WINDOW
        self.batch = batch
        self.late = 0
        super().__init__(dut, params, seed, transactions, think, flit_monitor, trace, host)
        self.host_delay = max(batch + 1, self.cfg.host_latency)
        # Accesses are drawn ahead of time, when a look tops up the queues: so that the run does not depend
        # on K, each internal cache draws from a generator of its own (the layouts stay the workload's),
        # issues a quota of its own, and the host's own accesses are drawn when a device's access starts.
        caches = self.cfg.caches
        self.quota = math.ceil(transactions / (self.devices * caches)) if trace is None else 0
        self.issued = [[0] * caches for _ in range(self.devices)]
        self.op_rng = [[random.Random(f"{seed} accesses {d} {k}") for k in range(caches)] for d in range(self.devices)]
        self.last_event = 0
        # a record's fields, by shifts from the stamped word (the cycle is its low STAMP_BITS)
        self._fields = {name: (STAMP_BITS + f.offset, (1 << f.width) - 1) for name, f in dev.layout}
        # the fields that make a record more than flits and quiet: the strobes only (a payload field
        # holds whatever its port carries while not valid, so it says nothing about an event)
        strobes = [n for n in self._fields if n.endswith("_valid") and n not in ("up_valid", "down_valid")]
        self.event_mask = 0
        for name in ("dispatch", "h2d_taken", "hit", "miss", "error", *strobes):
            off, mask = self._fields[name]
            self.event_mask |= mask << off
        self.lanes = {c: _Lanes(channel_shape(c)) for c in H2D_CHANNELS}
        ops = TrafficOp(p["caches"], dev.linked.dcoh.addr_width)
        self.op_codec = StructCodec(ops)
        self.op_lanes = _Lanes(ops, OP_LANES)
        self.status_codec = StructCodec(dev.status_layout)
        # the records' lines: low VALUE_BITS and a "wide" bit (tb/batched_device.py)
        self.line_codec = {n: StructCodec(dev.layout[n].shape) for n in ("d2h_data", "cmd_rsp", "cpu_rsp")}
        self.d2h_hdr_bits = data.Layout.cast(dev.layout["d2h_data"].shape)["hdr"].width
        self.status_bits = dev.status_layout.size
        self.status_mask = (1 << self.status_bits) - 1
        self.cache_err_fields = [(n, (f.offset, 1)) for n, f in CacheErrors()]

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

    def access_started(self, t):
        """A device's access started in cycle ``t``: the host's own traffic comes with it (Config.host_traffic)."""
        if self.cfg.host_traffic and self.host_rng.random() < self.cfg.host_traffic:
            self.sysm.host.host_access(*self.workload.host_op(self.host_rng), t)

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
        cocotb.start_soon(Clock(dut.clk, PERIOD_NS, unit="ns").start())
        dut.rst.value = 1
        for _ in range(3):
            await RisingEdge(dut.clk)
        for side in self.devs:               # the first accesses, taken in the first cycle after reset,
            side.status = int(side.poll_h.value) & self.status_mask  # whatever K (think times count from reset)
            side.push(0)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        await Timer(2, unit="ns")            # looks happen between two edges, where nothing moves

    async def _run(self, max_cycles, progress):
        sysm = self.sysm
        devs = self.devs
        drained_since = None
        t0 = time.perf_counter()
        cycle_mask = (1 << STAMP_BITS) - 1
        again = False
        while True:
            await Timer((1 if again else self.batch) * PERIOD_NS, unit="ns")
            now = int(devs[0].now_h.value)
            # every device's records, up to a window each; only cycles no device may still have unread
            limit = now - 1
            batches = []
            again = False
            for side in devs:
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
            for side, recs in zip(devs, batches):
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
            last = None
            for t, d, v in merged:
                if t != last and last is not None:
                    self.after_cycle(last)
                self.now = sysm.now = t
                devs[d].record(t, v)
                last = t
            if last is not None:
                self.after_cycle(last)
            self.now = sysm.now = now
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
        self.wall = time.perf_counter() - t0
        self.final_checks()

    def summary(self):
        s = super().summary()
        s["batch"] = {"cycles": self.batch, "host_delay": self.host_delay, "late": self.late}
        return s


@cocotb.test()
async def system_batched(dut):
    """Seeded random traffic from every internal cache (in RTL) until SIM_TRANSACTIONS requests completed."""
    params, seed, transactions, think, flit_monitor, out, host = _settings()
    batch = int(os.environ.get("SIM_BATCH", "8"))
    bench = BatchBench(dut, params, seed, transactions, think, flit_monitor, host=host, batch=batch)
    summary = await run_bench(bench, seed, out)
    cocotb.log.info(f"seed {seed}: {summary['transactions']} transactions, {summary['cycles']} cycles, "
                    f"{summary['sim_cycles_per_s']} cycles/s (batched, K={batch})")
