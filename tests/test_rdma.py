"""The RDMA WRITE + polling model (models/rdma.py): the analytic parts against the numbers in the facts,
the calibration and its out-of-sample check, and model invariants as Hypothesis properties.

Ref: docs/sources.md §4.2 (ib_send_lat measurements, NIC atomics, PCIe round trip), §4.3 (RoCEv2 headers,
wire extras, MTU rule, derived frame sizes), §4.4 (PCIe Gen5 rates and TLP overheads).
"""

import pytest
from hypothesis import given, settings, strategies as st

from models import rdma as R
from models.rdma import RdmaParams

P = RdmaParams()


# ---------------------------------------------------------------- wire bytes (facts §4.3 [D])
def test_write_only_frame_sizes_from_the_facts():
    assert R.frame_bytes(64) - 64 == 98                          # 78 B headers + 20 B preamble/IFG
    assert R.frame_bytes(64, wire=False) - 64 == 78
    assert R.message_wire_bytes(64) == 162                       # 64 B write: 162 B on the wire
    assert R.message_wire_bytes(8) == 106                        # 8 B flag write: 106 B
    assert R.frame_bytes(0, reth=False, extra_hdr=R.AETH, wire=False) == 66   # RC ACK: 66 B (+20)
    assert round(R.wire_efficiency(64), 3) == 0.395             # 39.5 %
    # 12.96 ns at 100G, 6.48 at 200G, 3.24 at 400G
    for gbps, ns in ((100, 12.96), (200, 6.48), (400, 3.24)):
        assert R.message_wire_bytes(64) * 8 / gbps == pytest.approx(ns)


def test_ib_mtu_rule():
    assert R.ib_mtu(1500) == 1024
    assert R.ib_mtu(4200) == 4096 and R.ib_mtu(9000) == 4096
    with pytest.raises(ValueError, match="eth_mtu"):
        R.ib_mtu(300)


def test_multi_frame_writes_carry_reth_only_in_the_first_frame():
    # 4097 B at IB MTU 4096: WRITE First (4096 B + 78 + 20) and WRITE Last (1 B padded to 4, + 62 + 20)
    assert R.frame_payloads(4097, 4096) == [4096, 1]
    assert R.message_wire_bytes(4097) == (4096 + 98) + (4 + 82)
    # the same 4097 B at Ethernet MTU 1500 (IB MTU 1024): five frames
    assert len(R.frame_payloads(4097, R.ib_mtu(1500))) == 5


def test_page_granularity_moves_whole_pages():
    assert R.message_wire_bytes(2) == 4 + 98                     # 2 B padded to 4 (BTH PadCnt)
    assert R.message_wire_bytes(2, page_bytes=4096) == 4096 + 98
    assert R.message_wire_bytes(4097, page_bytes=4096) == R.message_wire_bytes(8192)


# ---------------------------------------------------------------- PCIe (facts §4.4 [D])
def test_pcie_tlp_overheads_and_efficiencies():
    assert R.TLP_OVERHEAD == {"MWr": 24, "MRd": 24, "CplD": 20}
    assert round(R.pcie_efficiency(64), 3) == 0.727              # 64 B MWr 72.7 %
    assert R.pcie_efficiency(8) == 0.25                          # 8 B MWr 25 %
    assert round(R.pcie_efficiency(256), 3) == 0.914             # 256 B MWr 91.4 %
    assert R.tlp_count(4096, 256) == 16 and R.tlp_count(4097, 256) == 17 and R.tlp_count(1, 256) == 1
    assert R.tlp_bytes(4096, 256, "CplD") == 4096 + 16 * 20
    assert round(R.PCIE_RAW_GBS, 1) == 63.0
    assert round(R.pcie_rate_gbs(256), 1) == 56.9 and round(R.pcie_rate_gbs(128), 1) == 55.9


# ---------------------------------------------------------------- calibration and validation (§4.2)
def test_nic_time_is_calibrated_to_the_measured_small_message_latency():
    v = P.with_(pcie_tlp_gbs=R.gen3_x16_tlp_gbs(), line_gbps=P.cal_line_gbps)
    assert sum(R.write_parts(v, 32, switch=False, inline=True).values()) == pytest.approx(820.0)
    assert 0 < P.nic_tx_ns + P.nic_rx_ns < 200


@pytest.mark.parametrize("size, measured", [(1024, (1520, 1610)), (4096, (2250, 2250)), (32768, (4570, 4570))])
def test_larger_messages_are_within_15_percent_of_the_measurements(size, measured):
    # Out of sample: only the 32 B point was used to calibrate.
    v = P.with_(pcie_tlp_gbs=R.gen3_x16_tlp_gbs(), line_gbps=P.cal_line_gbps)
    model = sum(R.write_parts(v, size, switch=False).values())
    assert measured[0] * 0.85 <= model <= measured[1] * 1.15


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="pcie_rtt_min_ns"):
        RdmaParams(pcie_rtt_min_ns=500, pcie_rtt_max_ns=400)
    with pytest.raises(ValueError, match="mps"):
        RdmaParams(mps=100)
    with pytest.raises(ValueError, match="poll_min_ns"):
        RdmaParams(poll_min_ns=3000, poll_max_ns=2000)
    with pytest.raises(ValueError, match="negative"):
        RdmaParams(cal_latency_ns=100)        # the other parts already exceed it


# ---------------------------------------------------------------- Monte Carlo
def test_sync_sampler_is_reproducible_and_sized():
    a = R.sample_sync(P, 8, 8, 50, seed=3)
    assert a == R.sample_sync(P, 8, 8, 50, seed=3)
    assert a != R.sample_sync(P, 8, 8, 50, seed=4)
    assert len(a) == 50 * 7
    with pytest.raises(ValueError):
        R.sample_sync(P, 1, 8, 10)


def test_polling_adds_between_zero_and_one_period():
    no_poll = P.with_(poll_min_ns=0, poll_max_ns=0)
    a = R.sample_sync(no_poll, 2, 8, 400, seed=1)
    b = R.sample_sync(P, 2, 8, 400, seed=1)
    mean = lambda v: sum(v) / len(v)
    assert 0.5 * R.poll_wait_mean_ns(P) < mean(b) - mean(a) < 1.5 * R.poll_wait_mean_ns(P)
    assert max(b) - min(a) <= P.poll_max_ns + (P.pcie_rtt_max_ns - P.pcie_rtt_min_ns) * 3


def test_atomics_are_rate_limited_when_contended_and_latency_bound_when_not():
    rtt = sum(R.atomic_rtt_parts(P).values())
    one = R.atomic_throughput(P, 1, ops=1000) / 1e6
    assert one == pytest.approx(1e3 / rtt, rel=0.1)          # one client: one op per round trip
    many = R.atomic_throughput(P, 16, ops=2000) / 1e6
    assert many == pytest.approx(P.atomic_mops, rel=0.01)    # saturated: the NIC's atomic rate


# ---------------------------------------------------------------- properties
params = st.builds(
    RdmaParams,
    pcie_rtt_min_ns=st.floats(200, 350), pcie_rtt_max_ns=st.just(400.0),
    mps=st.sampled_from([128, 256, 512]),
    line_gbps=st.sampled_from([25.0, 100.0, 200.0, 400.0, 800.0]),
    eth_mtu=st.sampled_from([1500, 4200, 9000]),
    switch_ns=st.floats(0, 1000), cable_ns=st.floats(0, 20),
    poll_min_ns=st.floats(0, 2000), poll_max_ns=st.just(2000.0),
    page_bytes=st.sampled_from([0, 4096]),
    atomic_mops=st.floats(0.5, 50),
)
sizes = st.integers(1, 1 << 20)


@settings(max_examples=60)
@given(params, st.integers(1, 1 << 16), st.integers(2, 9), st.integers(0, 2 ** 16))
def test_latency_is_at_least_the_sum_of_its_fixed_parts(p, size, n, seed):
    lo = R.fixed_latency_ns(p, size)
    assert lo > 0
    for v in R.sample_sync(p, n, size, 3, seed=seed):
        assert v >= lo - 1e-6
    # and no sample exceeds the fixed parts with every random part at its maximum
    hi = R.fixed_latency_ns(p.with_(pcie_rtt_min_ns=p.pcie_rtt_max_ns, nic_tx_ns=p.nic_tx_ns,
                                    nic_rx_ns=p.nic_rx_ns), size)
    fan = (n - 2) * max(p.nic_wqe_ns, R.message_wire_bytes(size, p.eth_mtu, p.vlan, p.page_bytes)
                        / (p.line_gbps / 8))
    for v in R.sample_sync(p, n, size, 3, seed=seed):
        assert v <= hi + fan + p.poll_max_ns + 1e-6


@given(params, sizes)
def test_bulk_throughput_never_exceeds_the_link_or_pcie_rate(p, size):
    bw = R.bulk_bandwidth_gbs(p, size)
    assert 0 < bw <= p.line_gbps / 8
    assert bw <= R.pcie_rate_gbs(p.mps)


@settings(max_examples=40)
@given(params, st.integers(1, 12))
def test_atomic_throughput_never_exceeds_the_rate_limit_or_the_clients_round_trips(p, n):
    x = R.atomic_throughput(p, n, ops=300) / 1e6
    rtt_min = sum(R.atomic_rtt_parts(p.with_(pcie_rtt_max_ns=p.pcie_rtt_min_ns, nic_tx_ns=p.nic_tx_ns,
                                             nic_rx_ns=p.nic_rx_ns)).values())
    assert x <= p.atomic_mops * (1 + 1e-9)
    assert x <= n * 1e3 / rtt_min * (1 + 1e-9)


@given(params, sizes, sizes)
def test_wire_bytes_and_fixed_latency_are_monotonic_in_size(p, a, b):
    a, b = min(a, b), max(a, b)
    assert R.message_wire_bytes(a, p.eth_mtu, p.vlan, p.page_bytes) <= \
        R.message_wire_bytes(b, p.eth_mtu, p.vlan, p.page_bytes)
    assert R.tlp_bytes(a, p.mps) <= R.tlp_bytes(b, p.mps)
    assert R.fixed_latency_ns(p, a) <= R.fixed_latency_ns(p, b) + 1e-9


@given(st.sampled_from([1500, 4200, 9000]), sizes)
def test_efficiency_is_below_one_and_below_the_full_frame_limit(mtu, size):
    m = R.ib_mtu(mtu)
    assert 0 < R.wire_efficiency(size, mtu) <= m / (m + 62 + 20)
    assert 0 < R.pcie_efficiency(size, 256) <= 256 / (256 + 24)
