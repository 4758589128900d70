"""The NVLink polling baseline (models/nvlink_polling.py): its figures follow from its parameters.

Ref: docs/comparison.md [P6] (NVLink 4 links and rates), [P7] (NCCL's NVLink flag step), [P8]
(measured P2P write bandwidth).
"""

import pytest
from hypothesis import given, settings, strategies as st

from models import nvlink_polling as NV
from models.nvlink_polling import NvlinkParams

D = NvlinkParams()


def test_defaults_are_nvlink4_from_the_vendor_figures():
    assert D.raw_gbs == 450.0                                 # 18 links x 25 GB/s per direction
    assert NV.bulk_bandwidth_gbs(D) == pytest.approx(376.0)   # the measured P2P write rate
    assert D.store_one_way_ns == D.step_ns - D.poll_ns / 2


def test_doubling_the_flag_step_raises_every_round_trip_by_two_steps():
    two = D.with_(step_ns=2 * D.step_ns)
    for a, b in zip(NV.flag_round_trips(D, 500, seed=2), NV.flag_round_trips(two, 500, seed=2)):
        assert b - a == pytest.approx(2 * D.step_ns)


def test_the_mean_round_trip_is_two_nccl_steps():
    # The store crossing is derived so that crossing + mean polling wait = NCCL's step.
    rt = NV.flag_round_trips(D, 20000, seed=1)
    assert sum(rt) / len(rt) == pytest.approx(2 * D.step_ns, rel=0.01)


params = st.builds(NvlinkParams, step_ns=st.floats(50, 2000), poll_ns=st.floats(0, 100),
                   links=st.integers(1, 18), link_gbs=st.floats(5, 100),
                   achieved_fraction=st.floats(0.1, 1.0), peer_atomic_ns=st.floats(0.1, 100),
                   threads=st.integers(1, 300000), atomic_wire_bytes=st.integers(8, 64))


@settings(max_examples=50)
@given(params, st.integers(0, 2 ** 16))
def test_latencies_lie_between_the_crossings_and_the_crossings_plus_polling(p, seed):
    w = p.store_one_way_ns
    for v in NV.flag_round_trips(p, 20, seed=seed):
        assert 2 * w - 1e-9 <= v <= 2 * w + 2 * p.poll_ns + 1e-9
    lat = NV.sync_latencies(p, 8, 5, seed=seed)
    assert len(lat) == 35 and all(w - 1e-9 <= v <= w + p.poll_ns + 1e-9 for v in lat)


@given(params)
def test_bandwidth_never_exceeds_the_links_raw_rate_and_atomics_no_bound(p):
    assert 0 < NV.bulk_bandwidth_gbs(p) <= p.links * p.link_gbs + 1e-9
    x = NV.atomic_throughput(p) / 1e6
    b = NV.atomic_bounds(p)
    assert x == pytest.approx(min(b.values()))
    assert x <= 1e3 / p.peer_atomic_ns + 1e-9
    assert x <= p.threads / (2 * p.store_one_way_ns) * 1e3 + 1e-9
    assert x * p.atomic_wire_bytes / 1e3 <= p.links * p.link_gbs + 1e-9


def test_samplers_are_reproducible_from_their_seed():
    assert NV.flag_round_trips(D, 30, seed=4) == NV.flag_round_trips(D, 30, seed=4)
    assert NV.flag_round_trips(D, 30, seed=4) != NV.flag_round_trips(D, 30, seed=5)


@pytest.mark.parametrize("kw, name", [({"step_ns": 0.0}, "step_ns"), ({"poll_ns": 5000.0}, "poll_ns"),
                                      ({"links": 19}, "links"), ({"achieved_fraction": 1.5}, "achieved_fraction"),
                                      ({"threads": 0}, "threads"), ({"peer_atomic_ns": -1.0}, "peer_atomic_ns")])
def test_bad_parameters_are_rejected_naming_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        NvlinkParams(**kw)


def test_every_parameter_has_a_source():
    from dataclasses import fields
    assert {f.name for f in fields(NvlinkParams)} == set(NV.SOURCES)
