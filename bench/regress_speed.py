"""Regression throughput on Dask (tb/regress.py): transactions per second of a regress with 1, 2, ...
LocalCluster workers, and its ratio to linear scaling.

    python -m bench.regress_speed [--workers 1,2] [--seeds 8] [--transactions 4000] [--devices 4]
                                  [--job model|rtl] [--sim verilator] [--repeat 3]
                                  [--out build/bench/regress_speed.json]

The seed job is the golden model (``--job model``, models/system.py) or the RTL system (``--job rtl``,
built once in build/sim like ``make sim``).  The same seeds run on each cluster size; the figure is the
passing seeds' transactions over the wall time from the first submission to the last result (the
cluster's start, the workers' imports and the simulator build are not counted); the median of
``--repeat`` runs, the cluster sizes taking turns, beside the same seeds run one after the other in
the benchmark's own process without Dask.  Ratio to linear at N workers: throughput(N)
/ (N x throughput(1)); below 1 is what the scheduler, the workers' start-up per task and a shared
machine cost.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _warm_up():
    """On each worker before timing: the imports a seed's first task would otherwise pay."""
    import models.system  # noqa: F401
    import tb.run_system  # noqa: F401


def measure(job, seeds, workers, out_dir):
    from tb.regress import dask_client, run_and_write
    with dask_client(workers=workers) as (client, label):
        client.wait_for_workers(workers, timeout=120)
        client.run(_warm_up)
        total = run_and_write(client, label, job, seeds, Path(out_dir) / f"w{workers}" / "summary.json",
                              progress=lambda line: None)
    if total["failures"]:
        raise SystemExit(f"{workers} worker(s): failed seeds {total['failed']}")
    return {"workers": workers, "seeds": total["seeds"], "transactions": total["transactions"],
            "elapsed_s": total["elapsed_s"], "transactions_per_s": total["transactions_per_s"]}


def measure_serial(job, seeds):
    """The same seeds one after the other in this process, without Dask: what a worker's overhead is
    measured against."""
    t0 = time.perf_counter()
    tx = sum(job(seed)[0]["transactions"] or 0 for seed in seeds)
    elapsed = time.perf_counter() - t0
    return {"transactions": tx, "elapsed_s": round(elapsed, 1), "transactions_per_s": round(tx / elapsed, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--transactions", type=int, default=4000)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--job", choices=("model", "rtl"), default="model")
    ap.add_argument("--sim", default="verilator", help="with --job rtl")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cluster size; the median is reported")
    ap.add_argument("--out", default="build/bench/regress_speed.json")
    args = ap.parse_args(argv)
    sizes = [int(w) for w in args.workers.split(",")]
    if not sizes or min(sizes) < 1 or args.repeat < 1:
        ap.error(f"--workers {args.workers!r} --repeat {args.repeat}: worker counts and repeats of at least 1")
    from tb.regress import ModelSeed, RtlSeed
    if args.job == "model":
        job = ModelSeed(args.devices, args.transactions)
        params = {}
    else:
        from tb.run_system import build
        t0 = time.perf_counter()
        runner, build_dir, params_path = build(args.sim, args.devices, ROOT / "build" / "sim")
        job = RtlSeed(runner, build_dir, params_path, args.sim, args.devices, args.transactions,
                      flit_monitor=False)
        params = {"build_s": round(time.perf_counter() - t0, 1), "sim": args.sim}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    out = Path(args.out)
    # Sizes alternate within each repeat, and the median repeat counts: the machine's load drifts.
    runs = {w: [] for w in sizes}
    serial = []
    for _ in range(args.repeat):
        serial.append(measure_serial(job, seeds))
        for w in sizes:
            runs[w].append(measure(job, seeds, w, out.parent / "regress_speed"))
    rows = []
    for w in sizes:
        ordered = sorted(runs[w], key=lambda r: r["transactions_per_s"])
        rows.append({**ordered[len(ordered) // 2], "repeats_transactions_per_s":
                     [r["transactions_per_s"] for r in runs[w]]})
    base = next((r for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["ratio_to_linear"] = (round(r["transactions_per_s"] / (r["workers"] * base["transactions_per_s"]), 2)
                                if base and base["transactions_per_s"] else None)
        print(f"{r['workers']} worker(s): {r['seeds']} seeds, {r['transactions']} transactions in "
              f"{r['elapsed_s']} s = {r['transactions_per_s']} transactions/s, ratio to linear "
              f"{r['ratio_to_linear']}")
    serial_row = sorted(serial, key=lambda r: r["transactions_per_s"])[len(serial) // 2]
    print(f"in-process, no Dask: {serial_row['transactions']} transactions in {serial_row['elapsed_s']} s = "
          f"{serial_row['transactions_per_s']} transactions/s")
    result = {"job": args.job, "devices": args.devices, "transactions_per_seed": args.transactions,
              "seeds": args.seeds, **params, "rows": rows,
              "serial_no_dask": {**serial_row, "repeats_transactions_per_s": [r["transactions_per_s"] for r in serial]},
              "load_average_at_end": list(os.getloadavg())}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
