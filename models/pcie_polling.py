"""A PCIe Gen5 x16 device and the host CPU synchronizing through pinned host memory: no NIC, no coherence.

The device sees host memory only through PCIe transactions (every default has its source in ``SOURCES``;
"facts §n" is docs/sources.md, "[Pn]" the source list of docs/comparison.md):

* a device read of host memory (MRd, then CplD) is one PCIe round trip, drawn U(``rtt_min_ns``,
  ``rtt_max_ns``) per read (facts §4.2); the host samples memory when the request arrives, half-way;
* a device write (MWr) is posted: it lands in host memory after half a round trip ([P4]);
* a device polls a flag in host memory with reads, one outstanding at a time, back to back: it sees a
  new value with the first read that reaches the host after the value landed;
* the CPU polls its own flag with loads every ``cpu_spin_ns``; a device write invalidates the CPU's
  copy, so the CPU's next load misses to the LLC (``cpu_miss_ns``);
* atomics (PCIe AtomicOp FetchAdd) on one host address are executed by the root complex one after the
  other at ``atomic_mops`` ([P3]; facts §4.2); a device keeps up to ``outstanding`` non-posted
  requests in flight;
* bulk: the device streams reads of host memory in requests of ``mrrs`` bytes, answered in CplD TLPs
  of at most ``mps`` bytes (facts §4.4 overheads).

Workloads, the same as the other fabrics': :func:`flag_round_trips` (CPU store -> device polls ->
device posts its reply -> CPU sees it), :func:`sync_latencies` (device 0 posts a flag into host memory,
devices 1..N-1 poll it), :func:`atomic_throughput`, :func:`bulk_bandwidth_gbs`.  ``random.Random(seed)``
throughout, so a seed gives the same numbers on any machine.
"""

import heapq
import random
from dataclasses import dataclass

from . import rdma as R
from .params import ParamSet

__all__ = ["PcieParams", "SOURCES", "flag_round_trip_parts", "flag_round_trips", "sync_latencies",
           "atomic_throughput", "atomic_bounds", "bulk_bandwidth", "bulk_bandwidth_gbs"]

ATOMIC_OPERAND = 8            # FetchAdd on a 64-bit counter
FLAG_BYTES = 8


@dataclass(frozen=True)
class PcieParams(ParamSet):
    rtt_min_ns: float = 300.0
    rtt_max_ns: float = 400.0
    posted_fraction: float = 0.5
    device_turnaround_ns: float = 10.0
    cpu_spin_ns: float = 20.0
    cpu_miss_ns: float = 45.0
    atomic_mops: float = 42.0
    outstanding: int = 768
    mps: int = 256
    mrrs: int = 512
    lanes: int = 16
    gts: float = 32.0
    host_mem_gbs: float = 8 * 4800e6 * 8 / 1e9

    def __post_init__(self):
        def bad(name, why):
            raise ValueError(f"{name}={getattr(self, name)!r}: {why}")
        if not 0 < self.rtt_min_ns <= self.rtt_max_ns:
            bad("rtt_min_ns", "need 0 < rtt_min_ns <= rtt_max_ns")
        if not 0 < self.posted_fraction <= 1:
            bad("posted_fraction", "must be in (0, 1]")
        for name in ("device_turnaround_ns", "cpu_miss_ns"):
            if not getattr(self, name) >= 0:
                bad(name, "must be >= 0")
        for name in ("cpu_spin_ns", "atomic_mops", "gts", "host_mem_gbs"):
            if not getattr(self, name) > 0:
                bad(name, "must be > 0")
        if not 1 <= self.outstanding <= 1024:
            bad("outstanding", "must be 1..1024 (PCIe 10-bit tags)")
        if self.mps not in (128, 256, 512, 1024, 2048, 4096):
            bad("mps", "must be a power of two in 128..4096 (facts §4.4)")
        if self.mrrs not in (128, 256, 512, 1024, 2048, 4096):
            bad("mrrs", "must be a power of two in 128..4096 (facts §4.4)")
        if self.lanes not in (1, 2, 4, 8, 16):
            bad("lanes", "must be 1, 2, 4, 8 or 16")

    @property
    def raw_gbs(self):
        """Raw rate of one direction, 128b/130b (facts §4.4: 63.0 GB/s at 32 GT/s x16)."""
        return self.gts * self.lanes * 128 / 130 / 8

    @property
    def tlp_gbs(self):
        """TLP-level rate after DLLPs and SKIPs: facts §4.4's Gen5 x16 factor (455 of 504.1 Gb/s at
        MPS 256) applied to this link's raw rate."""
        return self.raw_gbs * R.pcie_rate_gbs(self.mps) / R.PCIE_RAW_GBS

    @property
    def rtt_mid_ns(self):
        return (self.rtt_min_ns + self.rtt_max_ns) / 2


SOURCES = {
    "rtt_min_ns": ("ns", "facts §4.2 [S]: PCIe round trip 300-400 ns unloaded (docs/comparison.md [P3]: "
                         "Neugebauer et al. SIGCOMM'18, via artpol84/poc); each read drawn U(min, max)"),
    "rtt_max_ns": ("ns", "facts §4.2 [S], as above"),
    "posted_fraction": ("of a round trip", "vendor document (docs/comparison.md [P4], Intel TCC Tools "
                                           "guide, 'Data Streams Supported'): a device's posted write to "
                                           "memory is estimated at half the read round trip"),
    "device_turnaround_ns": ("ns", "assumption: the device turns a read completion into its reply write "
                                   "in 10 ns (a few cycles of a device's DMA engine)"),
    "cpu_spin_ns": ("ns", "assumption: the CPU re-reads its cached flag every 20 ns (as CXL spin_ns)"),
    "cpu_miss_ns": ("ns", "facts §4.1 [C]: cxlsim2 'CPU core+LLC 45 ns' (a simulator default) as the CPU "
                          "load that misses after the device's write invalidated its copy (assumption in "
                          "the use; the same figure as the CXL home agent's host_ns)"),
    "atomic_mops": ("M ops/s", "facts §4.2 [C]: Connect-IB atomics on one address in L3 at ~42 M/s, which "
                               "the source reads as the PCIe controller serialising atomics; used as the "
                               "root complex's rate for AtomicOps to one host address (assumption in the use)"),
    "outstanding": ("requests", "vendor document (docs/comparison.md [P5], Intel R-Tile PCIe Gen5 x16 hard IP "
                                "user guide, 'Tag Allocation'): 768 non-posted requests in flight with 10-bit "
                                "tags; that the device uses them all is an assumption"),
    "mps": ("B", "facts §4.4: MPS 128-4096; 256 as for RDMA (the size is an assumption)"),
    "mrrs": ("B", "assumption: max read request 512 B (facts §4.4 range 128-4096)"),
    "lanes": ("lanes", "facts §4.4: x16"),
    "gts": ("GT/s", "facts §4.4: Gen5 32 GT/s, 128b/130b"),
    "host_mem_gbs": ("GB/s", "assumption: 8 channels of DDR5-4800, as the CXL host (models/cxl_timing.py)"),
}


def _rtt(p, rng):
    return p.rtt_mid_ns if rng is None else rng.uniform(p.rtt_min_ns, p.rtt_max_ns)


def _poll_detect(p, landed, rng):
    """Time at which a device that polls with back-to-back reads (one outstanding) sees a value that
    landed in host memory at ``landed``.  Its reads run at a random phase: the one in flight started
    U(0, one round trip) before ``landed``.  A read samples memory when its request reaches the host
    (half-way) and returns the value after the other half."""
    start = landed - rng.uniform(0.0, _rtt(p, rng))
    while True:
        r = _rtt(p, rng)
        if start + r / 2 >= landed:
            return start + r
        start += r


def _cpu_sees(p, landed, rng):
    """The CPU spins on a line in its cache every ``cpu_spin_ns`` (random phase); the device's write
    invalidated the copy when it ``landed``, so the next spin load misses."""
    return landed + rng.uniform(0.0, p.cpu_spin_ns) + p.cpu_miss_ns


def flag_round_trip_parts(p, rng):
    """Components (ns) of one sampled round trip."""
    seen = _poll_detect(p, 0.0, rng)
    write = p.posted_fraction * _rtt(p, rng)
    back = _cpu_sees(p, seen + p.device_turnaround_ns + write, rng) - (seen + p.device_turnaround_ns + write)
    return {"device_poll": seen, "turnaround": p.device_turnaround_ns, "posted_write": write,
            "cpu_poll": back}


def flag_round_trips(p, trials, seed=1):
    """The CPU stores a flag into host memory (visible to the next device read at once: assumption);
    the device polls it across PCIe, stores its reply flag into host memory (posted), and the CPU polls
    its reply locally.  Returns the round trips (ns), CPU store to CPU seeing the reply."""
    rng = random.Random(seed)
    return [sum(flag_round_trip_parts(p, rng).values()) for _ in range(trials)]


def sync_latencies(p, n_devices, trials, seed=1):
    """Workload 1: device 0 posts an 8 B flag into host memory; devices 1..N-1 poll it with reads, each
    on its own link to the root complex.  Returns trials x (N-1) latencies (ns), write to visibility."""
    if n_devices < 2:
        raise ValueError("sync needs a writer and at least one reader")
    rng = random.Random(seed)
    out = []
    for _ in range(trials):
        landed = p.posted_fraction * _rtt(p, rng)
        out.extend(_poll_detect(p, landed, rng) for _ in range(n_devices - 1))
    return out


def atomic_bounds(p):
    """The three limits (M ops/s) of one device's FetchAdds to one host address: the root complex's
    serial rate, Little's law over the outstanding requests, and the link (an AtomicOp request is a
    64-bit-address header plus the operand; its completion a CplD with the old value)."""
    req = R.TLP_OVERHEAD["MRd"] + ATOMIC_OPERAND
    cpl = R.TLP_OVERHEAD["CplD"] + ATOMIC_OPERAND
    return {"root_complex": p.atomic_mops,
            "outstanding": p.outstanding / p.rtt_mid_ns * 1e3,
            "link": p.tlp_gbs * 1e3 / max(req, cpl)}


def atomic_throughput(p, ops=4000, seed=1):
    """One device with ``outstanding`` FetchAdds in flight on one host address: each travels half a
    round trip to the root complex, which executes them one at a time at ``atomic_mops`` (FIFO), and
    its completion returns in the other half; a completed slot issues the next at once.  Returns
    ops/s after a warm-up."""
    rng = random.Random(seed)
    service = 1e3 / p.atomic_mops
    events = []
    seq = 0
    for _ in range(p.outstanding):
        r = _rtt(p, rng)
        heapq.heappush(events, (r / 2, seq, r))
        seq += 1
    free = 0.0
    done = 0
    warm = min(ops // 5, 200)
    t_warm = last = 0.0
    while done < ops:
        arrive, _, r = heapq.heappop(events)
        start = max(arrive, free)
        free = start + service
        done += 1
        if done == warm:
            t_warm = free
        last = free
        nr = _rtt(p, rng)
        heapq.heappush(events, (free + r / 2 + nr / 2, seq, nr))
        seq += 1
    return (ops - warm) / (last - t_warm) * 1e9


def bulk_bandwidth(p):
    """Workload 3: one device streams reads of host memory.  Useful GB/s = min(link: TLP rate x CplD
    efficiency of an MRRS read split into MPS completions, Little: outstanding x MRRS / round trip,
    host memory).  Returns each bound."""
    payload = min(p.mrrs, p.mps)
    cpl_eff = p.mrrs / R.tlp_bytes(p.mrrs, payload, "CplD")
    link = p.tlp_gbs * cpl_eff
    little = p.outstanding * p.mrrs / p.rtt_mid_ns
    return {"gbs": min(link, little, p.host_mem_gbs), "link_gbs": link, "little_gbs": little,
            "host_mem_gbs": p.host_mem_gbs, "raw_gbs": p.raw_gbs, "completion_efficiency": cpl_eff}


def bulk_bandwidth_gbs(p):
    return bulk_bandwidth(p)["gbs"]
