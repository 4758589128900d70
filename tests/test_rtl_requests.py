"""The pipelined DCOH's request side (hdl/dcoh/pipe/requests.py: the request path and the response path over
one snoop filter) against the golden device.

tb/requests.py: the caches make random accesses, the model tries each where the RTL commits it and
completes each request where the RTL's lane frees it, the bench plays the host; every D2H Req, D2H Data
and ``cpu_rsp``, the snoop filter and the caches are compared.
"""

import pytest

from hdl.dcoh.pipe.request_path import RequestPath
from tb.requests import RequestsBench

SLOW = dict(p_sink=0.4, p_in=0.5, cmd_delay=3, host_delay=10)

CASES = {
    # name: (bench parameters, run parameters)
    "defaults": (dict(), dict()),
    "slow_ports": (dict(), SLOW),
    "one_cache": (dict(caches=1), dict()),
    "tracker_smaller_than_caches": (dict(caches=8, tracker=4), SLOW),
    "two_cqids": (dict(tracker=2), dict(p_sink=0.7)),
    "direct_mapped": (dict(sf_ways=1, sf_sets=32), dict()),
    "eight_ways": (dict(sf_ways=8, sf_sets=4, caches=6), SLOW),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_request_side_matches_the_golden_device(case, seed):
    bench_kw, run_kw = CASES[case]
    out = RequestsBench(seed=seed, **bench_kw).run(150, **run_kw)
    assert out["errors"] == 0
    assert out["commits"] + out["hits"] == out["accesses"] == 150
    assert out["requests"] > 0 and out["rsp_events"] >= out["requests"]


@pytest.mark.parametrize("kw, name", [
    (dict(caches=0), "caches"), (dict(caches=33), "caches"), (dict(tracker=1), "tracker"),
    (dict(sf_ways=3), "ways"), (dict(sf_sets=6), "sets"),
])
def test_bad_parameters_are_named(kw, name):
    with pytest.raises(ValueError, match=name):
        RequestPath(**kw)
