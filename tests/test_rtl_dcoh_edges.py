"""The RTL DCOH at the edges of its sizes (tests/test_rtl_dcoh.py uses generous ones: a work table of 8,
a 2-way snoop filter, 6 lines).

* **Exact co-simulation where the model is as finite as the RTL** (tests/dcoh_cosim.py): a tracker of 2
  CQIDs with 8 lines in play (the model's ``max_outstanding`` is the same limit), and 4-way and 8-way
  snoop filters of one set with 8 and 12 lines, so that every set overflows and the pseudo-LRU nodes
  above the bottom level of the tree choose victims (a 2-way filter has only the one node).  Message for
  message, with the snoop filter's pseudo-LRU bits compared after every step.
  A work table of one entry (with 2 or 4 CQIDs) likewise, the model's ``work_entries`` being the same.
* **Liveness where it is not** (tests/dcoh_liveness.py): a work table of 1 or 2 entries and a single
  coalescer group, smaller than the lines in play (the coalescer's groups are finite in the RTL only),
  with random hosts and caches that the step-by-step co-simulation does not have.  Every snoop must be
  answered exactly once within ``dcoh_liveness.snoop_bound`` cycles, every access and request must
  finish, and the run must drain.  The pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py) runs the same edges
  (but the probe pacing, which follows the serializing DCOH's dispatch).
"""

import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

sys.path.insert(0, str(Path(__file__).parent))
from dcoh_cosim import CONFIG, EDGES, CosimMismatch, simulate               # noqa: E402
import dcoh_liveness as live                                         # noqa: E402
from models.config import Config                                     # noqa: E402


def _run(dut, body):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()


COSIM_EDGES = ("tracker2-8lines", "sf1x4-8lines", "sf1x8-12lines")         # dcoh_cosim.EDGES


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", COSIM_EDGES)
def test_cosim_at_edge_sizes(name, seed):
    over, lines = EDGES[name]
    dev = simulate(Config(**{**CONFIG, **over}), seed, 400, lines=lines).devices[0]
    # the edge was reached: the snoop filter overflowed (back-invalidations) at least once
    assert dev.stats.get("sf_evictions", 0) > 0, f"seed {seed}: no snoop-filter eviction in {name}"


# The work table is finite in the model too (Config.work_entries): a snoop that needs a new entry while all
# are in use is held, an access that needs one for a back-invalidation waits, as in the RTL, so at these
# sizes the co-simulation is exact as well.  The seeds are ones where the limit matters: with an unbounded
# model the same runs part from the RTL (work 1: seeds 0 and 1 at steps 765 and 799; with tracker 2 too:
# seeds 2 and 3 at steps 672 and 411), which the test checks for the first of them.
WORK_COSIM_EDGES = {"work1-8lines": (0, 1), "work1-tracker2-8lines": (2, 3)}     # dcoh_cosim.EDGES: seeds


@pytest.mark.parametrize("name, seed", [(n, s) for n, seeds in WORK_COSIM_EDGES.items() for s in seeds])
def test_cosim_at_work_table_edges(name, seed):
    (over, lines), seeds = EDGES[name], WORK_COSIM_EDGES[name]
    cfg = Config(**{**CONFIG, **over})
    sysm = simulate(cfg, seed, 1000, lines=lines)
    assert sysm.stats.get("work_peak") == cfg.work_entries, sysm.stats       # the model's table filled
    if seed == seeds[0]:        # ... and its limit is what keeps the two together
        unbounded = Config(**{**CONFIG, **over, "work_entries": 0})
        with pytest.raises(CosimMismatch):
            simulate(cfg, seed, 1000, lines=lines, model_cfg=unbounded)


LIVENESS_EDGES = {
    # work table and tracker smaller than the lines in play
    "work1-tracker2-8lines": dict(dut=dict(work=1, tracker=2), lines=8),
    "work1-groups1-8lines": dict(dut=dict(work=1, groups=1), lines=8),
    # caches that take one probe at a time, the next once its work and rescan are done, and one coalescer group
    "work2-groups1-probe-one-at-a-time": dict(dut=dict(work=2, groups=1), lines=8, probe_rule="one_at_a_time"),
    # 4- and 8-way snoop filters of one set with a work table of 1 and 2
    "sf1x4-work1-tracker3": dict(dut=dict(sf_sets=1, sf_ways=4, work=1, tracker=3, caches=3), lines=8),
    "sf1x8-work2-tracker3": dict(dut=dict(sf_sets=1, sf_ways=8, work=2, tracker=3, caches=3), lines=12),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(LIVENESS_EDGES))
def test_every_snoop_answered_once_at_edge_sizes(name, seed):
    edge = LIVENESS_EDGES[name]
    dut = live.make_dut(**edge["dut"])
    stats = {}

    async def bench(ctx):
        await live.run_liveness(ctx, dut, seed, cycles=2000, lines=edge["lines"],
                                probe_rule=edge.get("probe_rule", "free"), stats=stats)
    _run(dut, bench)
    # the run reached what the edge is about: snoops, probes and their work, and held snoops
    assert stats["snoops"] > 50 and stats["dispatch"].get("WORK", 0) > 0, stats


@pytest.mark.slow        # ~4.5 min: more seeds and longer runs of the same edges (make regress)
@pytest.mark.parametrize("name", list(LIVENESS_EDGES))
def test_every_snoop_answered_once_at_edge_sizes_more_seeds(name):
    edge = LIVENESS_EDGES[name]
    for seed in range(2, 8):
        dut = live.make_dut(**edge["dut"])

        async def bench(ctx):
            await live.run_liveness(ctx, dut, seed, cycles=4000, lines=edge["lines"],
                                    probe_rule=edge.get("probe_rule", "free"))
        _run(dut, bench)


PIPELINED_EDGES = [name for name, edge in LIVENESS_EDGES.items() if "probe_rule" not in edge]


def _pipelined_liveness(name, seed, cycles):
    edge = LIVENESS_EDGES[name]
    dut = live.make_dut(**edge["dut"], pipelined=True)
    stats = {}

    async def bench(ctx):
        await live.run_liveness(ctx, dut, seed, cycles=cycles, lines=edge["lines"], stats=stats)
    _run(dut, bench)
    return stats


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", PIPELINED_EDGES)
def test_pipelined_every_snoop_answered_once_at_edge_sizes(name, seed):
    stats = _pipelined_liveness(name, seed, 2000)
    # the run reached what the edge is about: snoops answered after a probe and their work, snoops held,
    # back-invalidations
    commits = stats["commits"]
    assert stats["snoops"] > 50, stats
    for kind in ("snoop_probe", "snoop_lane_probed", "snoop_c_hold", "back_invalidation"):
        assert commits.get(kind, 0) > 0, (name, seed, kind, commits)


@pytest.mark.slow        # make regress: more seeds, longer runs
@pytest.mark.parametrize("name", PIPELINED_EDGES)
def test_pipelined_every_snoop_answered_once_at_edge_sizes_more_seeds(name):
    for seed in range(2, 8):
        _pipelined_liveness(name, seed, 4000)
