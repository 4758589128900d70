"""Simulation speed of the cocotb system testbench (tb/system_tb.py): cycles per second on Icarus and
Verilator for the default scenario (4 devices), and how the cost grows with the number of devices.

    python -m bench.system_speed [--transactions 400] [--scaling 1,2,4,8,16] [--scaling-sim icarus]
                                 [--out build/bench/system_speed.json]

Each run is a real scoreboarded run (every message and cache checked) of ``--transactions``
transactions, seed 1; the figure is simulated cycles over the wall time of the cocotb run loop
(building is not counted and reported apart).  Scaling: the same per device count on
``--scaling-sim``, and cycles/s x devices (device-cycles per second) to show the cost per device.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from tb.run_system import build, run

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"      # shares the converted Verilog and builds with make sim


def one(sim, devices, transactions, seed=1):
    t0 = time.perf_counter()
    runner, build_dir, params = build(sim, devices, BUILD)
    built = time.perf_counter() - t0
    s = run(runner, build_dir, params, seed, transactions, ROOT / "build" / "bench" / f"system_{sim}_{devices}.json")
    if s.get("violations"):
        raise SystemExit(f"{sim} {devices} devices: the run failed: {s.get('error')}")
    return {"sim": sim, "devices": devices, "transactions": s["transactions"], "cycles": s["cycles"],
            "wall_s": s["wall_s"], "cycles_per_s": s["sim_cycles_per_s"],
            "device_cycles_per_s": s["sim_cycles_per_s"] * devices, "build_s": round(built, 1)}


def measure(transactions=400, scaling=(1, 2, 4, 8, 16), scaling_sim="icarus", default_devices=4):
    res = {"default": {}, "scaling": [], "params": {"transactions": transactions, "seed": 1}}
    for sim in ("icarus", "verilator"):
        print(f"[system_speed] {sim}, {default_devices} devices", flush=True)
        res["default"][sim] = one(sim, default_devices, transactions)
    for n in scaling:
        if n == default_devices and scaling_sim in res["default"]:
            res["scaling"].append(res["default"][scaling_sim])
            continue
        print(f"[system_speed] {scaling_sim}, {n} devices", flush=True)
        res["scaling"].append(one(scaling_sim, n, max(50, transactions * n // default_devices)))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=400)
    ap.add_argument("--scaling", default="1,2,4,8,16")
    ap.add_argument("--scaling-sim", default="icarus")
    ap.add_argument("--out", default="build/bench/system_speed.json")
    args = ap.parse_args(argv)
    res = measure(args.transactions, tuple(int(x) for x in args.scaling.split(",") if x), args.scaling_sim)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
