"""The pipelined DCOH's engine (hdl/dcoh/pipe/engine.py) against the golden device: back-invalidations.

tb/engine.py with more lines a set than the snoop filter has ways and uncached accesses to held lines,
with and without host snoops; and directed cases at the corners of a back-invalidation (a snoop to its
line, a snoop's work in its set, a request on the pseudo-LRU victim).
"""

import pytest

from tb.engine import SLOW_PORTS as SLOW, SNOOPS, EngineBench

BI = dict(lines_per_set=8, uncached_held=0.4)       # more lines a set than ways; uncached accesses to them

BI_CASES = {
    # name: (bench parameters, run parameters): misses to full sets and uncached accesses to held lines
    # back-invalidate, with and without host snoops
    "no_snoops": (BI, dict()),
    "snoops": (BI, SNOOPS),
    "slow_ports": (BI, SLOW | SNOOPS),
    "two_cqids": (BI | dict(tracker=2), SNOOPS | dict(p_sink=0.7)),
    "tracker_smaller_than_caches": (BI | dict(lines_per_set=6, tracker=3, caches=8), SLOW | SNOOPS),
    "one_work_entry": (BI | dict(work=1), SNOOPS),
    "direct_mapped": (BI | dict(lines_per_set=2, sf_ways=1, sf_sets=32), SNOOPS),
    "eight_ways": (BI | dict(lines_per_set=12, sf_ways=8, sf_sets=4, caches=6), SLOW | SNOOPS),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("case", sorted(BI_CASES))
def test_engine_back_invalidations_match_the_golden_device(case, seed):
    """A miss to a full set frees the pseudo-LRU victim (passing over lines with requests), an uncached
    access to a line the device holds frees that line: the work entry probes and invalidates the copies,
    then the write-back starts under the CQID the back-invalidation took; snoops to the line wait for it."""
    bench_kw, run_kw = BI_CASES[case]
    out = EngineBench(seed=seed, **bench_kw).run(120, **run_kw)
    assert out["errors"] == 0
    assert out["commits"] + out["hits"] == out["accesses"] == 120
    assert out["back_invalidations"] > 0


# One set of four ways: the pseudo-LRU tree has a root and two nodes, and every miss beyond four lines
# chooses a victim.  A completion's fill in the cycle request C chose a victim in its set once went unseen
# by C (the fill touches the tree and frees its line from the busy mask; the model completes first): these
# seeds failed then, with a probe of a victim the model had not chosen.
@pytest.mark.parametrize("seed, kw", [(3, dict(tracker=3, work=1, uncached_held=0.4)),
                                     (4, dict(tracker=3, work=1, uncached_held=0.4)), (6, dict())])
def test_a_fill_beside_a_victim_choice_in_its_set(seed, kw):
    out = EngineBench(seed=seed, sf_sets=1, sf_ways=4, lines_per_set=8, **kw).run(150, **SNOOPS)
    assert out["errors"] == 0 and out["commits"] + out["hits"] == out["accesses"] == 150
    assert out["back_invalidations"] > 5, out["back_invalidations"]


def _full_sets(seed=1):
    """A bench whose every snoop-filter set is full (four lines in four ways, each in a random shape),
    the first set's pseudo-LRU victim, and a fifth line of that set."""
    bench = EngineBench(seed=seed, caches=4, lines_per_set=4, preload_share=1.0, uncached_share=0)
    sf = bench.dev.sf
    victim = sf.tags[0][sf.victim(0, set())]
    return bench, victim, bench.cfg.sf_sets * 4


@pytest.mark.parametrize("snoop_at", range(0, 20, 2))
def test_a_snoop_to_a_line_being_back_invalidated(snoop_at):
    """A miss to a full set back-invalidates the pseudo-LRU victim; a SnpInv to the victim comes before,
    during or after that: during, it waits until the write-back has started and then answers from the
    write-back's state (swept over the snoop's arrival)."""
    from cxl.messages import H2DReqOpcode as Snp
    from models.dcoh import CpuOp
    bench, victim, new_line = _full_sets()
    k = next(k for k in range(4) if new_line not in bench.dev.caches[k])
    out = bench.run(script=[(0, CpuOp("load", k, new_line))], snoop_script=[(snoop_at, Snp.SnpInv, victim)])
    assert out["errors"] == 0 and out["snoops"] == 1 and out["commits"] == 1


@pytest.mark.parametrize("miss_at", range(2, 14, 2))
def test_no_victim_is_chosen_beside_a_snoops_work(miss_at):
    """A SnpInv probes the pseudo-LRU victim's copies; a miss to the same full set meanwhile chooses no
    victim until the snoop's work is over (the model may not know of that work yet): then the way is
    free, and the miss takes it."""
    from cxl.messages import H2DReqOpcode as Snp
    from models.dcoh import CpuOp
    bench, victim, new_line = _full_sets(seed=3)
    assert bench.dev.sf.entries[victim].presence, "the victim must have copies to probe"
    k = next(k for k in range(4) if new_line not in bench.dev.caches[k])
    out = bench.run(script=[(miss_at, CpuOp("load", k, new_line))], snoop_script=[(0, Snp.SnpInv, victim)])
    assert out["errors"] == 0 and out["snoops"] == 1 and out["commits"] == 1


@pytest.mark.parametrize("miss_at", [4, 8, 12, 16])
def test_a_victim_with_a_request_in_flight_is_passed_over(miss_at):
    """The pseudo-LRU victim of a full set is being upgraded (a store to its S copy; the host answers
    late): a miss to the set back-invalidates another way, as the model's victim choice does."""
    from models.dcoh import CpuOp
    for seed in range(1, 50):
        bench, victim, new_line = _full_sets(seed)
        e = bench.dev.sf.entries[victim]
        if e.state is not None and e.state.name == "S" and e.presence and e.presence != 0b1111:
            break
    holder = next(k for k in range(4) if e.presence >> k & 1)
    other = next(k for k in range(4) if not e.presence >> k & 1)

    def plan(t):
        return [(60, "GO-E"), (62, "Data")] if t.line == victim else None
    out = bench.run(script=[(0, CpuOp("store", holder, victim, 5)), (miss_at, CpuOp("load", other, new_line))],
                    host_plan=plan)
    assert out["errors"] == 0 and out["back_invalidations"] == 1 and out["commits"] == 2
