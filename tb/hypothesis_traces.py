"""Access traces for the RTL system, found by Hypothesis on the golden model.

A Hypothesis strategy draws a trace -- a few dozen CPU accesses ``(dev, cache, kind, line, variant)``
over a small set of lines chosen to collide (one coalescing block, one snoop-filter set, lines shared
by both devices) -- for the configuration the RTL system toplevel is built with (``DEVICES`` devices,
``tb.system_top.DEFAULT_DCOH``).  The golden model runs it with its own timing (``run_trace``: the
cycle loop of ``models.system.run`` with the trace in place of the random ``Workload``), its
invariants checked after every cycle (a failure is a model bug: it is raised, Hypothesis shrinks it
and prints the trace).  ``hypothesis.target()`` steers the search toward traces that reach rare
behaviour: distinct (state, event) pairs, snoops the device stalled or held, snoops that waited for
probes, snoop-filter back-invalidations, coalesced probes.  Every trace tried is kept with its
scores; the export is a few of them picked greedily for coverage (each one adding (state, event)
pairs the earlier ones miss, ties broken by score) plus the best one per rare-behaviour metric, as a
JSON list of ``system_trace`` inputs (tb/system_tb.py).

    python -m tb.hypothesis_traces [--examples N] [--seed S] [--out tb/traces/hypothesis.json] [--keep K]

Same command, same file: Hypothesis is seeded (``--seed``), has no example database, no deadline,
and nothing in the search depends on the wall clock.  docs/testbench.md has the whole story.
"""

import argparse
import json
import sys
import time
from collections import deque
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from models.config import Config
from models.dcoh import Coalescer, CpuOp, Device
from models.system import System, drive
from tb.system_top import DEFAULT_DCOH

__all__ = ["DEVICES", "config", "line_pool", "traces", "run_trace", "search", "select", "generate", "main"]

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tb" / "traces" / "hypothesis.json"
DEVICES = 2                  # the system tests' configuration (tests/test_system_rtl.py)
DEFAULT_SEED = 1
DEFAULT_EXAMPLES = 3000          # ~1 minute on this 2-core machine
DEFAULT_KEEP = 8
# loads and stores most, as in models.system.Workload.MIX; every kind reachable
KIND_WEIGHTS = (("load", 4), ("store", 4), ("evict", 3), ("rdcurr", 1), ("itomwr", 1), ("wrinv", 1),
                ("clflush", 1))
METRICS = ("pairs", "stalled", "held", "probe_wait", "sf_evictions", "merged", "coalesced")


def config(devices=DEVICES, dcoh=None):
    """The golden-model Config of the RTL system (as tb/system_tb.py builds its shadow), but timed
    with the model's own latencies and the DCOH's credit count."""
    p = {**DEFAULT_DCOH, **(dcoh or {})}
    return Config(devices=devices, caches=p["caches"], sf_sets=p["sf_sets"], sf_ways=p["sf_ways"],
                  max_outstanding=p["tracker"], credits=p["credits"], coalesce_window=p["coalesce_window"],
                  coalesce_block=p["coalesce_block"], starvation_bound=p["starvation_bound"])


def line_pool(cfg):
    """Lines that collide: one coalescing block (``block`` adjacent lines), and for its first two
    lines ``sf_ways + 1`` more lines each in the same snoop-filter set (so a set overflows and
    back-invalidates), two of them sharing a block of their own.  Both devices draw from the same
    pool: true sharing."""
    base = 4 * cfg.sf_sets * cfg.coalesce_block          # clear of line 0, block-aligned, set 0
    block = [base + i for i in range(cfg.coalesce_block)]
    conflict = []
    for j in range(1, cfg.sf_ways + 2):
        conflict += [base + j * cfg.sf_sets, base + j * cfg.sf_sets + 1]
    return block + conflict


def traces(cfg, min_size=8, max_size=48):
    """Strategy: a list of accesses ``[dev, cache, kind, line, value, variant]``; values are the
    access's position + 1 (every write a distinct value)."""
    kinds = [k for k, w in KIND_WEIGHTS for _ in range(w)]
    access = st.tuples(st.integers(0, cfg.devices - 1), st.integers(0, cfg.caches - 1), st.sampled_from(kinds),
                       st.sampled_from(line_pool(cfg)), st.integers(0, 1))
    return st.lists(access, min_size=min_size, max_size=max_size).map(
        lambda ops: [[d, k, kind, line, i + 1, v] for i, (d, k, kind, line, v) in enumerate(ops)])


class _CountingCoalescer(Coalescer):
    """A device's coalescer that counts the probes that joined an open group (``merged``) and keeps the
    shortest time between two probes to one block (``gap``: a gradient toward merging, for ``target``)."""

    def __init__(self, window, block):
        super().__init__(window, block)
        self.merged, self.gap, self.last = 0, None, {}

    def add(self, line, caches, now):
        b = line // self.block
        if b in self.groups:
            self.merged += 1
        if b in self.last and (self.gap is None or now - self.last[b] < self.gap):
            self.gap = now - self.last[b]
        self.last[b] = now
        super().add(line, caches, now)


class _CountingDevice(Device):
    """A model device that counts snoops it refused (stalled in a transient state), snoops that arrived
    while a back-invalidation of their line was under way (held until its probes) and snoops that had
    to wait for probes of their own; its coalescer is a :class:`_CountingCoalescer`.  Subclasses, so
    that models/ stays unchanged: the compiled golden model's devices take no attributes or replaced
    methods of their own (models/dcoh.pxd)."""

    def __init__(self, index, cfg, link, checker, stats=None):
        super().__init__(index, cfg, link, checker, stats)
        self.coal = _CountingCoalescer(cfg.coalesce_window, cfg.coalesce_block)
        self.stalled, self.held, self.probe_wait = {}, 0, 0

    def can_accept_snoop(self, msg):
        ok = super().can_accept_snoop(msg)
        if not ok:
            self.stalled[id(msg)] = msg          # the message kept alive: ids stay distinct
        return ok

    def on_snoop(self, msg, now):
        w = self.work.get(msg.line)
        if w is not None:
            self.held += 1
        super().on_snoop(msg, now)
        w2 = self.work.get(msg.line)
        if w is None and w2 is not None and w2.snoop is msg:
            self.probe_wait += 1


def run_trace(ops, cfg, think=0, max_cycles=200000):
    """Runs ``ops`` on the timed golden model (``models.system.drive``, the cycle loop of
    ``models.system.run``): each internal cache issues its accesses in order, the next one when the
    previous one has finished and ``1 + think`` cycles after it was issued; the touched lines are
    checked every cycle.  Runs until everything is issued and the system is quiescent, then
    ``check_all``.  Returns the scores.  Raises the model's own errors (invariant, protocol, forward
    progress): a model bug."""
    sysm = System(cfg, timed=True, device_class=_CountingDevice)
    devs = sysm.devices
    queues = {}
    for d, k, kind, line, value, variant in ops:
        queues.setdefault((d, k), deque()).append(CpuOp(kind, k, line, value, variant))

    def next_op(d, k):
        q = queues.get((d, k))
        return q.popleft() if q else None

    def finished(done):
        return (not any(queues.values()) and all(o is None for dev in devs for o in dev.ops)
                and sysm.quiescent())

    now, _, done = drive(sysm, next_op, lambda: think, finished, max_cycles=max_cycles)
    sysm.check_all()
    pairs = sorted({f"{s} / {e}" for dev in devs for (s, e) in dev.coverage})
    return {"pairs": len(pairs), "stalled": sum(len(dev.stalled) for dev in devs),
            "held": sum(dev.held for dev in devs), "probe_wait": sum(dev.probe_wait for dev in devs),
            "sf_evictions": sysm.stats.get("sf_evictions", 0),
            "coalesced": sum(dev.coal.msgs_in - dev.coal.msgs_out for dev in devs),
            "merged": sum(dev.coal.merged for dev in devs),
            "closest": max((64 - min(dev.coal.gap, 64) for dev in devs if dev.coal.gap is not None), default=0),
            "requests": done, "cycles": now, "coverage": pairs}


def combined(s):
    """One number for ranking: coverage first, rare behaviour weighted in."""
    return (s["pairs"] + 2 * s["stalled"] + 2 * s["held"] + s["probe_wait"] + s["sf_evictions"]
            + 2 * s["merged"] + 2 * s["coalesced"])


def search(examples=DEFAULT_EXAMPLES, seed=DEFAULT_SEED, devices=DEVICES, dcoh=None, max_size=48):
    """Runs the Hypothesis search; returns every distinct trace tried, as (ops, scores), in the
    order tried.  A model failure propagates (after Hypothesis has shrunk it)."""
    cfg = config(devices, dcoh)
    found = {}

    @hypothesis_seed(seed)
    @settings(max_examples=examples, derandomize=False, database=None, deadline=None, print_blob=False,
              phases=(Phase.explicit, Phase.generate, Phase.target, Phase.shrink, Phase.explain),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much, HealthCheck.large_base_example])
    @given(traces(cfg, max_size=max_size))
    def explore(ops):
        from hypothesis import note
        note(f"trace: {json.dumps(ops)}")
        s = run_trace(ops, cfg)
        for m in METRICS:
            target(float(s[m]), label=m)
        target(float(s["closest"]), label="closest probes to one block")
        target(float(combined(s)), label="combined")
        found.setdefault(json.dumps(ops), (ops, s))

    explore()
    return list(found.values())


def select(found, keep=DEFAULT_KEEP):
    """A few distinct traces: greedily the one adding the most (state, event) pairs not yet covered
    (ties: higher combined score, then shorter, then found earlier), then the best one per rare
    metric not already taken (its coverage must differ from the chosen ones)."""
    order = {json.dumps(ops): i for i, (ops, _) in enumerate(found)}
    rank = lambda item: (combined(item[1]), -len(item[0]), -order[json.dumps(item[0])])
    chosen, covered = [], set()
    pool = list(found)
    while pool and len(chosen) < min(3, keep):
        best = max(pool, key=lambda it: (len(set(it[1]["coverage"]) - covered),) + rank(it))
        if chosen and not set(best[1]["coverage"]) - covered:
            break
        chosen.append(("coverage", best))
        covered |= set(best[1]["coverage"])
        pool.remove(best)
    for m in METRICS[1:]:
        if len(chosen) >= keep:
            break
        cands = [it for it in pool if it[1][m] > 0
                 and all(set(it[1]["coverage"]) != set(c[1][1]["coverage"]) for c in chosen)]
        if cands:
            best = max(cands, key=lambda it: (it[1][m],) + rank(it))
            chosen.append((m, best))
            pool.remove(best)
    out = []
    for i, (why, (ops, s)) in enumerate(chosen):
        name = (f"hyp{i}_{why}_pairs{s['pairs']}_stall{s['stalled']}_held{s['held']}_pw{s['probe_wait']}"
                f"_sfev{s['sf_evictions']}_merge{s['merged']}_coal{s['coalesced']}")
        out.append({"name": name, "picked_for": why, "score": {k: s[k] for k in METRICS + ("requests", "cycles")},
                    "coverage": s["coverage"], "ops": ops})
    return out


def generate(examples=DEFAULT_EXAMPLES, seed=DEFAULT_SEED, keep=DEFAULT_KEEP, out=None, devices=DEVICES):
    found = search(examples, seed, devices)
    chosen = select(found, keep)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(chosen, indent=1) + "\n")
    return chosen, found


def main(argv=None):
    ap = argparse.ArgumentParser(description="Find access traces for the RTL system with Hypothesis on the "
                                             "golden model (docs/testbench.md)")
    ap.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES, help="Hypothesis max_examples")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--keep", type=int, default=DEFAULT_KEEP, help="traces to export")
    ap.add_argument("--out", default=str(DEFAULT_OUT.relative_to(ROOT)))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    chosen, found = generate(args.examples, args.seed, args.keep, args.out)
    every = set().union(*(s["coverage"] for _, s in found)) if found else set()
    kept = set().union(*(t["coverage"] for t in chosen)) if chosen else set()
    print(f"{len(found)} distinct traces tried in {time.perf_counter() - t0:.1f} s; "
          f"{len(every)} (state, event) pairs over all of them, {len(kept)} over the {len(chosen)} "
          f"written to {args.out}")
    for t in chosen:
        print(f"  {t['name']}: {len(t['ops'])} accesses, {t['score']['requests']} requests, "
              f"{t['score']['cycles']} cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
