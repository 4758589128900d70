"""The pipelined DCOH's engine (hdl/dcoh/pipe/engine.py: the snoop path, the request path and the response
path over one snoop filter) against the golden device.

tb/engine.py: the caches make random accesses, the model tries each where the RTL commits it and
completes each request where the RTL's lane frees it, the bench plays the host, snoops included; every
D2H Req, D2H Rsp, D2H Data and ``cpu_rsp``, the snoop filter and the caches are compared.
"""

import pytest

from hdl.dcoh.pipe.request_path import RequestPath
from tb.engine import EngineBench

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
    out = EngineBench(seed=seed, **bench_kw).run(150, **run_kw)
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


def _waiting_behind(delay, second_kind="load"):
    """Cache 0 misses on a line; ``delay`` cycles later cache 1 wants the same line, whose request is then
    in flight: it parks on the line, and only that request's completion can wake it (nothing else happens)."""
    from models.dcoh import CpuOp
    bench = EngineBench(seed=1, caches=2, lines_per_set=1, uncached_share=0)
    line = next(l for l in bench.lines if all(l not in c for c in bench.dev.caches))
    script = [(0, CpuOp("load", 0, line)), (delay, CpuOp(second_kind, 1, line, 77))]
    return bench.run(script=script, host_delay=6)


@pytest.mark.parametrize("delay", range(0, 16))
def test_an_access_behind_a_request_on_its_line_is_woken_by_its_completion(delay):
    """Swept over when the second access arrives, so that its park meets the completion in every cycle
    around it (a park and a wake in one cycle must leave it woken)."""
    out = _waiting_behind(delay)
    assert out["commits"] == 2 and out["requests"] == 1           # the second one filled from the first
