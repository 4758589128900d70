"""RDMA WRITE plus a polling receiver over RoCEv2: the RDMA side of the CXL.cache comparison.

Path of one RDMA WRITE from a writer to one reader (every default has its source in ``SOURCES``;
"facts §n" is docs/sources.md, "article" is the source article under test):

  1. post + doorbell: the CPU writes a WQE and rings the NIC's doorbell with an MMIO write
     (a posted PCIe write: half a PCIe round trip);
  2. WQE fetch: the NIC DMA-reads the WQE (one PCIe round trip); payloads up to ``inline_max`` bytes
     travel inside the WQE (facts §4.2: perftest inlines up to 400 B by default);
  3. payload DMA read (not inlined): MRd requests and CplD completions of at most MPS bytes, each with
     its TLP overhead (facts §4.4);
  4. NIC transmit processing, then wire serialization of RoCEv2 frames with their real per-frame
     overheads (facts §4.3: 78 B of headers for a WRITE-only/First frame, 62 B for Middle/Last, plus
     20 B of preamble/SFD/IFG; the IB MTU from the Ethernet MTU by the kernel's iboe rule);
  5. cable, one switch hop (cut-through), cable;
  6. remote NIC receive processing, then a PCIe DMA write (posted MWr TLPs) of the payload;
  7. the receiver polls the flag every P, P uniform in [poll_min, poll_max] (article: 1-2 µs); the data
     lands at a uniform phase of that period, so detection waits U(0, P).

Large messages are pipelined: the first MTU-sized chunk pays every stage, the rest moves at the
slowest stage's rate.  PCIe round trips are drawn uniformly from the facts' 300-400 ns range.

The NIC processing time is not guessed: ``nic_tx_ns + nic_rx_ns`` is *derived* (``calibrate_nic``) so
that the model's unloaded latency of a 32 B inline message at the measurement's setup equals the
measured ib_send_lat median (facts §4.2: 0.81-0.83 µs, ConnectX-4 EDR, back to back).

Also here: NIC atomics (FETCH_ADD) with a rate limit, closed-loop contended throughput; bulk-transfer
bandwidth; ring and lock-based (the article's) all-reduce of a gradient.

Analytic functions (no randomness): :func:`ib_mtu`, :func:`frame_bytes`, :func:`frame_payloads`,
:func:`message_wire_bytes`, :func:`wire_efficiency`, :func:`tlp_count`, :func:`tlp_bytes`,
:func:`pcie_efficiency`, :func:`fixed_latency_ns`.  Monte Carlo: :func:`sample_sync`,
:func:`atomic_throughput`.  numpy is not used (``random.Random(seed)`` throughout), so a seed gives the
same numbers on any machine.
"""

import heapq
import math
import random
from dataclasses import dataclass, replace

from .params import ParamSet

__all__ = ["RdmaParams", "SOURCES", "ib_mtu", "frame_bytes", "frame_payloads", "message_wire_bytes",
           "wire_efficiency", "tlp_count", "tlp_bytes", "pcie_efficiency", "pcie_rate_gbs",
           "gen3_x16_tlp_gbs", "calibrate_nic", "write_parts", "fixed_latency_ns", "write_latency", "sample_sync", "flag_round_trips",
           "atomic_rtt_parts", "atomic_throughput", "bulk_bandwidth_gbs", "ring_allreduce_s",
           "lock_allreduce_s", "poll_wait_mean_ns"]

# ---------------------------------------------------------------- RoCEv2 framing (facts §4.3)
ETH, VLAN, IPV4, IPV6, UDP = 14, 4, 20, 40, 8          # Linux include/rdma/ib_pack.h IB_*_BYTES
BTH, RETH, AETH, ATOMIC_ETH, ATOMIC_ACK_ETH, ICRC, FCS = 12, 16, 4, 28, 8, 4, 4
PREAMBLE_SFD, IFG = 8, 12                              # pcie-bench model/eth.py
ETH_MIN_PAYLOAD = 46                                   # 42 with a VLAN tag
IB_MTUS = (256, 512, 1024, 2048, 4096)
IBOE_RESERVE = 96                                      # GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4

# ---------------------------------------------------------------- PCIe Gen5 x16 (facts §4.4)
PCIE_RAW_GBS = 32e9 * 16 * 128 / 130 / 8 / 1e9         # 63.0 GB/s per direction [D]
PCIE_TLP_GBPS = {128: 447.0, 256: 455.0}               # after ACK/FC DLLPs and SKIPs [D]
DLLP_HDR = 8                                           # framing + sequence + LCRC
TLP_HDR = 4
TLP_OVERHEAD = {"MWr": DLLP_HDR + TLP_HDR + 12,        # 64-bit address: 24 B
                "MRd": DLLP_HDR + TLP_HDR + 12,        # no payload
                "CplD": DLLP_HDR + TLP_HDR + 8}        # 20 B
WQE_BYTES = 64                                         # one send WQE (assumption: a 64 B WQE basic block)


@dataclass(frozen=True)
class RdmaParams(ParamSet):
    # host side, PCIe
    pcie_rtt_min_ns: float = 300.0
    pcie_rtt_max_ns: float = 400.0
    mps: int = 256
    pcie_tlp_gbs: float = 0.0         # 0: Gen5 x16 after DLLPs at this MPS (facts §4.4); else this rate
    inline_max: int = 400
    # NIC
    nic_tx_ns: float = None           # None: derived by calibrate_nic (half of the calibrated total each)
    nic_rx_ns: float = None
    nic_wqe_ns: float = 1e3 / 26.0    # per-WQE issue time: 26 M ops/s (HERD)
    atomic_mops: float = 2.7          # NIC atomics on one address (ConnectX-3)
    # wire, fabric
    line_gbps: float = 400.0
    eth_mtu: int = 9000
    vlan: bool = False
    switch_ns: float = 300.0
    cable_ns: float = 10.0            # per cable (two cables through one switch)
    # receiver
    poll_min_ns: float = 1000.0
    poll_max_ns: float = 2000.0
    page_bytes: int = 0               # 0: move exactly the bytes written; 4096: move whole 4 KB pages
    # calibration target (facts §4.2)
    cal_latency_ns: float = 820.0
    cal_line_gbps: float = 100.0
    cal_bytes: int = 32

    def __post_init__(self):
        def bad(name, why):
            raise ValueError(f"{name}={getattr(self, name)!r}: {why}")
        if not 0 < self.pcie_rtt_min_ns <= self.pcie_rtt_max_ns:
            bad("pcie_rtt_min_ns", "need 0 < pcie_rtt_min_ns <= pcie_rtt_max_ns")
        if self.mps not in (128, 256, 512, 1024, 2048, 4096):
            bad("mps", "must be a power of two in 128..4096 (facts §4.4)")
        if not 0 <= self.poll_min_ns <= self.poll_max_ns:
            bad("poll_min_ns", "need 0 <= poll_min_ns <= poll_max_ns")
        if self.line_gbps <= 0 or self.atomic_mops <= 0 or self.nic_wqe_ns < 0:
            bad("line_gbps", "rates must be positive")
        if self.page_bytes < 0:
            bad("page_bytes", "must be >= 0 (0 = exact size)")
        ib_mtu(self.eth_mtu, self.vlan)          # raises if no IB MTU fits
        if self.nic_tx_ns is None or self.nic_rx_ns is None:
            total = calibrate_nic(self)
            object.__setattr__(self, "nic_tx_ns", total / 2 if self.nic_tx_ns is None else self.nic_tx_ns)
            object.__setattr__(self, "nic_rx_ns", total / 2 if self.nic_rx_ns is None else self.nic_rx_ns)
        if self.nic_tx_ns < 0 or self.nic_rx_ns < 0:
            bad("nic_tx_ns", "calibrated NIC time is negative: the other components already exceed the "
                             "measured latency")

    def with_(self, **changes):
        if any(k in changes for k in ("pcie_rtt_min_ns", "pcie_rtt_max_ns", "mps", "pcie_tlp_gbs", "cal_latency_ns",
                                      "cal_line_gbps", "cal_bytes", "inline_max")):
            changes.setdefault("nic_tx_ns", None)   # recalibrate unless the caller fixed them
            changes.setdefault("nic_rx_ns", None)
        return replace(self, **changes)

    @property
    def pcie_rtt_mid_ns(self):
        return (self.pcie_rtt_min_ns + self.pcie_rtt_max_ns) / 2


# name -> (unit, source).  Every default above appears here.
SOURCES = {
    "pcie_rtt_min_ns": ("ns", "facts §4.2 [S]: PCIe round trip 300-400 ns unloaded (Storm SYSTOR'19, "
                              "Neugebauer SIGCOMM'18 via artpol84/poc); each round trip drawn U(min, max)"),
    "pcie_rtt_max_ns": ("ns", "facts §4.2 [S], as above"),
    "mps": ("B", "facts §4.4: MPS range 128-4096; 256 is the value the facts give rates and "
                 "efficiencies for (the size itself is an assumption)"),
    "pcie_tlp_gbs": ("GB/s", "facts §4.4 [D]: PCIe Gen5 x16 after ACK/FC DLLPs and SKIPs, 56.9 GB/s at "
                             "MPS 256 (0 selects it; another value overrides, e.g. Gen3 for validation)"),
    "inline_max": ("B", "facts §4.2 [S]: perftest inlines up to 400 B by default"),
    "nic_tx_ns": ("ns", "derived [D]: half of (facts §4.2 ib_send_lat 0.82 µs median, 32 B inline, "
                        "ConnectX-4 EDR 100G) minus every other modelled component (calibrate_nic)"),
    "nic_rx_ns": ("ns", "derived [D], the other half (the split is an assumption; only the sum matters "
                        "for latency)"),
    "nic_wqe_ns": ("ns", "facts §4.2 HERD: 26 M ops/s (ConnectX-3) used as the NIC's per-WQE issue "
                         "rate (the use is an assumption)"),
    "atomic_mops": ("M ops/s", "facts §4.2 [C]: ConnectX-3 NIC atomics ~2.7 Mops (Kalia, rdma_bench); "
                               "chosen over Connect-IB's 42 M/s, whose README measures L3 atomics and "
                               "is ambiguous about the NIC"),
    "line_gbps": ("Gb/s", "assumption: a 400G NIC, the Ethernet rate that matches a PCIe Gen5 x16 slot "
                          "(facts §4.3 gives frame times at 100/200/400G)"),
    "eth_mtu": ("B", "assumption: jumbo frames (9000) as usual on RoCE fabrics; IB MTU 4096 by the "
                     "iboe rule (facts §4.3)"),
    "vlan": ("bool", "assumption: no VLAN tag (facts §4.3 headers, IPv4)"),
    "switch_ns": ("ns", "assumption: one cut-through switch hop of 300 ns (no switch latency in the "
                        "facts)"),
    "cable_ns": ("ns", "assumption: 2 m of cable at ~5 ns/m per link"),
    "poll_min_ns": ("ns", "article: receivers poll every 1-2 µs"),
    "poll_max_ns": ("ns", "article: receivers poll every 1-2 µs"),
    "page_bytes": ("B", "facts §4.3: an RDMA WRITE moves exactly its byte count (an 8 B write is one "
                        "106 B frame), so 0 = exact; 4096 is the article's 4 KB-page claim, an option"),
    "cal_latency_ns": ("ns", "facts §4.2 [C]: ib_send_lat 0.81-0.83 µs, 32 B inline, ConnectX-4 EDR, "
                             "PCIe Gen3 x16 (Potter thesis); midpoint"),
    "cal_line_gbps": ("Gb/s", "facts §4.2: EDR 100G of that measurement"),
    "cal_bytes": ("B", "facts §4.2: 32 B inline of that measurement"),
}


# ---------------------------------------------------------------- analytic: wire
def ib_mtu(eth_mtu, vlan=False):
    """Active IB MTU for an Ethernet MTU: the largest of 256..4096 that fits in eth_mtu - 96 B
    (Linux iboe_get_mtu, facts §4.3).  1500 -> 1024; 4200 or 9000 -> 4096."""
    room = eth_mtu - IBOE_RESERVE
    fit = [m for m in IB_MTUS if m <= room]
    if not fit:
        raise ValueError(f"eth_mtu={eth_mtu}: no IB MTU fits in {room} B (facts §4.3)")
    return fit[-1]


def _pad4(n):
    # BTH PadCnt pads a payload to a multiple of 4 B (IBTA; not in the facts, an assumption here).
    return (n + 3) & ~3


def frame_bytes(payload, reth=True, vlan=False, extra_hdr=0, wire=True):
    """Bytes of one RoCEv2 frame (IPv4) carrying ``payload`` bytes: Ethernet 14 (+4 VLAN), IPv4 20,
    UDP 8, BTH 12, RETH 16 (WRITE First/Only), ``extra_hdr`` (e.g. AtomicETH 28), ICRC 4, FCS 4, padded
    to the Ethernet minimum; with ``wire`` plus 20 B preamble/SFD/IFG (facts §4.3)."""
    l3 = IPV4 + UDP + BTH + (RETH if reth else 0) + extra_hdr + _pad4(payload) + ICRC
    l3 = max(l3, ETH_MIN_PAYLOAD - (4 if vlan else 0))
    frame = ETH + (VLAN if vlan else 0) + l3 + FCS
    return frame + (PREAMBLE_SFD + IFG if wire else 0)


def frame_payloads(msg_bytes, mtu):
    """Payload bytes of each frame of one RDMA WRITE of ``msg_bytes`` (a 0-byte write is one frame)."""
    if msg_bytes <= 0:
        return [0]
    full, rest = divmod(msg_bytes, mtu)
    return [mtu] * full + ([rest] if rest else [])


def _moved(msg_bytes, page_bytes):
    """Bytes actually transferred: exact, or rounded up to whole pages."""
    if page_bytes:
        return max(1, math.ceil(msg_bytes / page_bytes)) * page_bytes
    return msg_bytes


def message_wire_bytes(msg_bytes, eth_mtu=9000, vlan=False, page_bytes=0):
    """Wire bytes of one RDMA WRITE: WRITE Only (one frame) or First/Middle.../Last, each frame with its
    headers and preamble/IFG.  64 B -> 162, 8 B -> 106 (facts §4.3 [D])."""
    moved = _moved(msg_bytes, page_bytes)
    parts = frame_payloads(moved, ib_mtu(eth_mtu, vlan))
    return sum(frame_bytes(b, reth=(i == 0), vlan=vlan) for i, b in enumerate(parts))


def wire_efficiency(msg_bytes, eth_mtu=9000, vlan=False, page_bytes=0):
    """Useful bytes (the ``msg_bytes`` the application wrote) over wire bytes."""
    return msg_bytes / message_wire_bytes(msg_bytes, eth_mtu, vlan, page_bytes)


# ---------------------------------------------------------------- analytic: PCIe
def tlp_count(size, mps=256, kind="MWr"):
    """TLPs to move ``size`` bytes: MWr or CplD of at most MPS payload bytes each (facts §4.4)."""
    return max(1, math.ceil(size / mps))


def tlp_bytes(size, mps=256, kind="MWr"):
    """Link bytes of ``size`` payload bytes as MWr (24 B overhead each, 64-bit address) or CplD
    (20 B each) TLPs (facts §4.4)."""
    return size + tlp_count(size, mps, kind) * TLP_OVERHEAD[kind]


def pcie_efficiency(size, mps=256, kind="MWr"):
    """64 B MWr 72.7 %, 8 B MWr 25 %, 256 B MWr 91.4 % (facts §4.4 [D])."""
    return size / tlp_bytes(size, mps, kind)


def pcie_rate_gbs(mps=256, override=0.0):
    """TLP-level rate of a Gen5 x16 direction after DLLPs and SKIPs (facts §4.4 [D]): 56.9 GB/s at
    MPS 256, 55.9 at 128 (the MPS-256 figure is used for larger MPS: assumption).  ``override`` > 0
    replaces it."""
    if override:
        return override
    return PCIE_TLP_GBPS.get(mps, PCIE_TLP_GBPS[256]) / 8


def gen3_x16_tlp_gbs():
    """PCIe Gen3 x16 (8 GT/s, 128b/130b) with the Gen5 DLLP/SKIP factor of facts §4.4 (455/504.1 at MPS
    256) applied: 14.2 GB/s [D].  Used only to replay the facts §4.2 measurements (a Gen3 system)."""
    raw = 8e9 * 16 * 128 / 130 / 8 / 1e9
    return raw * PCIE_TLP_GBPS[256] / (PCIE_RAW_GBS * 8)


# ---------------------------------------------------------------- latency model
def _rtt(p, rng):
    return p.pcie_rtt_mid_ns if rng is None else rng.uniform(p.pcie_rtt_min_ns, p.pcie_rtt_max_ns)


def _stage_times(p, nbytes, line_gbps, eth_mtu=None):
    """Serialization time (ns) of ``nbytes`` of payload in each pipelined stage: PCIe read (CplD),
    wire, PCIe write (MWr)."""
    rate = pcie_rate_gbs(p.mps, p.pcie_tlp_gbs)                       # GB/s == B/ns
    read = tlp_bytes(nbytes, p.mps, "CplD") / rate
    wire = message_wire_bytes(nbytes, p.eth_mtu if eth_mtu is None else eth_mtu, p.vlan) / (line_gbps / 8)
    write = tlp_bytes(nbytes, p.mps, "MWr") / rate
    return read, wire, write


def write_parts(p, msg_bytes, rng=None, line_gbps=None, switch=True, inline=None):
    """Components (ns) of one unloaded RDMA WRITE of ``msg_bytes`` until the data is in the reader's
    memory (no polling).  ``rng`` draws each PCIe round trip from [min, max]; None uses the midpoint."""
    line = p.line_gbps if line_gbps is None else line_gbps
    moved = _moved(msg_bytes, p.page_bytes)
    inl = moved <= p.inline_max if inline is None else inline
    rate = pcie_rate_gbs(p.mps, p.pcie_tlp_gbs)
    parts = {
        "doorbell": _rtt(p, rng) / 2,                                         # MMIO posted write
        "wqe_fetch": _rtt(p, rng) + tlp_bytes(WQE_BYTES + (moved if inl else 0), p.mps, "CplD") / rate,
        "payload_read": 0.0 if inl else _rtt(p, rng),
        "nic_tx": p.nic_tx_ns,
        "cables": p.cable_ns * (2 if switch else 1),
        "switch": p.switch_ns if switch else 0.0,
        "nic_rx": p.nic_rx_ns,
        "dma_write": _rtt(p, rng) / 2,                                        # posted MWr lands
    }
    mtu = ib_mtu(p.eth_mtu, p.vlan)
    first = min(moved, mtu)
    s_first = _stage_times(p, first, line)
    if inl:
        s_first = (0.0,) + s_first[1:]
    rest = moved - first
    if rest > 0:
        s_rest = _stage_times(p, rest, line)
        # the rest streams behind the first chunk at the slowest stage's rate
        parts["serialization"] = sum(s_first) + max(s_rest)
    else:
        parts["serialization"] = sum(s_first)
    return parts


def calibrate_nic(p):
    """nic_tx + nic_rx such that the unloaded latency of a ``cal_bytes`` inline message, back to back at
    ``cal_line_gbps`` on the measurement's PCIe Gen3 x16, with mid-range PCIe round trips, equals
    ``cal_latency_ns`` (facts §4.2)."""
    q = replace(p, nic_tx_ns=0.0, nic_rx_ns=0.0, page_bytes=0, pcie_tlp_gbs=gen3_x16_tlp_gbs())
    parts = write_parts(q, p.cal_bytes, None, line_gbps=p.cal_line_gbps, switch=False, inline=True)
    return p.cal_latency_ns - sum(parts.values())


def fixed_latency_ns(p, msg_bytes):
    """Lower bound of a WRITE's latency to visibility: every component at its minimum (PCIe round trips
    at pcie_rtt_min_ns) and no polling wait."""
    q = replace(p, pcie_rtt_max_ns=p.pcie_rtt_min_ns)
    return sum(write_parts(q, msg_bytes, None).values())


def poll_wait_mean_ns(p):
    """Mean detection wait: E[U(0, P)] with P ~ U(poll_min, poll_max)."""
    return (p.poll_min_ns + p.poll_max_ns) / 4


def _poll(p, rng):
    period = rng.uniform(p.poll_min_ns, p.poll_max_ns)
    return rng.uniform(0.0, period)


def write_latency(p, msg_bytes, rng):
    """One sampled latency to visibility (write + poll detection) of a single WRITE."""
    return sum(write_parts(p, msg_bytes, rng).values()) + _poll(p, rng)


def sample_sync(p, n_devices, msg_bytes, trials, seed=1):
    """Workload 1 on RDMA: one writer updates ``msg_bytes`` and pushes it with one RDMA WRITE to each of
    the ``n_devices - 1`` readers (RC: no multicast), posted as a batch behind one doorbell; the NIC
    issues WQE k at k * max(nic_wqe_ns, frame time).  Each reader polls.  Returns the latencies (ns) from
    the post to each reader seeing the data, ``trials * (n_devices - 1)`` samples."""
    if n_devices < 2:
        raise ValueError("sync needs a writer and at least one reader")
    rng = random.Random(seed)
    readers = n_devices - 1
    moved = _moved(msg_bytes, p.page_bytes)
    issue = max(p.nic_wqe_ns, message_wire_bytes(moved, p.eth_mtu, p.vlan) / (p.line_gbps / 8))
    out = []
    for _ in range(trials):
        base = write_parts(p, msg_bytes, rng)
        # one doorbell and one WQE fetch for the batch; per-reader DMA write and polling
        shared = base["doorbell"] + base["wqe_fetch"] + base["payload_read"]
        for k in range(readers):
            rest = base["nic_tx"] + base["cables"] + base["switch"] + base["nic_rx"] + base["serialization"]
            out.append(shared + k * issue + rest + _rtt(p, rng) / 2 + _poll(p, rng))
    return out


def flag_round_trips(p, msg_bytes, trials, seed=1):
    """Flag ping-pong between two hosts: A RDMA-WRITEs the flag into B's memory, B polls it (every
    P, as in workload 1), B RDMA-WRITEs its reply into A's memory, A polls.  Returns the round trips
    (ns): two sampled write latencies to visibility each."""
    rng = random.Random(seed)
    return [write_latency(p, msg_bytes, rng) + write_latency(p, msg_bytes, rng) for _ in range(trials)]


# ---------------------------------------------------------------- atomics
def atomic_rtt_parts(p, rng=None):
    """Components (ns) of one FETCH_ADD round trip at an idle responder: post, WQE fetch, request frame
    (AtomicETH), switch, responder NIC, responder's PCIe read-modify-write (a round trip to read; the
    write is posted), response frame (AETH + AtomicAckETH), switch, requester NIC, result DMA write;
    the requester spins on its completion (no poll interval)."""
    line = p.line_gbps / 8
    req = frame_bytes(0, reth=False, extra_hdr=ATOMIC_ETH, vlan=p.vlan) / line
    ack = frame_bytes(0, reth=False, extra_hdr=AETH + ATOMIC_ACK_ETH, vlan=p.vlan) / line
    rate = pcie_rate_gbs(p.mps, p.pcie_tlp_gbs)
    return {
        "doorbell": _rtt(p, rng) / 2,
        "wqe_fetch": _rtt(p, rng) + tlp_bytes(WQE_BYTES, p.mps, "CplD") / rate,
        "request": p.nic_tx_ns + req + 2 * p.cable_ns + p.switch_ns + p.nic_rx_ns,
        "responder_rmw": _rtt(p, rng),
        "response": p.nic_tx_ns + ack + 2 * p.cable_ns + p.switch_ns + p.nic_rx_ns,
        "result_dma": _rtt(p, rng) / 2,
    }


def atomic_throughput(p, n_devices, ops=4000, seed=1):
    """Workload 2 on RDMA: ``n_devices`` clients each keep one FETCH_ADD outstanding on one counter.
    The responder NIC serves atomics to one address one at a time at ``atomic_mops`` (FIFO); the rest
    of each round trip is sampled per op.  Returns ops/s (measured after a warm-up)."""
    rng = random.Random(seed)
    service = 1e3 / p.atomic_mops                   # ns per atomic at the responder
    events = []                                      # (arrival at responder, seq, client)
    seq = 0
    for c in range(n_devices):
        parts = atomic_rtt_parts(p, rng)
        heapq.heappush(events, (parts["doorbell"] + parts["wqe_fetch"] + parts["request"], seq, c, parts))
        seq += 1
    free_at = 0.0
    done = 0
    warm = min(ops // 5, 200)
    t_warm = None
    last = 0.0
    while done < ops:
        arrive, _, c, parts = heapq.heappop(events)
        start = max(arrive, free_at)
        free_at = start + service
        finish = start + max(service, parts["responder_rmw"]) + parts["response"] + parts["result_dma"]
        done += 1
        if done == warm:
            t_warm = free_at
        last = free_at
        nxt = atomic_rtt_parts(p, rng)
        heapq.heappush(events, (finish + nxt["doorbell"] + nxt["wqe_fetch"] + nxt["request"], seq, c, nxt))
        seq += 1
    return (ops - warm) / (last - t_warm) * 1e9


# ---------------------------------------------------------------- bandwidth and collectives
def bulk_bandwidth_gbs(p, msg_bytes=1 << 20):
    """Workload 3 on RDMA: streaming WRITEs of ``msg_bytes``: the slowest of the sender's PCIe read,
    the wire, and the receiver's PCIe write, counted in useful bytes (GB/s = 1e9 B/s)."""
    read, wire, write = _stage_times(p, _moved(msg_bytes, p.page_bytes), p.line_gbps)
    return msg_bytes / max(read, wire, write)


def ring_allreduce_s(p, total_bytes, n_gpus, bucket_bytes, alpha_ns=None):
    """Ring all-reduce (reduce-scatter + all-gather) of ``total_bytes`` in buckets: each bucket takes
    2(N-1) steps; a step moves bucket/N bytes over each GPU's NIC (full duplex, non-blocking switch)
    and pays ``alpha_ns`` (default: unloaded write latency + mean poll wait)."""
    n_buckets = math.ceil(total_bytes / bucket_bytes)
    chunk = bucket_bytes / n_gpus
    alpha = (sum(write_parts(p, 8).values()) + poll_wait_mean_ns(p)) if alpha_ns is None else alpha_ns
    step = alpha + chunk / bulk_bandwidth_gbs(p, max(1, int(chunk)))
    return n_buckets * 2 * (n_gpus - 1) * step * 1e-9


def lock_allreduce_s(total_bytes, n_gpus, bucket_bytes, acquire_ns, release_ns, bw_gbs, bcast_gbs=None):
    """The article's lock-based all-reduce step, per bucket: each GPU in turn takes a lock on a shared
    accumulator (``acquire_ns``), moves its bucket there (bucket / ``bw_gbs``) and releases the lock (the
    next GPU sees the release after ``release_ns``); then every GPU fetches the result, sharing
    ``bcast_gbs`` (default ``bw_gbs``: the accumulator's link serves them one after the other).
    Interconnect-neutral: the CXL side calls it with its own numbers."""
    n_buckets = math.ceil(total_bytes / bucket_bytes)
    per_gpu = acquire_ns + bucket_bytes / bw_gbs + release_ns
    bcast = (n_gpus - 1) * bucket_bytes / (bcast_gbs or bw_gbs)
    return n_buckets * (n_gpus * per_gpu + bcast) * 1e-9
