"""Simulation speed of the system testbenches: the batched one on the native Verilator driver
(tb/system_batch.py, tb/native.py: ``make sim``'s default) and the per-cycle cocotb one (tb/system_tb.py) on
Icarus and Verilator, for the default scenario (4 devices), and how the cost grows with the number of
devices and with the snoop-filter size.

    python -m bench.system_speed [--transactions 400] [--scaling 1,2,4,8,16] [--scaling-sim icarus]
                                 [--sf-sizes 16,64,256] [--sf-ways 2] [--sf-devices 2] [--sf-sim icarus]
                                 [--out build/bench/system_speed.json]

Each run is a real scoreboarded run (every message and cache checked) of ``--transactions``
transactions, seed 1; the figure is simulated cycles over the wall time of the run loop (building is
not counted and reported apart).  The default runs also time the same build with no testbench work
(tb/clock_only.py: clock, ReadOnly, one read per cycle), the ceiling of the figure, and on Verilator the
Verilated system alone in a C++ loop (bench/system_ceiling.py), the ceiling of any testbench.

* The batched testbench (``--native-transactions``, default 20 000, ``make sim``'s run; 0 skips it): its
  cycles/s beside its ceiling measured in the same call, the same devices (one native build, N
  instances) clocked from the driver's C++ loop with idle inputs (``tb.native.idle_speed``); and
  ``--native-build-times 1,4,8``: a fresh build (Verilog and Verilator) timed once -- it is the same
  library for any N, which each N then instantiates and clocks (``instantiate_s``).

* Device scaling: the same per device count on ``--scaling-sim`` (``--transactions`` x N / 4, at least
  50, so each device sees about the same load), with cycles/s x devices (device-cycles per second) and
  the wall time per device-cycle relative to the smallest N (1.0 = the cost grows linearly with N).
* Snoop-filter scaling: ``--sf-devices`` devices on ``--sf-sim`` with ``sf_sets`` in ``--sf-sizes`` x
  ``--sf-ways`` ways, each SF size built under its own root (build/sim/sf<sets>x<ways>/, so the default
  build in build/sim is never touched).  Besides cycles/s: simulated cycles per transaction, wall ms per
  transaction, the wall time per cycle relative to the smallest SF, and the testbench's probe counts
  (``dispatch``: what each DCOH engine started; ``coalescing``: internal-cache invalidations -- SF
  back-invalidations and snoop probes -- and the probe messages they were merged into).
  Icarus by default: each SF size is a new build, and a 2-device Verilator build takes ~3.5 min.
* Build time of the per-cycle testbench (``--build-times 1,4,8``, Verilator): a fresh Verilator build of
  N devices, from an empty build folder but the cached Verilog of one device (converted once whatever N:
  its time is reported apart, ``convert_s``).  The device is a hierarchical block (tb/run_system.py), yet
  the build grows with N (+31 % from 1 to 8 devices, docs/testbench.md); the batched testbench's build
  (``native_build_times``) is one library for any N.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from tb.run_system import build, clock_only, run

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"      # shares the converted Verilog and builds with make sim


def sf_root(sets, ways, build_root=BUILD):
    """The build root of one snoop-filter size (a subdirectory: never the default build itself)."""
    return Path(build_root) / f"sf{sets}x{ways}"


SUMMARIES = ROOT / "build" / "bench"   # each run's testbench summary: system_<sim>_<N>[_sf<S>x<W>].json


def one(sim, devices, transactions, seed=1, dcoh=None, build_root=BUILD, tag="", summaries=SUMMARIES,
        limit=False):
    """One scoreboarded run.  ``limit``: also time the same build with no testbench work for as many
    cycles (tb/clock_only.py): ``clock_only_cycles_per_s``, the ceiling of this figure with cocotb; and on
    Verilator the Verilated system alone, clocked from C++ with idle inputs (bench/system_ceiling.py):
    ``cxx_ceiling_cycles_per_s``, the ceiling of any testbench."""
    t0 = time.perf_counter()
    runner, build_dir, params = build(sim, devices, build_root, dcoh=dcoh)
    built = time.perf_counter() - t0
    s = run(runner, build_dir, params, seed, transactions,
            Path(summaries) / f"system_{sim}_{devices}{tag}.json")
    if s.get("violations"):
        raise SystemExit(f"{sim} {devices} devices{tag}: the run failed: {s.get('error')}")
    r = {"sim": sim, "devices": devices, "transactions": s["transactions"], "cycles": s["cycles"],
         "wall_s": s["wall_s"], "cycles_per_s": s["sim_cycles_per_s"],
         "device_cycles_per_s": s["sim_cycles_per_s"] * devices, "build_s": round(built, 1),
         "messages": s.get("messages"), "dispatch": s.get("dispatch"), "coalescing": s.get("coalescing")}
    if limit:
        c = clock_only(runner, build_dir, params, s["cycles"], Path(summaries) / f"clock_only_{sim}_{devices}{tag}.json")
        r["clock_only_cycles_per_s"] = c["cycles_per_s"]
        if sim == "verilator":
            from bench.system_ceiling import measure
            r["cxx_ceiling_cycles_per_s"] = measure(devices, max(s["cycles"], 100000))["cycles_per_s"]
    return r


def _relative(rows, cost, key):
    """rows[i][key] = cost(row) / cost(first row) (the first row is the reference)."""
    base = cost(rows[0]) if rows else None
    for r in rows:
        r[key] = round(cost(r) / base, 3) if base else None


def scaling_sf(sizes=(16, 64, 256), ways=2, devices=2, sim="icarus", transactions=200, seed=1, build_root=BUILD,
               summaries=SUMMARIES):
    rows = []
    for sets in sizes:
        print(f"[system_speed] {sim}, {devices} devices, snoop filter {sets} sets x {ways} ways", flush=True)
        r = one(sim, devices, transactions, seed, dcoh={"sf_sets": sets, "sf_ways": ways},
                build_root=sf_root(sets, ways, build_root), tag=f"_sf{sets}x{ways}", summaries=summaries)
        r.update(sf_sets=sets, sf_ways=ways, sf_entries=sets * ways,
                 cycles_per_tx=round(r["cycles"] / r["transactions"], 2) if r["transactions"] else None,
                 wall_ms_per_tx=round(1e3 * r["wall_s"] / r["transactions"], 2) if r["transactions"] else None,
                 us_per_cycle=round(1e6 * r["wall_s"] / r["cycles"], 1) if r["cycles"] else None)
        rows.append(r)
    rows.sort(key=lambda r: r["sf_entries"])
    _relative(rows, lambda r: r["wall_s"] / r["cycles"], "cost_per_cycle_vs_smallest")
    return rows


def measure(transactions=400, scaling=(1, 2, 4, 8, 16), scaling_sim="icarus", default_devices=4,
            sf_sizes=(16, 64, 256), sf_ways=2, sf_devices=2, sf_sim="icarus", sf_transactions=None,
            default_sims=("icarus", "verilator"), build_root=BUILD, summaries=SUMMARIES):
    build_root = Path(build_root)
    Path(summaries).mkdir(parents=True, exist_ok=True)
    res = {"default": {}, "scaling": [], "scaling_sf": [],
           "params": {"transactions": transactions, "seed": 1, "scaling_sim": scaling_sim,
                      "sf_sim": sf_sim, "sf_devices": sf_devices, "sf_ways": sf_ways,
                      "sf_transactions": sf_transactions or transactions}}
    for sim in default_sims:
        print(f"[system_speed] {sim}, {default_devices} devices", flush=True)
        res["default"][sim] = one(sim, default_devices, transactions, build_root=build_root,
                                 summaries=summaries, limit=True)
    for n in sorted(scaling):
        if n == default_devices and scaling_sim in res["default"]:
            res["scaling"].append(dict(res["default"][scaling_sim]))
            continue
        print(f"[system_speed] {scaling_sim}, {n} devices", flush=True)
        res["scaling"].append(one(scaling_sim, n, max(50, transactions * n // default_devices),
                                  build_root=build_root, summaries=summaries))
    for r in res["scaling"]:
        r["us_per_device_cycle"] = round(1e6 * r["wall_s"] / (r["cycles"] * r["devices"]), 1)
    # wall time per device-cycle relative to the smallest N (N=1 by default): 1.0 is linear growth with N
    _relative(res["scaling"], lambda r: r["wall_s"] / (r["cycles"] * r["devices"]),
              "cost_per_device_cycle_vs_smallest_n")
    if sf_sizes:
        res["scaling_sf"] = scaling_sf(sf_sizes, sf_ways, sf_devices, sf_sim, sf_transactions or transactions,
                                       build_root=build_root, summaries=summaries)
    return res


def build_times(counts=(1, 4, 8), sim="verilator", root=BUILD / "build_time"):
    """Seconds for a fresh ``sim`` build of each device count in ``counts`` (rows), from an empty folder
    but the converted Verilog, which is made (and timed) once first."""
    from tb.system_top import build_system
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    t0 = time.perf_counter()
    build_system(1, root / "rtl")                 # converts linked_device.v once, or finds it cached
    convert = time.perf_counter() - t0
    rows = []
    for n in counts:
        for old in root.glob(f"{sim}_*"):
            shutil.rmtree(old)
        print(f"[system_speed] fresh {sim} build of {n} devices", flush=True)
        t0 = time.perf_counter()
        build(sim, n, root)
        rows.append({"sim": sim, "devices": n, "build_s": round(time.perf_counter() - t0, 1)})
    shutil.rmtree(root)
    return {"convert_s": round(convert, 1), "rows": rows}


def native(devices=4, transactions=20000, seed=1, build_root=BUILD, summaries=SUMMARIES, pipeline=False):
    """One scoreboarded run of the batched testbench on the native driver (``make sim``'s default), and the
    ceiling in the same call: the same devices clocked with idle inputs, for as many cycles."""
    from tb.native import idle_speed
    from tb.run_system import DEFAULT_BATCH, PIPELINE_BATCH
    batch = PIPELINE_BATCH if pipeline else DEFAULT_BATCH
    t0 = time.perf_counter()
    runner, build_dir, _ = build("verilator", devices, build_root, batched=True)
    built = time.perf_counter() - t0
    s = run(runner, build_dir, None, seed, transactions, Path(summaries) / f"system_native_{devices}.json",
            batch=batch, pipeline=pipeline)
    if s.get("violations"):
        raise SystemExit(f"native, {devices} devices: the run failed: {s.get('error')}")
    ceiling = idle_speed(runner, devices, max(s["cycles"], 100000))
    return {"sim": "verilator-native", "devices": devices, "transactions": s["transactions"],
            "cycles": s["cycles"], "wall_s": s["wall_s"], "cycles_per_s": s["sim_cycles_per_s"],
            "model_s": s["batch"]["model_s"], "batch": batch, "pipeline": pipeline,
            "ceiling_cycles_per_s": ceiling, "ratio_to_ceiling": round(s["sim_cycles_per_s"] / ceiling, 3),
            "build_s": round(built, 1), "messages": s.get("messages")}


def native_build_times(counts=(1, 4, 8), root=BUILD / "build_time_native", cycles=1000):
    """A fresh build of the batched device (its Verilog and its Verilator library, from an empty folder),
    timed once: the library is the same for any number of devices.  Then per N: instantiating N devices
    and clocking them ``cycles`` cycles (``instantiate_s``), so that each N is shown to run from it."""
    from tb.native import NativeSystem
    from tb.system_top import UNIT_RESET_CYCLES
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    t0 = time.perf_counter()
    runner, _, _ = build("verilator", max(counts), root, batched=True)
    built = round(time.perf_counter() - t0, 1)
    rows = []
    for n in counts:
        t0 = time.perf_counter()
        system = NativeSystem(runner.lib, runner.ports, n)
        system.step(cycles)
        if any(system.port(d, "now").value != cycles - UNIT_RESET_CYCLES for d in range(n)):
            raise SystemExit(f"native build: {n} devices did not all count {cycles} cycles")
        system.close()
        rows.append({"devices": n, "build_s": built, "instantiate_s": round(time.perf_counter() - t0, 3)})
    shutil.rmtree(root)
    return {"build_s": built, "rows": rows}


def main_job_times(regress=False, build_root=BUILD):
    """Wall seconds of the default ``make sim`` from an empty ``build/sim`` (the venv and the YoWASP caches
    kept: ``make deps`` has run), and with ``regress`` of the default ``make regress`` (10^6 transactions:
    50 seeds of 20 000 on 2 workers, after its ``pytest -m slow`` part), each as one subprocess."""
    import subprocess
    res = {}
    if Path(build_root).exists():
        shutil.rmtree(build_root)
    for name in ("sim",) + (("regress",) if regress else ()):
        print(f"[system_speed] make {name}", flush=True)
        t0 = time.perf_counter()
        r = subprocess.run(["make", name], cwd=ROOT, capture_output=True, text=True)
        res[f"make_{name}_s"] = round(time.perf_counter() - t0, 1)
        if r.returncode:
            raise SystemExit(f"make {name} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return res


def parse_ints(s):
    return tuple(int(x) for x in s.split(",") if x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=400)
    ap.add_argument("--scaling", default="1,2,4,8,16", help="device counts (1..16; empty: none)")
    ap.add_argument("--scaling-sim", default="icarus", choices=("icarus", "verilator"))
    ap.add_argument("--sf-sizes", default="16,64,256", help="snoop-filter sets (powers of two; empty: none)")
    ap.add_argument("--sf-ways", type=int, default=2)
    ap.add_argument("--sf-devices", type=int, default=2)
    ap.add_argument("--sf-sim", default="icarus", choices=("icarus", "verilator"))
    ap.add_argument("--sf-transactions", type=int, default=None, help="default: --transactions")
    ap.add_argument("--default-sims", default="icarus,verilator",
                    help="simulators of the default 4-device runs (empty: none)")
    ap.add_argument("--build-root", default=None,
                    help="the device-count builds go here (default build/sim, shared with make sim), "
                         "each SF size under <root>/sf<sets>x<ways>")
    ap.add_argument("--build-times", default="", help="device counts of fresh Verilator builds to time (e.g. 1,4,8)")
    ap.add_argument("--out", default="build/bench/system_speed.json")
    args = ap.parse_args(argv)
    times = build_times(parse_ints(args.build_times)) if args.build_times else None
    res = {} if args.transactions == 0 else measure(args.transactions, parse_ints(args.scaling), args.scaling_sim, sf_sizes=parse_ints(args.sf_sizes),
                  sf_ways=args.sf_ways, sf_devices=args.sf_devices, sf_sim=args.sf_sim,
                  sf_transactions=args.sf_transactions,
                  default_sims=tuple(x for x in args.default_sims.split(",") if x),
                  build_root=Path(args.build_root).resolve() if args.build_root else BUILD,
                  summaries=Path(args.out).resolve().parent)
    if times:
        res["build_times"] = times
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
