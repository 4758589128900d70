"""The PCIe host-polling baseline (models/pcie_polling.py): its figures follow from its parameters.

Ref: docs/sources.md §4.2 (PCIe round trip 300-400 ns, root-complex atomics), §4.4 (Gen5 x16 rate and
TLP overheads); docs/comparison.md [P3]-[P5].
"""

import pytest
from hypothesis import given, settings, strategies as st

from models import pcie_polling as P
from models import rdma as R
from models.pcie_polling import PcieParams

D = PcieParams()


def test_defaults_are_gen5_x16_with_the_facts_overheads():
    assert round(D.raw_gbs, 1) == 63.0                       # facts §4.4: 32 GT/s x16, 128b/130b
    assert round(D.tlp_gbs, 1) == 56.9                       # after DLLPs and SKIPs, MPS 256
    b = P.bulk_bandwidth(D)
    # a 512 B read comes back as two 256 B CplDs of 20 B overhead each
    assert b["completion_efficiency"] == pytest.approx(512 / (512 + 2 * 20))
    assert b["gbs"] == pytest.approx(D.tlp_gbs * 512 / 552)


def test_doubling_the_pcie_round_trip_doubles_the_pcie_part_of_the_ping_pong():
    # Same seed, every round trip drawn twice as long: the device's polling and its posted write
    # double, the CPU's local part does not move.
    two = D.with_(rtt_min_ns=2 * D.rtt_min_ns, rtt_max_ns=2 * D.rtt_max_ns)
    rng_a, rng_b = P.random.Random(7), P.random.Random(7)
    for _ in range(200):
        a, b = P.flag_round_trip_parts(D, rng_a), P.flag_round_trip_parts(two, rng_b)
        assert b["device_poll"] == pytest.approx(2 * a["device_poll"])
        assert b["posted_write"] == pytest.approx(2 * a["posted_write"])
        assert b["cpu_poll"] == pytest.approx(a["cpu_poll"])
        assert sum(b.values()) - sum(a.values()) == pytest.approx(a["device_poll"] + a["posted_write"])


@pytest.mark.parametrize("name", ["cpu_miss_ns", "device_turnaround_ns"])
def test_a_fixed_cost_adds_exactly_once_to_every_round_trip(name):
    more = D.with_(**{name: getattr(D, name) + 100.0})
    for a, b in zip(P.flag_round_trips(D, 300, seed=3), P.flag_round_trips(more, 300, seed=3)):
        assert b - a == pytest.approx(100.0)


params = st.builds(PcieParams, rtt_min_ns=st.floats(50, 400), rtt_max_ns=st.just(400.0),
                   posted_fraction=st.floats(0.1, 1.0), cpu_spin_ns=st.floats(1, 100),
                   cpu_miss_ns=st.floats(0, 200), device_turnaround_ns=st.floats(0, 50),
                   atomic_mops=st.floats(1, 500), outstanding=st.integers(1, 768),
                   mps=st.sampled_from([128, 256, 512]), mrrs=st.sampled_from([128, 256, 512, 1024, 4096]),
                   lanes=st.sampled_from([1, 4, 8, 16]), gts=st.sampled_from([8.0, 16.0, 32.0]))


@settings(max_examples=40)
@given(params, st.integers(0, 2 ** 16))
def test_device_polling_sees_a_value_within_half_to_one_and_a_half_round_trips(p, seed):
    # The detecting read reaches the host after the value landed (its second half is still to come),
    # and it started before the previous read's sample point had passed the landing.
    rng = P.random.Random(seed)
    for _ in range(20):
        parts = P.flag_round_trip_parts(p, rng)
        assert p.rtt_min_ns / 2 - 1e-9 <= parts["device_poll"] <= 1.5 * p.rtt_max_ns + 1e-9
        assert p.posted_fraction * p.rtt_min_ns - 1e-9 <= parts["posted_write"] <= p.posted_fraction * p.rtt_max_ns + 1e-9
        assert p.cpu_miss_ns - 1e-9 <= parts["cpu_poll"] <= p.cpu_miss_ns + p.cpu_spin_ns + 1e-9
    lat = P.sync_latencies(p, 4, 10, seed=seed)
    lo = p.posted_fraction * p.rtt_min_ns + p.rtt_min_ns / 2
    hi = p.posted_fraction * p.rtt_max_ns + 1.5 * p.rtt_max_ns
    assert len(lat) == 30 and all(lo - 1e-9 <= v <= hi + 1e-9 for v in lat)


@given(params)
def test_bulk_bandwidth_never_exceeds_the_links_raw_or_tlp_rate(p):
    b = P.bulk_bandwidth(p)
    assert 0 < b["gbs"] <= p.tlp_gbs < p.raw_gbs
    assert b["gbs"] <= p.outstanding * p.mrrs / p.rtt_mid_ns + 1e-9


@settings(max_examples=30)
@given(params)
def test_atomics_never_exceed_the_root_complex_the_tags_or_the_link(p):
    x = P.atomic_throughput(p, ops=400, seed=1) / 1e6
    bounds = P.atomic_bounds(p)
    assert x <= bounds["root_complex"] * (1 + 1e-9)
    # Little's law with the shortest round trip
    assert x <= p.outstanding / p.rtt_min_ns * 1e3 * (1 + 1e-9)
    assert bounds["link"] <= p.tlp_gbs * 1e3 / (R.TLP_OVERHEAD["MRd"] + 8) + 1e-9


def test_atomics_are_the_root_complex_rate_when_saturated_and_latency_bound_with_one_in_flight():
    assert P.atomic_throughput(D, ops=2000) / 1e6 == pytest.approx(D.atomic_mops, rel=1e-6)
    # one in flight: a round trip plus the root complex's execution per op
    one = D.with_(outstanding=1)
    assert P.atomic_throughput(one, ops=2000) / 1e6 == pytest.approx(1e3 / (D.rtt_mid_ns + 1e3 / D.atomic_mops),
                                                                     rel=0.02)


def test_samplers_are_reproducible_from_their_seed():
    assert P.flag_round_trips(D, 50, seed=4) == P.flag_round_trips(D, 50, seed=4)
    assert P.flag_round_trips(D, 50, seed=4) != P.flag_round_trips(D, 50, seed=5)
    assert P.sync_latencies(D, 8, 20, seed=4) == P.sync_latencies(D, 8, 20, seed=4)
    with pytest.raises(ValueError, match="writer"):
        P.sync_latencies(D, 1, 5)


@pytest.mark.parametrize("kw, name", [({"rtt_min_ns": 500.0}, "rtt_min_ns"), ({"posted_fraction": 0.0}, "posted_fraction"),
                                      ({"cpu_spin_ns": 0.0}, "cpu_spin_ns"), ({"outstanding": 2000}, "outstanding"),
                                      ({"mps": 100}, "mps"), ({"lanes": 3}, "lanes"), ({"cpu_miss_ns": -1.0}, "cpu_miss_ns")])
def test_bad_parameters_are_rejected_naming_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        PcieParams(**kw)


def test_every_parameter_has_a_source():
    from dataclasses import fields
    assert {f.name for f in fields(PcieParams)} == set(P.SOURCES)
