"""`make bench`: every benchmark figure, each beside its limit, into build/bench/results.json and
BENCHMARKS.md (committed: machine, date, command, figures).

    python -m bench.run [--link-budget SECONDS] [--out build/bench] [--doc BENCHMARKS.md]
    python -m bench.run --update-make-test     # only the last `make test` wall time, into the last results
    python -m bench.run --update-dcoh          # only the DCOH cycle counts, measured again, into the last results

Figures and where they come from:

* ``model_msgs_per_s``: the golden model's timed system (``models.system.run``, default scenario, 20k
  transactions, invariant checks on: every touched line after every step, and credits) -- messages
  per wall second (target 200k), the median of ``MODEL_RUNS`` fresh interpreters on the pure-Python
  sources; ``model_compiled_msgs_per_s`` the same on the compiled build (models/compiled.py; ``make
  bench`` builds it first when it can), null when it is not built for the current sources;
* ``snoop_per_cycle``, ``snoop_miss_latency_cycles`` and the DCOH's other cycle counts:
  ``bench.dcoh_bench`` on the RTL (also rewrites bench/dcoh_cycles.json, which the CXL timing model reads),
  among them the streams of non-conflicting lines (``snoop_hit_per_cycle``, ``snoop_hit_probe_per_cycle``,
  ``request_events_per_cycle``, each in a row beside its target, ``DCOH_STREAMS``, and their latencies);
  ``--update-dcoh`` measures only these (~2 min) into the last full run's results;
* ``link_efficiency``: ``bench.link_bench`` on the RTL loopback, measured beside the analytic optimum,
  plus flits per cycle, retry recovery and the BER runs (bounded by ``--link-budget``);
* ``sim_cycles_per_s.amaranth``: amaranth.sim speed of the device top behind a whole link
  (tb/linked_device.py) under the golden-model co-simulation;
* ``sim_cycles_per_s.batch`` / ``raw_verilator``: ``bench.link_verilator`` -- the link loopback with an
  RTL traffic generator and checker in Verilator (only a summary read back), beside the bare loopback in
  Verilator; also its BER runs (>= 10^6 flits per rate).  They are the *link's* figures: the whole
  system in Verilator needs the cocotb system testbench;
* ``sim_cycles_per_s.icarus/verilator``: the cocotb system testbench (tb/system_tb.py, 4 devices, every
  message scoreboarded) on each simulator (``bench.system_speed``; ``--system-transactions 0`` skips it
  and records null with that reason);
* ``system_speed.scaling``: how its cost grows with N devices (1, 2, 4, 8, 16) on ``--scaling-sim``
  (Icarus by default: Verilator builds grow ~linearly with N, ~3.5 min for 2 devices, so 1..16 would add
  ~45 min of builds); ``cost_per_device_cycle_vs_smallest_n`` is the wall time per device-cycle over
  N=1's (1.0: linear in N);
* ``system_speed.scaling_sf``: the same with the snoop-filter size (``--sf-sizes`` sets x 2 ways, 2
  devices, Icarus, ``--sf-transactions`` each; each size its own build under build/sim/sf<sets>x<ways>):
  cycles/s, cycles per transaction, wall per cycle relative to the smallest SF, and the probe counts;
* ``native``: ``make sim``'s testbench, the batched one on the native Verilator driver (4 devices, 20 000
  transactions, every message scoreboarded), cycles/s beside the 20 000 target and beside its ceiling
  measured in the same run (the same devices clocked with idle inputs, ``tb.native.idle_speed``); a fresh
  build of its device (the same library for any N; ``native_build``); and the wall time of the default
  ``make sim`` from an empty build/sim (``main_job``).  ``--update-native`` measures only these into the
  last results, ``--with-regress`` adds the default ``make regress`` (about a quarter of an hour);
* ``make_test_s``: the wall time of the last ``make test`` (the Makefile records it in
  build/bench/make_test_s.txt), or null if it has not run on this checkout.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_YET = "not measured in this run (--system-transactions 0)"
MODEL_RUNS = 5            # golden-model speed: median of this many runs
SF_TRANSACTIONS = 400     # 2-device Icarus runs (~30 s each): enough for the SF to fill and evict
SYSTEM_NOTE = "cocotb system testbench, 4 devices, every message scoreboarded (bench/system_speed.py)"


def _system(sysr, sim):
    return sysr["default"][sim]["cycles_per_s"] if sysr else None


_MODEL_RUN = """
import json
from models.compiled import active
from models.config import Config
from models.system import run
r = run(Config(), {transactions}, seed=1)
print(json.dumps({{"msgs_per_s": r["model_msgs_per_s"], "messages": r["messages"], "wall_s": r["wall_s"],
                  "transactions": r["transactions"], "cycles": r["cycles"], "build": active()}}))
"""


def model_speed(transactions=20000, build="python", runs=MODEL_RUNS):
    """The golden model's messages per wall second, median of ``runs`` fresh interpreters (the machine
    may be shared: the spread is kept too).  ``build``: "python" (the sources) or "cython" (the
    ``make fast-model`` build; None if it is not built for the current sources)."""
    if build == "cython":
        from models.compiled import compiled_dir
        if compiled_dir() is None:
            return None
    env = {**os.environ, "CXL_MODEL_BUILD": build}
    rs = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, "-c", _MODEL_RUN.format(transactions=transactions)], cwd=ROOT,
                           env=env, check=True, capture_output=True, text=True)
        rs.append(json.loads(p.stdout.splitlines()[-1]))
    if any(r["build"] != build for r in rs):
        raise RuntimeError(f"asked for the {build} golden model, ran {[r['build'] for r in rs]}")
    speeds = sorted(r["msgs_per_s"] for r in rs)
    return {**rs[0], "msgs_per_s": speeds[len(speeds) // 2], "runs": speeds}


def amaranth_speed(steps=80, seed=5):
    """Cycles per second of amaranth.sim on the device top + link under the co-simulation."""
    sys.path.insert(0, str(ROOT / "tests"))
    from amaranth.sim import Simulator
    from dcoh_cosim import CONFIG, run_cosim
    from models.config import Config
    from tb.linked_device import LinkedDevice
    cfg = Config(**CONFIG)
    dut = LinkedDevice(dcoh=dict(caches=cfg.caches, sf_sets=cfg.sf_sets, sf_ways=cfg.sf_ways,
                                 tracker=cfg.max_outstanding, work=8, coalesce_window=128,
                                 coalesce_block=cfg.coalesce_block, coalesce_groups=4, credits=64),
                       link=dict(retry_depth=64))
    cycles = [0]

    async def counter(ctx):
        async for _ in ctx.tick():
            cycles[0] += 1

    async def bench(ctx):
        await run_cosim(ctx, dut, seed, steps, cfg=cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(counter)
    sim.add_testbench(bench)
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0
    return {"cycles_per_s": round(cycles[0] / wall), "cycles": cycles[0], "wall_s": round(wall, 1),
            "design": "tb/linked_device.py (DCOH 2 caches, SF 2x2, tracker 4 + both link ends)"}


def link_figures(budget):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "link.json"
        subprocess.run([sys.executable, "-m", "bench.link_bench", "--budget", str(budget), "--out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def link_verilator(budget):
    """bench.link_verilator (builds once, ~8 min; --reuse keeps an existing build)."""
    out = ROOT / "build" / "bench" / "link_verilator.json"
    subprocess.run([sys.executable, "-m", "bench.link_verilator", "--budget", str(budget), "--reuse",
                    "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def ratio(measured, limit):
    return None if measured is None or not limit else round(measured / limit, 3)


def _scaling_tables(sysr):
    """The device-count and snoop-filter-size scaling tables (bench.system_speed)."""
    lines = []
    rows = sysr.get("scaling") or []
    if rows:
        ref = rows[0]
        lines += [f"### Scaling with the number of devices ({sysr['params'].get('scaling_sim', rows[0]['sim'])})", "",
                  f"Transactions per run: {sysr['params']['transactions']} x N / 4 (at least 50), so each device "
                  "sees about the same load. Limit: the wall time per device-cycle at "
                  f"N={ref['devices']} (linear growth); ratio = this N's over it (above 1: worse than linear).", "",
                  "| devices | transactions | cycles | cycles/s | device-cycles/s | µs per device-cycle | "
                  f"limit (N={ref['devices']}) | ratio | build (s) |", "|---|---|---|---|---|---|---|---|---|"]
        for x in rows:
            lines.append(f"| {x['devices']} | {x['transactions']} | {x['cycles']} | {x['cycles_per_s']} | "
                         f"{x['device_cycles_per_s']} | {x.get('us_per_device_cycle', '—')} | "
                         f"{ref.get('us_per_device_cycle', '—')} | {x.get('cost_per_device_cycle_vs_smallest_n', '—')} | {x['build_s']} |")
        lines.append("")
    rows = sysr.get("scaling_sf") or []
    if rows:
        ref = rows[0]
        p = sysr["params"]
        lines += [f"### Scaling with the snoop-filter size ({p.get('sf_sim')}, {p.get('sf_devices')} devices, "
                  f"{p.get('sf_transactions')} transactions)", "",
                  "Limit: the wall time per simulated cycle with the smallest SF; ratio = this size's over it. "
                  "Probe counts from the testbench summary: host snoops the DCOHs took (`dispatch.SNOOP`), "
                  "probes acknowledged (`dispatch.WORK`), internal-cache invalidations -- SF back-invalidations "
                  "and snoop probes -- and the probe messages they were coalesced into (`coalescing`).", "",
                  "| SF (sets x ways) | transactions | cycles | cycles/transaction | cycles/s | wall ms/transaction | "
                  f"µs per cycle | limit ({ref['sf_sets']}x{ref['sf_ways']}) | ratio | host snoops | probes acked | "
                  "invalidations in / probe messages | build (s) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in rows:
            d, c = x.get("dispatch") or {}, x.get("coalescing") or {}
            lines.append(f"| {x['sf_sets']}x{x['sf_ways']} | {x['transactions']} | {x['cycles']} | {x['cycles_per_tx']} | "
                         f"{x['cycles_per_s']} | {x['wall_ms_per_tx']} | {x['us_per_cycle']} | {ref['us_per_cycle']} | "
                         f"{x['cost_per_cycle_vs_smallest']} | {d.get('SNOOP', '—')} | {d.get('WORK', '—')} | "
                         f"{c.get('invalidations_in', '—')} / {c.get('messages_out', '—')} | {x['build_s']} |")
        lines.append("")
    return lines


# The DCOH's streams of non-conflicting lines (bench/dcoh_bench.py): (JSON key, what it counts, target
# per cycle), then the latencies measured beside them (JSON keys, what they are)
DCOH_STREAMS = (
    ("snoop_hit_per_cycle", "snoop-filter-hit snoops per cycle, no probe (SnpData to S lines)", 0.99),
    ("snoop_hit_probe_per_cycle", "snoops per cycle that probe the internal caches (SnpInv to S lines, "
     "the caches answering at once)", 0.99),
    ("request_events_per_cycle", "request events per cycle (CPU accesses, GO, Data: 8 caches loading and "
     "evicting lines of their own)", 0.5),
)
DCOH_STREAM_LATENCIES = (
    (("snoop_hit_latency", "snoop_hit_probe_latency"),
     "DCOH snoop-to-response latency in those streams, no probe / probe (cycles, largest)"),
    (("request_cpu_to_d2h_req_latency", "request_host_to_cpu_rsp_latency"),
     "DCOH request stream: CPU access -> D2H Req / host's last message -> cpu_rsp (cycles, largest)"),
)


def dcoh_stream_rows(dcoh):
    """BENCHMARKS.md rows of the DCOH's stream figures, each beside its target, then the latencies
    beside them; "—" where the results predate a figure."""
    rows = []
    for key, what, target in DCOH_STREAMS:
        v = dcoh.get(key)
        rows.append(f"| DCOH {what} | {'—' if v is None else v} | {target} (target, at least) | "
                    f"{ratio(v, target) or '—'} |")
    for keys, what in DCOH_STREAM_LATENCIES:
        rows.append(f"| {what} | {' / '.join(str(dcoh.get(k, '—')) for k in keys)} | — | — |")
    return rows


def markdown(res):
    r = res
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench UPDATE_DOCS=1` (`python -m bench.run --update-docs`) on {r['machine']['date']} on {r['machine']['cpu']} "
        f"({r['machine']['cores']} cores), Python {r['machine']['python']}. Raw: `build/bench/results.json`.",
        "Each figure is given beside its limit (target or analytic optimum) as a ratio." +
        (f" The DCOH figures were measured again on {r['machine']['dcoh_date']} (`python -m bench.run "
         "--update-dcoh`), the others are from the run above." if r["machine"].get("dcoh_date") else "") +
        (f" The link rows (payload efficiency, BER runs) were measured again on {r['machine']['link_date']} "
         "(`python -m bench.run --update-link`: bench.link_bench as `make bench` runs it)." if r["machine"].get("link_date") else "") +
        (f" The rows of `make sim`'s testbench (verilator-native, its build, make sim from empty) were measured "
         f"again on {r['machine']['native_date']} (`python -m bench.run --update-native`)."
         if r["machine"].get("native_date") else ""),
        "",
        "| figure | measured | limit | ratio |",
        "|---|---|---|---|",
        f"| golden model, messages/s (default scenario, invariant checks on; pure Python, median of "
        f"{len(r['model'].get('runs', [0]))}) | {r['model_msgs_per_s']:,} | 200,000 (target) | {ratio(r['model_msgs_per_s'], 200000)} |",
        f"| golden model, messages/s (the same, compiled build: `make fast-model`, which `make sim`, `regress` and "
        f"`model` run first) | "
        f"{format(r['model_compiled_msgs_per_s'], ',') if r.get('model_compiled_msgs_per_s') else '— (not built)'} | "
        f"200,000 (target) | {ratio(r.get('model_compiled_msgs_per_s'), 200000) or '—'} |",
        f"| DCOH snoop-filter-miss snoops per cycle | {r['snoop_per_cycle']} | 0.99 (target, at least) | {ratio(r['snoop_per_cycle'], 0.99)} |",
        f"| DCOH miss snoop-to-response latency (cycles) | {r['snoop_miss_latency_cycles']} | 2 (target, at most) | {ratio(r['snoop_miss_latency_cycles'], 2)} |",
    ]
    lines += dcoh_stream_rows(r["dcoh"])
    for w, e in r["link_efficiency"].items():
        lines.append(f"| link payload efficiency, {w}, link port defaults (packer wait "
                     f"{r['link'].get('efficiency_wait', 0)}) | {e['measured']:.4f} | {e['optimum']:.4f} (optimum) | {ratio(e['measured'], e['optimum'])} |")
    for w, e in r["link"].get("efficiency_paced", {}).items():
        lines.append(f"| link payload efficiency, {w}, link port defaults, paced sources (every channel kept to "
                     f"its share) | {e['efficiency']:.4f} | {e['optimum']:.4f} (optimum) | {ratio(e['efficiency'], e['optimum'])} |")
    for cfg in r["link"].get("efficiency_by_config", []):
        setting = f"packer wait {cfg['pack_wait']}" + (f", {cfg['tx_depth']}-deep queues" if "tx_depth" in cfg else "")
        for w, e in cfg["efficiency"].items():
            lines.append(f"| link payload efficiency, {w}, {setting} | {e['efficiency']:.4f} | "
                         f"{e['optimum']:.4f} (optimum) | {ratio(e['efficiency'], e['optimum'])} |")
        for w, e in cfg.get("efficiency_paced", {}).items():
            lines.append(f"| link payload efficiency, {w}, {setting}, paced sources | {e['efficiency']:.4f} | "
                         f"{e['optimum']:.4f} (optimum) | {ratio(e['efficiency'], e['optimum'])} |")
    lk = r["link"]
    lines += [
        f"| link flits per cycle, streaming (up / down) | {lk['throughput']['up_flits_per_cycle']:.3f} / {lk['throughput']['down_flits_per_cycle']:.3f} | 1 (target) | {ratio(lk['throughput']['up_flits_per_cycle'], 1)} |",
        f"| link retry recovery (cycles, mean) | {lk['recovery']['mean_cycles']} | — | — |",
        f"| link BER runs in amaranth.sim: flits checked | {lk['ber']['total_flits']:,} | 1,000,000 (target) | {ratio(lk['ber']['total_flits'], 10**6)} |",
    ]
    for ber, b in r["link_verilator"]["ber"]["runs"].items():
        lines.append(f"| link BER {ber} in Verilator: flits (mismatches {b['mismatches']}) | {b['flits']:,} | "
                     f"1,000,000 (target) | {ratio(b['flits'], 10**6)} |")
    for k, v in r["sim_cycles_per_s"].items():
        limit = {"batch": 10**6, "verilator": 10**5}.get(k)
        lines.append(f"| simulation speed, {k} (cycles/s): {r['sim_notes'].get(k, '')} | "
                     f"{v if v is not None else '—'} | {f'{limit:,} (target)' if limit else '—'} | {ratio(v, limit)} |")
    lines += native_rows(r.get("native"))
    lines.append(f"| `make test` wall time (s) | {r['make_test_s'] if r['make_test_s'] is not None else '—'} | 600 (limit) | {ratio(r['make_test_s'], 600)} |")
    lines += ["", "## DCOH cycle counts (RTL)", "", "```", json.dumps(r["dcoh"], indent=1), "```", "",
              "## Link BER runs", "", "| BER | flits | errors | retries | flits/cycle both ways |", "|---|---|---|---|---|"]
    for ber, b in lk["ber"]["runs"].items():
        lines.append(f"| {ber} | {b['flits']:,} | {b['errors_injected']:,} | {b['retries']:,} | {b['flits_per_cycle_both_ways']:.2f} |")
    lines += ["", "## Notes", "",
              "- Golden model speed (checks on, the default): the timed loop visits only cycles with something "
              "due (each cycle once, `models.link.WakeTimes`) and, in them, serves only the links with "
              "something due; each step checks SWMR, data value, memory and inclusion of every touched line in "
              "one pass, and credit conservation on the channels whose counters moved. Every speed change "
              "keeps the same messages at the same cycles, the same summary and the same errors at the same "
              "cycle (tests/test_model_equivalence.py: digests of the whole message trace of six runs and of "
              "five runs broken on purpose; tests/test_model_build.py checks them on the compiled build). "
              "Instructions beyond imports (cachegrind, 2k transactions, seed 1): 1.15e9 before the rounds of "
              "speed work, 1.03e9 pure Python (identity hashes for the opcode enums, credit checks on the "
              "moved channels only, containers gathered once), 0.92e9 with `make fast-model` compiling the hot "
              "modules without static types (only the interpreter's dispatch removed), 0.56e9 with the static "
              "types of a `.pxd` beside each hot module (classes as extension types with C fields and C-called "
              "methods, models/compiled.py), and 0.337e9 now (~34k per message; 1.01e9 pure Python), with the "
              "compiled build's own overheads removed one at a time, each measured: every cpdef call on the "
              "devices, coalescers and links looked for a method replaced in the instance's `__dict__` through "
              "a one-instance cache that missed whenever calls alternated between devices (8 %; the "
              "testbenches instrument with subclasses now), messages were NamedTuples whose fields are read "
              "through descriptors (8 %; `Msg` is an extension type), `None in ops` compared every outstanding "
              "access with None (6 %; the device counts them), enum members were read as attributes of "
              "`Members` objects (4 %; module constants), untyped method calls by name (a deque's popleft, "
              "`dict.get` on module globals, `list.pop(i)`, `set.update`), the checker's f-string per read and "
              "write (formatted now only when an error names it), repeated wake times (55 % of the pushes), "
              "and the watchdog describing every outstanding item every 1 000 cycles (models/system.py "
              "docstring). Wall-clock figures swing with the load of this shared 2-core machine (one round of "
              "five compiled runs spread 178,515-216,907): compare runs made under the same load, as the rows' "
              "note does.",
              "- The link ports' defaults: packer wait 3 (`cxl.flit.DEFAULT_PACK_WAIT`; a packer holds a partly "
              "filled flit only within 3 decisions of its last protocol flit, so a quiet link sends at once) and "
              "8-deep packer queues (`LinkPort(tx_depth=8)`, enough lines queued to put four Data Headers in a "
              "header flit, and the paced mixed run at 0.976 of its bound, against 0.959 with 6-deep queues). The `packer wait 0` rows are the eager packer (a flit as soon as one message waits), "
              "which sends half-empty flits when about one message comes per cycle. The mixed optimum is a bound "
              "by counting slots (`models.flit.fewest_flits`); the Python packer, fed whole queues, reaches the "
              "snoop-storm optimum and 97 % of the mixed bound (`python -m models.flit --efficiency`); "
              "docs/link_layer.md, \"Waiting to fill a flit\", has the sweep of waits and their latency. "
              "The loopback's receive queues (each channel's credit pool) are 32 deep (`bench.link_bench.RX_DEPTH`): "
              "a credit's round trip through two link ports is about 24 cycles (23 idle). At that depth the link ports gather "
              "credit returns 8 at a time on an idle direction (`LinkPort` `credit_batch`, `default_credit_batch`; "
              "docs/link_layer.md, \"Batching credit returns\"). The defaults bring every workload but the unpaced "
              "mixed one to 0.97; the `6-deep queues` rows (`--rtl-configs` 3x6) are the former default "
              "(`LinkPort` keeps ceil(7 x `tx_depth` / 4) + 11 retry-buffer entries free for draining, 25 at 8 deep, "
              "within the 64-entry retry buffers the system testbench uses; docs/link_layer.md). Unpaced, every source offers a message per cycle and the "
              "mixed workload's channels with fewer messages finish first (after the first third the upstream "
              "carries requests alone, and once they run out it returns the downstream's credits and acks in "
              "LLCRDs in its idle cycles); "
              "the paced row keeps every channel to its share of its direction's messages.",
              f"- Verilator BER runs share `--verilator-budget` ({r['link_verilator']['params'].get('budget_s')} s "
              "here) over four rates; `python -m bench.link_verilator --budget 240 --reuse` gives 2-3.6 M flits "
              "per rate (0 mismatches at every rate).",
              "- Verilator link loopback: Amaranth's Verilog went through Yosys `proc`, whose final `opt_expr` "
              "bit-blasted the CRC masks into ~22k 512-bit read-modify-writes per cycle; `hdl.verilog.to_verilog` "
              "(`proc -noopt`), registered inputs and -O2 C++ took it from ~2.5x10^4 to ~1.5x10^5 cycles/s "
              "(callgrind: 188k -> 25k instructions per cycle). What is left is flat over the CRC trees, the "
              "unpacker's pre-decode and 512-bit muxes; 1 M cycles/s needs ~5x less logic per cycle or threads.",
              ""]
    sysr = r.get("system_speed")
    if sysr:
        lines += ["## cocotb system testbench speed", "",
                  f"`python -m bench.system_speed` ({sysr['params']['transactions']} transactions per run, seed 1, "
                  "every message and cache scoreboarded; build time not counted).", "",
                  "Limits: the same build and cycles with no testbench work (tb/clock_only.py: the clock, "
                  "ReadOnly and one read per cycle), i.e. the simulator plus cocotb's per-cycle cost; and, on "
                  "Verilator, the Verilated system alone clocked from a C++ loop with idle inputs "
                  "(bench/system_ceiling.py), the ceiling of any testbench.", "",
                  "| simulator | devices | transactions | cycles | cycles/s | device-cycles/s | "
                  "limit: clock only (cycles/s) | ratio | limit: C++ loop (cycles/s) | ratio | build (s) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in sysr["default"].values():
            lim = x.get("clock_only_cycles_per_s")
            cxx = x.get("cxx_ceiling_cycles_per_s")
            lines.append(f"| {x['sim']} | {x['devices']} | {x['transactions']} | {x['cycles']} | {x['cycles_per_s']} | "
                         f"{x['device_cycles_per_s']} | {lim or '—'} | {ratio(x['cycles_per_s'], lim) or '—'} | "
                         f"{cxx or '—'} | {ratio(x['cycles_per_s'], cxx) or '—'} | {x['build_s']} |")
        lines.append("")
        lines += _scaling_tables(sysr)
    return "\n".join(lines)


def native_rows(nat):
    """BENCHMARKS.md rows of make sim's testbench (the batched one, native driver), each beside its limit."""
    if not nat:
        return []
    run, build, job = nat["run"], nat["build"], nat.get("main_job", {})
    rows = [f"| simulation speed, verilator-native (cycles/s): `make sim`'s batched testbench, {run['devices']} "
            f"devices, {run['transactions']:,} transactions, every message scoreboarded | {run['cycles_per_s']:,} | "
            f"20,000 (target) | {ratio(run['cycles_per_s'], 20000)} |",
            f"| the same beside its ceiling: the same devices clocked with idle inputs, measured in the same run "
            f"(cycles/s) | {run['cycles_per_s']:,} | {run['ceiling_cycles_per_s']:,} (ceiling) | "
            f"{run['ratio_to_ceiling']} |",
            f"| build of the batched device from an empty folder, Verilog + Verilator (s; one library for any N: "
            f"{', '.join(str(x['devices']) for x in build['rows'])} devices run from it) | {build['build_s']} | "
            f"120 (target) | {ratio(build['build_s'], 120)} |"]
    if job.get("make_sim_s") is not None:
        rows.append(f"| default `make sim` from an empty build/sim (s) | {job['make_sim_s']} | 180 (target) | "
                    f"{ratio(job['make_sim_s'], 180)} |")
    if job.get("make_regress_s") is not None:
        when = f", measured {job['make_regress_date']}" if job.get("make_regress_date") else ""
        rows.append(f"| default `make regress`: 10^6 transactions on 2 workers, with its slow tests (s{when}) | "
                    f"{job['make_regress_s']} | 900 (target) | {ratio(job['make_regress_s'], 900)} |")
    return rows


def measure_native(regress=False):
    """The ``native`` figures (see the module docstring)."""
    from bench import system_speed
    print("[bench] make sim's testbench: fresh build, run beside its ceiling, make sim from empty", flush=True)
    build = system_speed.native_build_times()
    run = system_speed.native()
    job = system_speed.main_job_times(regress=regress)
    return {"run": run, "build": build, "main_job": job,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def update_native(out, doc, regress=False):
    """Only the ``native`` figures, measured again into the existing results.json and the document."""
    path = out / "results.json"
    if not path.exists():
        raise SystemExit(f"{path}: no earlier results to update (run make bench first)")
    res = json.loads(path.read_text())
    before = (res.get("native") or {}).get("main_job", {})
    res["native"] = measure_native(regress)
    job = res["native"]["main_job"]
    if "make_regress_s" not in job and "make_regress_s" in before:       # not measured again: kept, dated
        job["make_regress_s"] = before["make_regress_s"]
        job["make_regress_date"] = before.get("make_regress_date") or res["machine"]["date"]
    res["machine"]["native_date"] = res["native"]["date"]
    path.write_text(json.dumps(res, indent=1) + "\n")
    (ROOT / doc).write_text(markdown(res))
    print(json.dumps(res["native"], indent=1))
    return 0


def _make_test_s(out):
    test_file = out / "make_test_s.txt"
    return float(test_file.read_text()) if test_file.exists() else None


def update_make_test(out, doc):
    """Only the `make test` figure: the last make test's wall time into the existing results.json and
    BENCHMARKS.md (every other figure as measured by the last full run)."""
    path = out / "results.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `make bench` first")
    res = json.loads(path.read_text())
    res["make_test_s"] = _make_test_s(out)
    path.write_text(json.dumps(res, indent=1) + "\n")
    (ROOT / doc).write_text(markdown(res))
    print(f"make_test_s = {res['make_test_s']}; rewrote {path} and {doc}")
    return 0


def update_dcoh(out, doc, dcoh_file):
    """Only the DCOH cycle counts: bench.dcoh_bench measured again, written to ``dcoh_file`` and into
    the existing results.json and ``doc`` (every other figure as measured by the last full run; the
    document says when the DCOH's were measured)."""
    path = out / "results.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `make bench` first")
    from bench import dcoh_bench
    res = json.loads(path.read_text())
    dcoh = dcoh_bench.measure()
    dcoh_file.write_text(json.dumps(dcoh, indent=1) + "\n")
    res.update(dcoh=dcoh, snoop_per_cycle=dcoh["snoop_miss_per_cycle"],
               snoop_miss_latency_cycles=dcoh["snoop_miss_latency"])
    res["machine"]["dcoh_date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path.write_text(json.dumps(res, indent=1) + "\n")
    (ROOT / doc).write_text(markdown(res))
    print(json.dumps(dcoh, indent=1))
    print(f"rewrote {path}, {dcoh_file} and {doc}")
    return 0


def update_link(out, doc, budget):
    """Only the link rows: bench.link_bench measured again (as ``make bench`` runs it) into the existing
    results.json and ``doc`` (every other figure as measured by the last full run; the document says when
    the link rows were measured)."""
    path = out / "results.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `make bench` first")
    res = json.loads(path.read_text())
    link = link_figures(budget)
    res.update(link=link, link_efficiency={w: {"measured": round(e["efficiency"], 4), "optimum": round(e["optimum"], 4)}
                                           for w, e in link["efficiency"].items()})
    res["machine"]["link_date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    path.write_text(json.dumps(res, indent=1) + "\n")
    (ROOT / doc).write_text(markdown(res))
    print(json.dumps(res["link_efficiency"], indent=1))
    print(f"rewrote {path} and {doc}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--link-budget", type=float, default=120.0, help="seconds for the link BER runs")
    ap.add_argument("--verilator-budget", type=float, default=120.0, help="seconds for the Verilator BER runs")
    ap.add_argument("--system-transactions", type=int, default=200,
                    help="transactions per cocotb system run (0: skip; a 4-device Verilator build takes ~7 min)")
    ap.add_argument("--scaling-sim", default="icarus", choices=("icarus", "verilator"),
                    help="simulator of the 1..16-device scaling (verilator: ~45 min more of builds)")
    ap.add_argument("--scaling", default="1,2,4,8,16", help="device counts of the scaling")
    ap.add_argument("--sf-sizes", default="16,64,256", help="snoop-filter sets (x 2 ways, 2 devices, Icarus)")
    ap.add_argument("--sf-transactions", type=int, default=SF_TRANSACTIONS,
                    help="transactions per snoop-filter-size run")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--update-docs", action="store_true",
                    help="write the committed BENCHMARKS.md and bench/dcoh_cycles.json (make bench UPDATE_DOCS=1); "
                         "without it both go to --out and the checkout stays clean")
    ap.add_argument("--doc", default=None, help="where the benchmark document goes (default: see --update-docs)")
    ap.add_argument("--update-make-test", action="store_true",
                    help="measure nothing: put the last `make test` wall time into the existing results")
    ap.add_argument("--update-dcoh", action="store_true",
                    help="measure only the DCOH cycle counts (bench.dcoh_bench, ~2 min) into the existing results")
    ap.add_argument("--update-link", action="store_true",
                    help="measure only the link rows (bench.link_bench with --link-budget, ~10 min) into the "
                         "existing results")
    ap.add_argument("--update-native", action="store_true",
                    help="measure only make sim's testbench (a fresh build, a run beside its ceiling, make sim from "
                         "an empty build/sim; ~5 min) into the existing results")
    ap.add_argument("--with-regress", action="store_true",
                    help="with the native figures (make bench or --update-native): time make regress as well")
    args = ap.parse_args(argv)
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.doc is None:
        args.doc = "BENCHMARKS.md" if args.update_docs else str(out / "BENCHMARKS.md")
    if args.update_make_test:
        return update_make_test(out, args.doc)
    if args.update_native:
        return update_native(out, args.doc, args.with_regress)
    if args.update_link:
        return update_link(out, args.doc, args.link_budget)
    if args.update_dcoh:
        from bench import dcoh_bench
        return update_dcoh(out, args.doc, dcoh_bench.RESULTS if args.update_docs else out / dcoh_bench.RESULTS.name)
    from bench import dcoh_bench
    print("[bench] golden model speed", flush=True)
    model = model_speed()
    model_compiled = model_speed(build="cython")
    print("[bench] DCOH cycle counts (RTL)", flush=True)
    dcoh = dcoh_bench.measure()
    (dcoh_bench.RESULTS if args.update_docs else out / dcoh_bench.RESULTS.name).write_text(
        json.dumps(dcoh, indent=1) + "\n")
    print("[bench] link figures (RTL loopback)", flush=True)
    link = link_figures(args.link_budget)
    print("[bench] link in Verilator: batch BER runs and raw speed", flush=True)
    lv = link_verilator(args.verilator_budget)
    print("[bench] amaranth.sim speed (device + link)", flush=True)
    am = amaranth_speed()
    sysr = None
    if args.system_transactions:
        from bench import system_speed
        print("[bench] cocotb system testbench speed (Icarus, Verilator, scaling)", flush=True)
        ints = system_speed.parse_ints
        sysr = system_speed.measure(args.system_transactions, ints(args.scaling), args.scaling_sim,
                                    sf_sizes=ints(args.sf_sizes), sf_sim="icarus", sf_devices=2, sf_ways=2,
                                    sf_transactions=args.sf_transactions)
        (out / "system_speed.json").write_text(json.dumps(sysr, indent=1) + "\n")
    native = measure_native(args.with_regress) if args.system_transactions else None
    make_test_s = _make_test_s(out)
    res = {
        "machine": {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "command": "make bench"},
        "sim_cycles_per_s": {"amaranth": am["cycles_per_s"],
                             "icarus": _system(sysr, "icarus"), "verilator": _system(sysr, "verilator"),
                             "batch": round(lv["batch"]["cycles_per_s_min"]),
                             "raw_verilator": round(lv["raw_verilator"]["cycles_per_s"])},
        "sim_notes": {"icarus": SYSTEM_NOTE if sysr else NOT_YET, "verilator": SYSTEM_NOTE if sysr else NOT_YET,
                      "batch": "link loopback + RTL traffic checker in Verilator (bench/link_verilator.py)",
                      "raw_verilator": "bare link loopback in Verilator, no checking",
                      "amaranth": "device + both link ends under the model co-simulation"},
        "model_msgs_per_s": model["msgs_per_s"],
        "model_compiled_msgs_per_s": model_compiled["msgs_per_s"] if model_compiled else None,
        "model_compiled": model_compiled,
        "snoop_per_cycle": dcoh["snoop_miss_per_cycle"],
        "snoop_miss_latency_cycles": dcoh["snoop_miss_latency"],
        "link_efficiency": {w: {"measured": round(e["efficiency"], 4), "optimum": round(e["optimum"], 4)}
                            for w, e in link["efficiency"].items()},
        "make_test_s": make_test_s,
        "model": model, "dcoh": dcoh, "link": link, "amaranth": am, "link_verilator": lv, "system_speed": sysr,
        "native": native,
    }
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (ROOT / args.doc).write_text(markdown(res))
    print(json.dumps({k: res[k] for k in ("sim_cycles_per_s", "model_msgs_per_s", "snoop_per_cycle",
                                          "snoop_miss_latency_cycles", "link_efficiency", "make_test_s")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
