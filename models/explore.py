"""Exhaustive breadth-first exploration of tiny golden-model configurations.

Every reachable state is expanded with every enabled event: delivering any deliverable message
(nondeterministic order, subject only to the ordering rule and snoop stalls), any internal cache
starting any access on any line with any value, the host starting one of its own accesses (``host_kinds``,
one at a time) on any line, and the coalescer flushing any pending block.  After
each event the devices settle deterministically (queued accesses issue, D2H requests transmit).
Every new state is checked against all invariants.  A deadlock is a reachable state with protocol work
outstanding in which no message can be delivered and no coalescer group can flush.

``python -m models.explore`` (``make explore``) runs the standard configurations and writes
build/explore/summary.json.
"""

import argparse
import copyreg
import json
import os
import pickle
import sys
import time
from collections import deque

from cxl import messages as protocol
from .config import Config
from .dcoh import CpuOp
from cxl import coherence as states

from .host import HostOp
from .system import System

__all__ = ["explore", "CONFIGS", "main"]

UNCACHED = ("rdcurr", "itomwr", "wrinv", "clflush")


def _enum_by_name(member):
    return getattr, (type(member), member.name)


# States are cloned by pickling; the default enum pickling calls the enum constructor, which
# dominated exploration time.  Look members up by name instead.
for _cls in (protocol.Channel, protocol.D2HReqOpcode, protocol.D2HRspOpcode, protocol.H2DReqOpcode,
             protocol.H2DRspOpcode, protocol.GOState, states.DevState, states.MESI, states.Perm, HostOp):
    copyreg.pickle(_cls, _enum_by_name)


def _host_busy(host):
    """Whether one of the host's own accesses is still under way (the explorer starts one at a time)."""
    txns = list(host.active.values()) + [t for q in host.queue.values() for t in q]
    return any(t.dev is None and t.op is not HostOp.BackInvalidate for t in txns)


def enabled(sysm, lines, values, cpu_kinds, variants, budget=None, host_kinds=()):
    acts = sysm.protocol_moves()
    protocol = len(acts)
    if budget is not None and sysm.issued >= budget:
        return acts, protocol
    if host_kinds and not _host_busy(sysm.host):
        for line in lines:
            for kind in host_kinds:
                for v in (values if kind == "write" else (0,)):
                    acts.append(("host", kind, line, v))
    for d, dev in enumerate(sysm.devices):
        for k in range(sysm.cfg.caches):
            if dev.ops[k] is not None:
                continue
            for line in lines:
                held = line in dev.caches[k]
                for kind in cpu_kinds:
                    if kind == "evict" and not held:
                        continue
                    if kind == "load" and held:
                        continue       # a hit changes nothing
                    vals = values if kind in ("store", "itomwr", "wrinv") else (0,)
                    for v in vals:
                        for var in (variants if kind in ("load", "store", "evict") else (0,)):
                            acts.append(("cpu", d, k, kind, line, v, var))
    return acts, protocol


def apply(sysm, act):
    if act[0] == "host":
        sysm.host.host_access(act[1], act[2], act[3], sysm.now)
        sysm.issued += 1
        sysm.settle()
        return
    if act[0] != "cpu":
        sysm.apply_move(act)
        return
    _, d, k, kind, line, v, var = act
    sysm.devices[d].accept(CpuOp(kind, k, line, v, var), sysm.now)
    sysm.issued += 1
    sysm.settle()


def describe(act):
    if act[0] == "deliver":
        return f"deliver {'up' if act[2] else 'down'} dev{act[1]}[{act[3]}]"
    if act[0] == "flush":
        return f"dev{act[1]} coalescer flush block {act[2]}"
    if act[0] == "host":
        return f"host {act[1]} line {act[2]}" + (f" value {act[3]}" if act[1] == "write" else "")
    _, d, k, kind, line, v, var = act
    return f"dev{d} cache {k} {kind} line {line} value {v} variant {var}"


def explore(cfg, lines=(0,), values=(0, 1), cpu_kinds=("load", "store", "evict") + UNCACHED,
            variants=(0, 1), budget=None, max_states=None, progress=None, stop_at_first=False, host_kinds=()):
    """BFS; returns a summary dict (with the first violation's trace, if any).  ``budget`` bounds the
    number of CPU and host accesses along any path (None: unbounded; the state space is finite anyway).
    ``host_kinds``: the host's own accesses to explore (models/host.py HOST_ACCESS names)."""
    t0 = time.perf_counter()
    root = System(cfg, timed=False)
    root.issued = 0
    root.checker.initial = values[0]
    start = pickle.dumps(root, pickle.HIGHEST_PROTOCOL)
    keyof = (lambda s: s.key()) if budget is None else (lambda s: (s.issued, s.key()))
    parent = {keyof(root): (None, None)}
    frontier = deque([(keyof(root), start)])
    transitions = 0
    pairs = set()                     # (state, event) pairs the devices took on some explored path
    back_invalidations = 0
    next_report = 50000
    violations, deadlocks = [], []
    complete = True

    def trace(key):
        out = []
        while parent[key][0] is not None:
            key, act = parent[key]
            out.append(describe(act))
        return list(reversed(out))

    while frontier:
        key, blob = frontier.popleft()
        sysm = pickle.loads(blob)
        acts, protocol = enabled(sysm, lines, values, cpu_kinds, variants, budget, host_kinds)
        if protocol == 0 and not sysm.quiescent():
            deadlocks.append({"trace": trace(key), "outstanding": [w for _, w in sysm.outstanding()]})
            if stop_at_first:
                break
            continue
        for act in acts:
            nxt = pickle.loads(blob)
            transitions += 1
            try:
                apply(nxt, act)
                nxt.check_all()
            except AssertionError as e:
                violations.append({"error": str(e), "trace": trace(key) + [describe(act)]})
                continue
            except Exception as e:      # undeclared transition, protocol error: a violation too
                violations.append({"error": f"{type(e).__name__}: {e}", "trace": trace(key) + [describe(act)]})
                continue
            for dev in nxt.devices:       # every transition's pairs (the state it reaches may be known)
                pairs.update(dev.coverage)
            back_invalidations = max(back_invalidations, nxt.host.counts["back_invalidations"])
            k2 = keyof(nxt)
            if k2 in parent:
                continue
            parent[k2] = (key, act)
            if max_states is not None and len(parent) > max_states:
                complete = False
                frontier.clear()
                break
            frontier.append((k2, pickle.dumps(nxt, pickle.HIGHEST_PROTOCOL)))
        if progress and len(parent) >= next_report:
            next_report += 50000
            progress(len(parent), len(frontier))
        if violations and (stop_at_first or len(violations) > 20):
            break
    return {
        "devices": cfg.devices, "caches": cfg.caches, "lines": len(lines), "values": len(values),
        "sf": f"{cfg.sf_sets}x{cfg.sf_ways}", "credits": cfg.credits, "max_outstanding": cfg.max_outstanding,
        "ops": list(cpu_kinds), "host_ops": list(host_kinds), "host_dir": cfg.host_dir if cfg.host_dir == "exact"
        else "finite {}x{}".format(*cfg.host_dir_shape), "variants": list(variants), "access_budget": budget, "states": len(parent), "transitions": transitions,
        "violations": len(violations), "deadlocks": len(deadlocks), "complete": complete and not violations,
        "seconds": round(time.perf_counter() - t0, 2),
        "first_violation": violations[0] if violations else None,
        "first_deadlock": deadlocks[0] if deadlocks else None,
        "state_event": sorted(f"{getattr(s, 'name', s)} / {getattr(e, 'name', e)}" for s, e in pairs),
        "max_back_invalidations": back_invalidations,
    }


def tiny(caches, sf_ways, credits=1, host_dir="exact", host_dir_ways=1, clean_evict_pull=0):
    """A tiny configuration; ``host_dir="finite"`` gives the host a 1-set directory of ``host_dir_ways``
    ways.  (Host traffic comes from the explorer's own moves, so Config.host_traffic stays 0.)  The
    host's CleanEvict answer is one of its two (``clean_evict_pull`` 0: always drop, 1: always pull), not
    the timed runs' every-8th count, which the explored state does not include."""
    return Config(devices=2, caches=caches, sf_sets=1, sf_ways=sf_ways, max_outstanding=2, credits=credits,
                  coalesce_block=2, coalesce_window=0, host_dir=host_dir, host_dir_sets=1,
                  host_dir_ways=host_dir_ways, host_traffic=0, clean_evict_pull=clean_evict_pull)


# name, config, lines, CPU kinds, opcode variants, access budget (None: unbounded), host accesses.
# The one-line shapes are explored completely.  With two lines or two caches per device the reachable
# space grows about 20x per extra access (every access may start between any two deliveries), so
# those are bounded: every interleaving of up to `budget` accesses, measured in docs/verification.md.
LSE = ("load", "store", "evict")
HOST_KINDS = ("read", "read_current", "write")
CONFIGS = [
    ("2dev-1cache-1line", lambda: tiny(1, 1), (0,), LSE + UNCACHED, (0,), None, ()),
    ("2dev-1cache-1line-variants", lambda: tiny(1, 1), (0,), LSE, (0, 1), None, ()),
    ("2dev-1cache-2line-sfevict", lambda: tiny(1, 1), (0, 1), LSE, (0,), 3, ()),
    ("2dev-2cache-1line", lambda: tiny(2, 1), (0,), LSE, (0,), 4, ()),
    # The host's own accesses, each snoop class, racing the devices' on one line.
    ("2dev-1cache-1line-hostaccess", lambda: tiny(1, 1), (0,), LSE, (0,), 3, HOST_KINDS),
    # A 1-set 1-way host directory over two lines (the devices' filters hold both): every read of the
    # other line back-invalidates.
    ("2dev-1cache-2line-hostdir1x1", lambda: tiny(1, 2, host_dir="finite"), (0, 1), LSE, (0,), 3, ()),
    # The host pulls every CleanEvict's clean data (GO_WritePull) instead of dropping it.
    ("2dev-1cache-1line-cleanpull", lambda: tiny(1, 1, clean_evict_pull=1), (0,), LSE, (0, 1), None, ()),
]
# For `make test`: the core load/store/evict protocol on the smallest shape, every interleaving.
QUICK = ("2dev-1cache-1line-lse", lambda: tiny(1, 1), (0,), LSE, (0,), None, ())


def main(argv=None):
    ap = argparse.ArgumentParser(description="Exhaustive exploration of tiny CXL.cache configurations")
    ap.add_argument("--out", default="build/explore/summary.json")
    ap.add_argument("--max-states", type=int, default=None)
    ap.add_argument("--only", default=None, help="run only configurations whose name contains this")
    args = ap.parse_args(argv)
    results = []
    failed = False
    for name, make, lines, kinds, variants, budget, host_kinds in CONFIGS:
        if args.only and args.only not in name:
            continue
        print(f"exploring {name} ...", file=sys.stderr, flush=True)
        r = explore(make(), lines=lines, cpu_kinds=kinds, variants=variants, budget=budget,
                    max_states=args.max_states, host_kinds=host_kinds,
                    progress=lambda n, f: print(f"  {n} states, frontier {f}", file=sys.stderr, flush=True))
        r["name"] = name
        results.append(r)
        print(f"  {r['states']} states, {r['transitions']} transitions, {r['violations']} violations, "
              f"{r['deadlocks']} deadlocks, {r['seconds']} s", file=sys.stderr)
        for what in ("first_violation", "first_deadlock"):
            if r[what]:
                failed = True
                print(f"  {what}: {json.dumps(r[what], indent=2)}", file=sys.stderr)
        if not r["complete"]:
            failed = True
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"configs": results}, f, indent=2)
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
