"""The pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py) co-simulated against the golden model's device inside the
model's whole system (tests/dcoh_cosim.py), as the serializing DCOH is in tests/test_rtl_dcoh.py and
tests/test_rtl_dcoh_edges.py: after every model move that touches device 0 the D2H messages (as multisets),
the internal caches, the snoop filter's ways and pseudo-LRU bits and the tracker's states must be equal.

Two differences from the serializing DCOH's runs (tests/dcoh_cosim.py, ``rtl_quiet``): a step ends after
``QUIET_CYCLES`` cycles without a commit (the pipelined DCOH's ``idle`` also waits for accesses parked
behind a request, which only the host's answer wakes), and the engine closes its coalescer groups by
itself (a short window), the model flushing the same group when the RTL offers its probe message.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dcoh_cosim import CONFIG, EDGES, CosimMismatch, simulate    # noqa: E402
from cxl.messages import D2HRspOpcode, H2DReqOpcode               # noqa: E402
from models.config import Config                                  # noqa: E402

WINDOW = 16         # the engine's coalescer window (cycles): it flushes by itself, the model follows


def _cosim(cfg, seed, steps, lines=6):
    return simulate(cfg, seed, steps, lines=lines, window=WINDOW, pipelined=True).devices[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pipelined_rtl_matches_model_on_random_streams(seed):
    dev = _cosim(Config(**CONFIG), seed, 200)
    assert dev.stats.get("sf_evictions", 0) > 0          # victims chosen: the pseudo-LRU bits compared


# the serializing DCOH's edges (dcoh_cosim.EDGES, tests/test_rtl_dcoh_edges.py)


@pytest.mark.parametrize("name", list(EDGES))
def test_pipelined_cosim_at_edge_sizes(name):
    over, lines = EDGES[name]
    dev = _cosim(Config(**{**CONFIG, **over}), 0, 300, lines)
    assert dev.stats.get("sf_evictions", 0) > 0, f"no snoop-filter eviction in {name}"


def test_pipelined_cosim_detects_a_broken_rtl(monkeypatch):
    """The co-simulation can fail: a pipelined DCOH that answers SnpData to an E line with RspSHitSE and
    keeps E (SWMR broken) is caught.  The engine reads the snoop table for stable lines in
    hdl/dcoh/pipe/engine.py and for lines with requests through hdl/dcoh/engine_tables.py."""
    import hdl.dcoh.engine_tables as tables
    import hdl.dcoh.pipe.engine as engine
    from cxl.coherence import DevState as D
    broken = dict(tables.SNOOP_TABLE)
    broken[(D.E, H2DReqOpcode.SnpData)] = (D2HRspOpcode.RspSHitSE, D.E, 0)
    monkeypatch.setattr(tables, "SNOOP_TABLE", broken)
    monkeypatch.setattr(engine, "SNOOP_TABLE", broken)
    with pytest.raises(CosimMismatch):
        for seed in range(6):
            _cosim(Config(**CONFIG), seed, 200)


@pytest.mark.slow        # make regress: more seeds, longer streams (~15-30 s each)
@pytest.mark.parametrize("name, seed", [(None, s) for s in range(3, 9)] + [(n, s) for n in EDGES for s in (1, 2, 3)])
def test_pipelined_cosim_more_seeds(name, seed):
    over, lines = EDGES[name] if name else ({}, 6)
    _cosim(Config(**{**CONFIG, **over}), seed, 400, lines)
