"""Two GPUs on a direct NVLink-4-class load/store link: each loads, stores and does atomics on the other's
memory; synchronization is a store into the peer's memory that the peer polls.

Every default has its source in ``SOURCES`` ("[Pn]" is the source list of docs/comparison.md):

* a store into the peer's memory becomes visible there after ``store_one_way_ns``, *derived* from
  NVIDIA's own latency figure for its flag-polling protocol: NCCL's tuning model charges one NVLink
  step of its LL protocol (data and flag stored into the peer's buffer, the peer polling it) 0.6 µs
  ([P7]), so the store costs that minus the mean polling wait;
* a GPU polls its own memory with volatile loads, one every ``poll_ns``: a store that landed is seen
  after U(0, poll_ns);
* bandwidth: ``links`` NVLink 4 links of ``link_gbs`` per direction each ([P6]), of which the measured
  fraction ``achieved_fraction`` is delivered to stores ([P8]);
* atomics on one address in the peer's memory: the peer executes them one at a time, one every
  ``peer_atomic_ns``; the issuing GPU keeps ``threads`` in flight (one per thread), each a round trip
  of two one-way crossings; each atomic occupies ``atomic_wire_bytes`` of the link.

Workloads, the same as the other fabrics': :func:`flag_round_trips`, :func:`sync_latencies` (GPU 0
stores the flag into each reader's memory), :func:`atomic_throughput`, :func:`bulk_bandwidth_gbs`.
"""

import random
from dataclasses import dataclass

from .params import ParamSet

__all__ = ["NvlinkParams", "SOURCES", "flag_round_trips", "sync_latencies", "atomic_bounds",
           "atomic_throughput", "bulk_bandwidth", "bulk_bandwidth_gbs"]


@dataclass(frozen=True)
class NvlinkParams(ParamSet):
    step_ns: float = 600.0
    poll_ns: float = 200.0
    links: int = 18
    link_gbs: float = 25.0
    achieved_fraction: float = 376.0 / 450.0
    peer_atomic_ns: float = 1.0
    threads: int = 132 * 2048
    atomic_wire_bytes: int = 32

    def __post_init__(self):
        def bad(name, why):
            raise ValueError(f"{name}={getattr(self, name)!r}: {why}")
        for name in ("step_ns", "link_gbs", "peer_atomic_ns"):
            if not getattr(self, name) > 0:
                bad(name, "must be > 0")
        if not 0 <= self.poll_ns <= 2 * self.step_ns:
            bad("poll_ns", "must be in 0..2 x step_ns (the step includes the mean polling wait)")
        if not 1 <= self.links <= 18:
            bad("links", "must be 1..18 (an NVLink 4 GPU has 18 links, [P6])")
        if not 0 < self.achieved_fraction <= 1:
            bad("achieved_fraction", "must be in (0, 1]")
        if self.threads < 1:
            bad("threads", "must be >= 1")
        if self.atomic_wire_bytes < 1:
            bad("atomic_wire_bytes", "must be >= 1")

    @property
    def store_one_way_ns(self):
        """A store's crossing to the peer: NCCL's step less its mean polling wait (derived)."""
        return self.step_ns - self.poll_ns / 2

    @property
    def raw_gbs(self):
        """Signalling rate of one direction: links x per-link rate."""
        return self.links * self.link_gbs


SOURCES = {
    "step_ns": ("ns", "vendor model constant (docs/comparison.md [P7]): NVIDIA NCCL src/graph/tuning.cc "
                      "hwLat[NVLINK] for the LL protocol, 0.6 µs per step: a flag stored into the peer's "
                      "memory and polled there; not a measurement, the one public NVLink flag latency"),
    "poll_ns": ("ns", "assumption: a polling volatile load is served by the GPU's own L2 every 200 ns; the "
                      "store crossing is derived as step_ns - poll_ns / 2"),
    "links": ("links", "vendor document (docs/comparison.md [P6], NVIDIA H100 architecture): 18 NVLink 4 "
                       "links per GPU; all 18 to the one peer is an assumption (H100 NVL pairs: 600 GB/s)"),
    "link_gbs": ("GB/s", "vendor document ([P6]): NVLink 4, 900 GB/s bidirectional over 18 links = 25 GB/s "
                         "per link per direction"),
    "achieved_fraction": ("fraction", "measured (docs/comparison.md [P8]): p2pBandwidthLatencyTest on HGX "
                                      "H100 SXM, 371-377 GB/s of 450 unidirectional P2P writes; 376/450"),
    "peer_atomic_ns": ("ns", "assumption: the peer's L2 executes one atomic to one address per ns (about one "
                             "per cycle); no published same-address NVLink atomic rate found"),
    "threads": ("threads", "vendor document ([P6]): H100 SXM 132 SMs x 2048 resident threads, one atomic "
                           "in flight each"),
    "atomic_wire_bytes": ("B", "assumption: an atomic request is a 16 B header and a 16 B operand flit"),
}


def _seen(p, landed, rng):
    """A GPU polling its own memory every ``poll_ns`` at a random phase sees a store that landed at
    ``landed`` after U(0, poll_ns)."""
    return landed + rng.uniform(0.0, p.poll_ns)


def flag_round_trips(p, trials, seed=1):
    """GPU A stores a flag into GPU B's memory, B polls its own memory, then B stores its reply into A's
    memory and A polls its own.  Returns the round trips (ns)."""
    rng = random.Random(seed)
    out = []
    for _ in range(trials):
        b_sees = _seen(p, p.store_one_way_ns, rng)
        out.append(_seen(p, b_sees + p.store_one_way_ns, rng))
    return out


def sync_latencies(p, n_devices, trials, seed=1):
    """Workload 1: GPU 0 stores the flag into each reader's memory (the stores leave together, from
    as many threads: assumption); each of GPUs 1..N-1 polls its own memory.  Returns trials x (N-1)
    latencies (ns)."""
    if n_devices < 2:
        raise ValueError("sync needs a writer and at least one reader")
    rng = random.Random(seed)
    return [_seen(p, p.store_one_way_ns, rng) for _ in range(trials * (n_devices - 1))]


def atomic_bounds(p):
    """The limits (M ops/s) of one GPU's atomics to one address in the peer's memory."""
    rtt = 2 * p.store_one_way_ns
    return {"peer": 1e3 / p.peer_atomic_ns,
            "in_flight": p.threads / rtt * 1e3,
            "link": p.raw_gbs * p.achieved_fraction * 1e3 / p.atomic_wire_bytes}


def atomic_throughput(p):
    """ops/s: the smallest of the bounds (every atomic is independent; no randomness)."""
    return min(atomic_bounds(p).values()) * 1e6


def bulk_bandwidth(p):
    raw = p.raw_gbs
    return {"gbs": raw * p.achieved_fraction, "raw_gbs": raw}


def bulk_bandwidth_gbs(p):
    return bulk_bandwidth(p)["gbs"]
