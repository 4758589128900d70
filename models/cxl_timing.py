"""System-level timing of CXL.cache for the fabric comparison of `make report`.

Message-level, from the golden model: the message flows, the host's per-line serialization, the snoop
filter, the invalidation coalescer and the credits are those of ``models.system.System`` itself.  This
module only gives its cycle counts a time base and drives it with directed workloads
(:class:`GoldenSim` mirrors the event loop of ``models.system.run``; the golden model's invariants are
checked on every step of every timing run, as in ``make sim``).

Time base (every number has its source in ``SOURCES``; "facts §n" is
docs/sources.md):

* one host<->device hop = CXL port + interconnect + serialization of the flits the message needs
  (facts §2.7: 1.079 ns per 68B flit at 32 GT/s x16) + the DCOH's per-message pipeline cycles;
* the port cost of a hop is derived from measured CXL hardware (``MEASURED_HOP_NS``: half the 70-90 ns a
  CXL load adds over local DRAM); preset "simulator" keeps the cxlsim2 defaults (``PRESETS``);
* host home agent = ``host_ns`` added to every message the host sends (as the golden model's
  ``host_latency``), after the message's turn at the agent: one message per ``host_occupancy_ns``;
* :class:`TimedLink` replaces the golden model's links: each direction's wire carries one message at a
  time (``wire_bytes`` at ``link_gbs``), and every message takes U(0, ``jitter_ns``) extra;
* DCOH cycles (``DCOH_CYCLES``: probe, coalescing window, rx/tx pipeline) at ``clock_mhz``: the RTL's
  measured counts (bench/dcoh_cycles.json, from bench/dcoh_bench.py).

The golden model runs in ticks of ``tick_ns`` (every duration is rounded to whole ticks; error at most
half a tick per component).

Workloads: :func:`sync_latencies` (one writer, N-1 readers; latency to visibility),
:func:`flag_round_trips` (ping-pong between two devices), :func:`atomic_throughput` (a counter
contended by N devices; every fetch-add migrates the line),
:func:`bulk_bandwidth` (coherent streaming reads; payload efficiency from ``models.flit.efficiency``),
:func:`ring_allreduce_s` (gradient sync).
"""

import json
import math
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cxl.messages import Channel, MAX_IDS
from .config import Config
from .link import Link, WakeTimes
from .dcoh import CpuOp
from .flit import efficiency as flit_efficiency, optimum as flit_optimum
from cxl.coherence import DevState
from .system import System
from .params import ParamSet

__all__ = ["DCOH_CYCLES", "DCOH_CYCLES_SOURCE", "FLIT_NS", "LINK_GBS", "CxlParams", "SOURCES", "PRESETS",
           "MEASURED_HOP_NS", "TimedLink", "GoldenSim", "hop_ns", "golden_config", "sync_latencies",
           "flag_round_trips", "atomic_throughput", "wire_bytes",
           "read_miss_ns", "snoop_round_trip_ns", "payload_efficiency", "message_efficiency",
           "bulk_bandwidth", "ring_allreduce_s"]

# facts §2.7 [D]: 68 B x 8 / (32 GT/s x 16 lanes) x 130/128
FLIT_NS = 68 * 8 / (32 * 16) * 130 / 128
LINE_BYTES = 64
LINK_GBS = 68 / FLIT_NS                     # 63.0 GB/s per direction (facts §2.7, §4.4)

# DCOH cycle counts, measured on the RTL (hdl/dcoh/dcoh.py) by bench/dcoh_bench.py, which writes the
# committed bench/dcoh_cycles.json (`make bench` refreshes it).  Keys:
#   probe            snoop hit: snoop in -> response out through the DCOH (RTL, window 0, excluding the
#                    internal cache) + the internal cache's own ack time (assumption: Config.probe_latency)
#   coalesce_window  an invalidation waits this long for others to the same block (Config.coalesce_window,
#                    a configuration choice)
#   rx               a host response/data is acted on: H2D Data in -> fill out to the cache (RTL)
#   tx               a D2H request leaves: cache miss in -> D2H Req out (RTL)
#   link             a message crosses the 68B-flit link layer, one way, idle link (RTL loopback: packer,
#                    CRC, retry check, unpacker); the port/PHY time on top of it is ``port_ns`` (facts)
RTL_CYCLES_FILE = Path(__file__).resolve().parents[1] / "bench" / "dcoh_cycles.json"


def _rtl_cycles():
    try:
        rtl = json.loads(RTL_CYCLES_FILE.read_text())
        return {"probe": rtl["snoop_hit_inv_latency"] + Config.probe_latency,
                "coalesce_window": Config.coalesce_window,
                "rx": rtl["rx_fill"], "tx": rtl["tx_miss"], "link": rtl["link_one_way"]}
    except (OSError, KeyError, ValueError) as e:
        raise RuntimeError(f"{RTL_CYCLES_FILE}: the RTL cycle counts are missing or malformed ({e}); "
                           "run `make bench` (python -m bench.dcoh_bench) to measure them") from None


DCOH_CYCLES = _rtl_cycles()

DCOH_CYCLES_SOURCE = ("RTL cycle counts measured by bench/dcoh_bench.py (bench/dcoh_cycles.json); the internal "
                      "cache's ack time and the coalescing window are configuration assumptions (models/config.py)")

# Measured CXL cost per one-way host<->device hop (docs/comparison.md, sources [P1], [P2]): CXL memory
# on shipping CPUs adds 70-90 ns to a load over local DRAM (facts §4.1, Pond).  That difference is two
# traversals of host port + link + device port and the device controller, so one hop costs half of it.
# The port figure is what remains of that hop after the parts modelled separately: the flits' CRC wait
# and the DCOH/link-layer pipeline (RTL cycles at the default 1 GHz clock).
MEASURED_ADDED_LOAD_NS = (70.0, 90.0)
MEASURED_HOP_NS = sum(MEASURED_ADDED_LOAD_NS) / 2 / 2
_PIPE_NS = 2 * FLIT_NS + ((DCOH_CYCLES["rx"] + DCOH_CYCLES["tx"]) / 2 + DCOH_CYCLES["link"]) * 1.0
MEASURED_PORT_NS = round(MEASURED_HOP_NS - _PIPE_NS, 3)


@dataclass(frozen=True)
class CxlParams(ParamSet):
    clock_mhz: float = 1000.0
    flit_ns: float = FLIT_NS
    flits_per_msg: int = 2
    port_ns: float = MEASURED_PORT_NS
    interconnect_ns: float = 0.0
    host_ns: float = 45.0
    host_occupancy_ns: float = 1.0
    link_gbs: float = LINK_GBS
    jitter_ns: float = 10.0
    dcoh_cycles: dict = field(default_factory=lambda: dict(DCOH_CYCLES))
    spin_ns: float = 20.0
    tick_ns: float = 0.25
    outstanding: int = MAX_IDS
    host_mem_gbs: float = 8 * 4800e6 * 8 / 1e9

    def __post_init__(self):
        if self.clock_mhz <= 0 or self.tick_ns <= 0 or self.spin_ns <= 0:
            raise ValueError("clock_mhz, tick_ns and spin_ns must be positive")
        for name in ("port_ns", "interconnect_ns", "host_ns", "flit_ns", "host_occupancy_ns", "jitter_ns"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 0")
        if not self.link_gbs > 0:
            raise ValueError(f"link_gbs={self.link_gbs!r}: must be > 0 (inf: no bandwidth limit)")
        if set(self.dcoh_cycles) != set(DCOH_CYCLES):
            raise ValueError(f"dcoh_cycles must have exactly the keys {sorted(DCOH_CYCLES)}")
        if any(v < 0 for v in self.dcoh_cycles.values()):
            raise ValueError("dcoh_cycles must be >= 0")
        if not 1 <= self.outstanding <= MAX_IDS:
            raise ValueError(f"outstanding must be 1..{MAX_IDS} (12-bit CQID, facts §1.6)")

    @property
    def cycle_ns(self):
        return 1e3 / self.clock_mhz


SOURCES = {
    "clock_mhz": ("MHz", "golden model assumption: DCOH clock 1 GHz (models/config.py: link_latency "
                         "'~24 cycles at 1 GHz')"),
    "flit_ns": ("ns", "facts §2.7 [D]: 68B flit at 32 GT/s x16, 128b/130b = 1.079 ns"),
    "flits_per_msg": ("flits", "assumption: a message is usable once its flit's CRC checks (facts §2.3); a "
                               "64 B data message spans its header flit and the rollover flit (facts §2.1), "
                               "and the golden model's links charge every message the same, so all are "
                               "charged 2 flits (<= 1.08 ns pessimistic for header-only messages)"),
    "port_ns": ("ns", f"derived [D] from measured hardware (docs/comparison.md [P1], [P2]; facts §4.1): CXL "
                      f"memory adds 70-90 ns to a load over local DRAM on shipping CPUs, i.e. two hops, so "
                      f"{MEASURED_HOP_NS:g} ns per one-way hop, minus the flits' CRC wait and the RTL pipeline "
                      f"modelled separately; preset 'simulator' keeps the cxlsim2 default 62 ns (facts §4.1, "
                      f"a simulator default, not a measurement)"),
    "interconnect_ns": ("ns", "derived [D]: 0, the measured hop already contains the wire; preset "
                              "'simulator' keeps cxlsim2 'interconnect 15 ns' (facts §4.1)"),
    "host_ns": ("ns", "facts §4.1 [C]: cxlsim2 'CPU core+LLC 45 ns', used as the home agent's lookup "
                      "(no measured home-agent latency found; the use is an assumption; the golden model "
                      "assumes 10 cycles)"),
    "host_occupancy_ns": ("ns", "assumption: the home agent sends at most one message per 1 ns cycle "
                                "(its occupancy; requests queue behind it); no published figure found"),
    "link_gbs": ("GB/s", "facts §2.7 [D]: 68B flits at 32 GT/s x16, 63.0 GB/s per direction; every message "
                         "occupies the wire for its bytes (wire_bytes), so messages queue behind each other"),
    "jitter_ns": ("ns", "assumption: each one-way message takes U(0, 10 ns) extra, the 70-90 ns spread of "
                        "the measured load latency (docs/comparison.md [P1]) read as per-hop variation"),
    "dcoh_cycles": ("cycles", DCOH_CYCLES_SOURCE + ": " + ", ".join(f"{k}={v}" for k, v in DCOH_CYCLES.items())),
    "spin_ns": ("ns", "assumption: a reader re-reads its cached flag every 20 ns (a load hit per spin)"),
    "tick_ns": ("ns", "model time resolution (not a hardware parameter)"),
    "outstanding": ("requests", "facts §1.6: 12-bit CQID, at most 4096 outstanding requests per device "
                                "(the golden model's RTL sizing is 16: Config.max_outstanding)"),
    "host_mem_gbs": ("GB/s", "assumption: 8 channels of DDR5-4800 (38.4 GB/s each; DDR5-4800 is the "
                             "memory of facts §4.1's SPR system), for traffic that goes through host memory"),
}


# Named parameter sets (overrides of the defaults).  "measured": per-hop cost from measured hardware
# (the default); "simulator": the cxlsim2 simulator defaults the model used before (facts §4.1);
# "unloaded": the simulator defaults without occupancy, bandwidth limit or jitter (the golden model's
# own structure, for comparison with earlier figures).
PRESETS = {
    "measured": {},
    "simulator": {"port_ns": 62.0, "interconnect_ns": 15.0},
    "unloaded": {"port_ns": 62.0, "interconnect_ns": 15.0, "host_occupancy_ns": 0.0,
                 "link_gbs": math.inf, "jitter_ns": 0.0},
}


# ---------------------------------------------------------------- time base
def hop_ns(p):
    """One-way host<->device latency of a message: port + interconnect + flit serialization + the DCOH's
    per-message pipeline (rx and tx averaged over the two directions: the golden model's links are
    symmetric, and every round trip has one of each) + the link layer's pipeline (RTL, one way)."""
    dc = p.dcoh_cycles
    return (p.port_ns + p.interconnect_ns + p.flits_per_msg * p.flit_ns
            + ((dc["rx"] + dc["tx"]) / 2 + dc["link"]) * p.cycle_ns)


def _ticks(ns, tick):
    return int(round(ns / tick))


def golden_config(p, devices, **cfg):
    """The golden model's Config with ``p``'s time base, in ticks."""
    t = p.tick_ns
    dc = p.dcoh_cycles
    base = dict(devices=devices, caches=1,
                link_latency=max(1, _ticks(hop_ns(p), t)),
                host_latency=_ticks(p.host_ns, t),
                probe_latency=_ticks(dc["probe"] * p.cycle_ns, t),
                coalesce_window=_ticks(dc["coalesce_window"] * p.cycle_ns, t),
                watchdog=10 ** 9,
                # a read's data goes with its GO: the late data of Config.host_data_late is there to open
                # a race window for verification, not a latency this comparison should charge
                host_data_late=0)
    base.update(cfg)
    return Config(**base)


# A header-only message takes one 16 B slot of a 68B flit (facts §2.1, §2.2: four slots per flit), so
# 68 / 4 B of wire; a 64 B data message takes its line at the packer's measured streaming efficiency
# (models.flit: data and its header slots), the same figure the bulk bandwidth uses.
HEADER_WIRE_BYTES = 68 / 4
_DATA_CHANNELS = (Channel.D2H_DATA, Channel.H2D_DATA)
_D2H_DATA = Channel.D2H_DATA            # channels up to this one travel upstream (models/link.py)


def wire_bytes(chan):
    """Bytes of the 68B-flit wire one message of ``chan`` occupies."""
    if chan in _DATA_CHANNELS:
        return LINE_BYTES / payload_efficiency()[0]
    return HEADER_WIRE_BYTES


class _HomeAgent:
    """The host's home agent as a single server: every message the host sends takes ``occupancy``
    ticks of it, in the order the host sends them; later messages wait (a queue)."""

    def __init__(self, occupancy):
        self.occupancy = occupancy
        self.free = 0

    def start(self, now):
        t = max(now, self.free)
        self.free = t + self.occupancy
        return t


class TimedLink(Link):
    """A golden-model link with the costs the golden model leaves out: each direction's wire carries
    one message at a time (``wire_bytes`` at ``link_gbs``; later messages queue), every message takes
    U(0, jitter) ticks extra, and downstream messages first queue at the shared home agent.  The
    unloaded, jitter-free latency is the golden model's (``link_latency`` + the sender's extra)."""

    def __init__(self, cfg, p, rng, home):
        super().__init__(cfg, timed=True)
        t = p.tick_ns
        gbs = p.link_gbs
        self.wire = [0 if math.isinf(gbs) else _ticks(wire_bytes(c) / gbs, t) for c in Channel]
        self.jitter = _ticks(p.jitter_ns, t)
        self.rng = rng
        self.home = home
        self.wire_free = {True: 0, False: 0}

    def send(self, msg, now, extra=0):
        c = msg.chan
        entry = [None, msg, extra]
        self.flight[c <= _D2H_DATA].append(entry)
        if self.credits[c] > 0 and not self.waiting[c]:
            self._launch(entry, now)
        else:
            self.waiting[c].append(entry)

    def _launch(self, entry, now):
        msg = entry[1]
        c = msg.chan
        up = c <= _D2H_DATA
        self.credits[c] -= 1
        self.in_flight[c] += 1
        self.changed |= 1 << c
        start = now if up else self.home.start(now)
        ready = start + entry[2]
        on_wire = max(ready, self.wire_free[up])
        self.wire_free[up] = on_wire + self.wire[c]
        t = on_wire + self.latency + (self.rng.randint(0, self.jitter) if self.jitter else 0)
        entry[0] = t
        if self.wake is not None:
            self.wake.push(t)
            if t < self.next_due:
                self.next_due = t


def snoop_round_trip_ns(p):
    """Host sends SnpInv -> host has the response from a device holding the line in S: two hops plus the
    DCOH's coalescing window and probe of its internal copy (the "DCOH invalidation" of the article)."""
    dc = p.dcoh_cycles
    return 2 * hop_ns(p) + (dc["coalesce_window"] + dc["probe"]) * p.cycle_ns


# ---------------------------------------------------------------- directed driver of the golden model
class GoldenSim:
    """Timed, directed run of ``models.system.System``: the same per-step order as ``run()`` (credit
    returns and deliveries on links with something due, coalescer flushes, DCOH service and one D2H
    request per device per tick, invariant checks on touched lines), with CPU accesses issued by the
    caller instead of the random workload."""

    def __init__(self, cfg, p=None, seed=1):
        """``p``: the CxlParams whose wire, jitter and home-agent costs the links add (None: the
        golden model's own links); ``seed`` draws the jitter."""
        self.cfg = cfg
        self.sys = System(cfg, timed=True)
        if p is not None:
            rng = random.Random(seed)
            home = _HomeAgent(_ticks(p.host_occupancy_ns, p.tick_ns))
            for d in range(cfg.devices):
                self.sys.replace_link(d, TimedLink(cfg, p, rng, home))
        self.wake = WakeTimes()
        for link in self.sys.links:
            link.wake = self.wake
        for dev in self.sys.devices:
            dev.coal.wake = self.wake
        self.now = 0

    def at(self, t):
        self.wake.push(t)

    def issue(self, d, kind, line, value=0):
        """Accept a CPU access in device ``d``'s cache 0 now.  Returns False if that cache is busy."""
        return self.sys.devices[d].accept(CpuOp(kind, 0, line, value), self.now)

    def step(self):
        self.sys.step_timed(self.now)

    def service(self):
        sysm, now = self.sys, self.now
        for dev in sysm.devices:
            if dev.queue:
                dev.service(now)
            if dev.arb.count:
                dev.transmit(now, 1)
            dev.done.clear()
        if sysm.checker.touched:
            sysm.check_step()
        if any(dev.arb.count and dev.link.credits[Channel.D2H_REQ] > 0 for dev in sysm.devices):
            self.at(now + 1)

    def advance(self):
        """Move to the next event time; False if nothing is left to happen."""
        wake, heap = self.wake, self.wake.heap
        while heap and heap[0] <= self.now:
            wake.pop()
        if not heap:
            return False
        self.now = wake.pop()
        return True

    def value(self, d, line):
        c = self.sys.devices[d].caches[0].get(line)
        return None if c is None else c[1]

    def idle(self, d):
        return self.sys.devices[d].ops[0] is None

    def settle(self, limit=10 ** 7):
        """Run until the system is quiescent."""
        start = self.now
        while True:
            self.step()
            self.service()
            if self.sys.quiescent():
                return
            if not self.advance() or self.now - start > limit:
                raise AssertionError("golden model did not settle")


FLAG = 0x40


def _warm(sim, devices, line):
    """Every device loads ``line`` (all end in S)."""
    for d in devices:
        while not sim.issue(d, "load", line):
            sim.step(); sim.service(); sim.advance()
        sim.settle()


def sync_latencies(p, n_devices, trials, seed=1, progress=None):
    """Workload 1 on CXL.cache: device 0 writes a flag that devices 1..N-1 hold in S and spin on (a load
    every ``spin_ns``, random phase per trial).  The write is RdOwn (SnpInv to every reader), the
    readers' next loads miss and RdShared the new value (the first snoops the writer's M copy).
    Returns (reader latencies ns: trials x (N-1) samples, writer upgrade latencies ns)."""
    if n_devices < 2:
        raise ValueError("sync needs a writer and at least one reader")
    rng = random.Random(seed)
    t = p.tick_ns
    sim = GoldenSim(golden_config(p, n_devices), p, seed)
    readers = range(1, n_devices)
    _warm(sim, range(n_devices), FLAG)
    spin = max(1, _ticks(p.spin_ns, t))
    lat, wlat = [], []
    for trial in range(trials):
        v = trial + 1
        t0 = sim.now + 1 + rng.randrange(spin)
        nxt = {r: t0 + rng.randrange(spin) for r in readers}
        sim.at(t0)
        for r in readers:
            sim.at(nxt[r])
        while sim.now < t0:
            sim.advance()
        seen = {}
        wrote = None
        sim.issue(0, "store", FLAG, v)
        while len(seen) < n_devices - 1 or wrote is None:
            sim.step()
            now = sim.now
            if wrote is None and sim.idle(0):
                wrote = now
            for r in readers:
                if r in seen:
                    continue
                if sim.idle(r) and sim.value(r, FLAG) == v:
                    seen[r] = now
                    continue
                if now >= nxt[r]:
                    if sim.idle(r):
                        sim.issue(r, "load", FLAG)
                        if sim.value(r, FLAG) == v and sim.idle(r):
                            seen[r] = now
                    while nxt[r] <= now:
                        nxt[r] += spin
                    sim.at(nxt[r])
            sim.service()
            if not sim.advance():
                raise AssertionError("sync trial stalled")
        lat.extend((seen[r] - t0) * t for r in readers)
        wlat.append((wrote - t0) * t)
        sim.settle()
        if progress and (trial + 1) % max(1, trials // 4) == 0:
            progress(trial + 1, trials)
    return lat, wlat


REPLY = 0x80        # another coalescing block than FLAG


def flag_round_trips(p, trials, seed=1):
    """Flag ping-pong between two devices on CXL.cache: device 0 stores FLAG (RdOwn, SnpInv to device
    1's S copy); device 1 spins on FLAG (a load every ``spin_ns``; its miss RdShared-s the new value
    out of device 0's M copy), then stores REPLY, on which device 0 spins the same way.  Returns the
    round trips (ns), from device 0's store to device 0 seeing the reply, one per trial."""
    rng = random.Random(seed)
    t = p.tick_ns
    sim = GoldenSim(golden_config(p, 2), p, seed)
    _warm(sim, (1,), FLAG)
    _warm(sim, (0,), REPLY)
    spin = max(1, _ticks(p.spin_ns, t))
    out = []
    for trial in range(trials):
        v = trial + 1
        t0 = sim.now + 1 + rng.randrange(spin)
        # who spins on what, and when each spinner loads next
        watch = {1: FLAG, 0: REPLY}
        nxt = {d: t0 + rng.randrange(spin) for d in watch}
        for d in watch:
            sim.at(nxt[d])
        sim.at(t0)
        while sim.now < t0:
            sim.advance()
        sim.issue(0, "store", FLAG, v)
        seen = {}
        while 0 not in seen:
            sim.step()
            now = sim.now
            for d, line in watch.items():
                if d in seen or (d == 0 and 1 not in seen):
                    continue
                if sim.idle(d) and sim.value(d, line) == v:
                    seen[d] = now
                    if d == 1:
                        sim.issue(1, "store", REPLY, v)
                    continue
                if now >= nxt[d]:
                    if sim.idle(d):
                        sim.issue(d, "load", line)
                    while nxt[d] <= now:
                        nxt[d] += spin
                    sim.at(nxt[d])
            sim.service()
            if not sim.advance():
                raise AssertionError("ping-pong trial stalled")
        out.append((seen[0] - t0) * t)
        sim.settle()
    return out


def read_miss_ns(p):
    """Unloaded RdShared of a line nobody holds, measured on the golden model (ns)."""
    sim = GoldenSim(golden_config(p, 1), p.with_(jitter_ns=0.0))
    sim.issue(0, "load", FLAG)
    sim.service()
    while sim.advance():
        sim.step()
        if sim.idle(0):
            return sim.now * p.tick_ns
        sim.service()
    raise AssertionError("read did not complete")



def atomic_throughput(p, n_devices, ops=2000, seed=1):
    """Workload 2 on CXL.cache: N devices fetch-add one counter line.  A fetch-add is a store to the
    line: RdOwn when the device does not own it (SnpInv / RspIFwdM moves the line and its data from the
    last owner), then the local read-modify-write.  Every fetch-add migrates the line: a device issues its
    next one only after the line was taken from it (no batching of several ops per ownership: the worst
    case for CXL).  Returns ops/s after a warm-up."""
    if n_devices < 2:
        raise ValueError("contention needs at least two devices")
    rng = random.Random(seed)
    sim = GoldenSim(golden_config(p, n_devices), p, seed)
    order = list(range(n_devices))
    rng.shuffle(order)
    done = 0
    value = 0
    warm = min(ops // 5, 100)
    t_warm = None
    pending = set()
    for d in order:
        value += 1
        sim.issue(d, "store", FLAG, value)
        pending.add(d)
    sim.service()
    last = 0
    while done < ops:
        if not sim.advance():
            raise AssertionError("atomic run stalled")
        sim.step()
        for d in order:
            dev = sim.sys.devices[d]
            if d in pending and sim.idle(d):
                pending.discard(d)
                done += 1
                last = sim.now
                if done == warm:
                    t_warm = sim.now
            if d not in pending and dev.line_state(FLAG) is DevState.I:
                value += 1
                sim.issue(d, "store", FLAG, value)
                pending.add(d)
        sim.service()
    return (done - warm) / ((last - t_warm) * p.tick_ns) * 1e9


# ---------------------------------------------------------------- bandwidth and efficiency
@lru_cache(maxsize=None)
def _flit_eff(workload, n):
    return flit_efficiency(workload, n)


@lru_cache(maxsize=None)
def _flit_optimum(workload, n):
    return flit_optimum(workload, n)


@lru_cache(maxsize=None)
def payload_efficiency(workload="streaming_reads", n=1024):
    """(data efficiency, header-inclusive efficiency) of ``n`` streamed lines, from models.flit's packer
    (``models.flit.efficiency``): 64 B lines / 68 B flits, and the same counting message header bits as
    payload (the way ``python -m models.flit --efficiency`` reports it)."""
    e = flit_efficiency(workload, n)
    return e["data_efficiency"], e["efficiency"]


def message_efficiency(nbytes, workload="streaming_writes"):
    """Useful bytes over wire bytes for moving ``nbytes`` as whole 64 B lines through the 68B-flit packer:
    models.flit.efficiency (the packer, measured) up to 64 lines; beyond, models.flit.optimum's flit
    count for n lines (the packer reaches it: ``python -m models.flit --efficiency``), which is cheaper."""
    n = max(1, math.ceil(nbytes / LINE_BYTES))
    flits = (_flit_eff(workload, n) if n <= 64 else _flit_optimum(workload, n))["flits"]
    return nbytes / (68 * flits)


def bulk_bandwidth(p, read_ns=None):
    """Workload 3 on CXL.cache: one device streams coherent reads (RdShared) of host memory.  Useful
    GB/s = min(link rate x data efficiency, outstanding x 64 B / read round trip (Little), host memory).
    Returns a dict with each bound."""
    data_eff, hdr_eff = payload_efficiency()
    rtt = read_miss_ns(p) if read_ns is None else read_ns
    link = p.link_gbs * data_eff
    little = p.outstanding * LINE_BYTES / rtt
    return {"gbs": min(link, little, p.host_mem_gbs), "link_gbs": link, "little_gbs": little,
            "host_mem_gbs": p.host_mem_gbs, "read_rtt_ns": rtt, "payload_efficiency": data_eff,
            "header_inclusive_efficiency": hdr_eff,
            "outstanding_for_link_rate": None if math.isinf(link) else math.ceil(link * rtt / LINE_BYTES)}


def ring_allreduce_s(p, total_bytes, n_gpus, bucket_bytes, alpha_ns, link_gbs, via_host_memory=True):
    """Ring all-reduce over CXL.cache: each step every GPU writes bucket/N bytes and its neighbour reads
    them.  With ``via_host_memory`` (CXL.cache devices share host memory, the golden model's topology)
    every step also writes and reads the whole bucket in host memory, at ``host_mem_gbs``."""
    n_buckets = math.ceil(total_bytes / bucket_bytes)
    chunk = bucket_bytes / n_gpus
    move = chunk / link_gbs
    if via_host_memory:
        move = max(move, 2 * bucket_bytes / p.host_mem_gbs)
    return n_buckets * 2 * (n_gpus - 1) * (alpha_ns + move) * 1e-9
