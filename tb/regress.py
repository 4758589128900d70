"""A regression's seeds as Dask tasks: submitted to a cluster, followed while they run, merged into one summary.

``python -m tb.run_system --seeds K`` (``make regress``) runs the RTL system this way (``run_rtl``), and

    python -m tb.regress [--seeds 8] [--seed 1] [--transactions 2000] [--devices 4] [--workers N]
                         [--scheduler tcp://host:8786] [--sweep sf_sets=16,64,256 --sweep credits=2,8]
                         [--out build/regress_model/summary.json]

runs the golden model (models/system.py) the same way: a seed job that costs seconds, not a simulator
build, to check and measure this layer (tests/test_regress.py; docs/testbench.md "Regression on Dask").
With ``--sweep``, every seed runs at every point of a grid of golden-model parameters, all points'
tasks submitted together (``run_sweep_and_write``): one total per point.

Where the tasks run (``dask_client``).  With ``--scheduler ADDRESS`` or ``DASK_SCHEDULER=ADDRESS`` in the
environment: on that scheduler's workers, started by hand (``dask scheduler``, ``dask worker``) or by
dask-jobqueue on SLURM, PBS or LSF.  The address is asked for its identity before anything else is done,
and no answer within ``connect_timeout`` seconds is an error naming it (``SchedulerUnreachable``), not a
wait.  Otherwise: an embedded LocalCluster, one worker process per core (``--workers``/``--jobs``), one
thread each, since a seed is single-threaded Python (plus, for the RTL, its simulator subprocess).

A seed job is a picklable callable ``job(seed) -> (summary, junit_xml or None)`` with
``job.reproduce(seed)``, the one-machine command that reruns that seed, and ``job.describe()``, the
engine keys of the total summary.  ``RtlSeed`` runs a simulator built once beforehand, in a folder every
worker reaches by the same path; ``ModelSeed`` runs the golden model.

Faults.  A seed's own failure (a mismatch, an exception in the job) is a failed seed with its error.  A
worker that dies (killed, out of memory, node lost) has its seeds rescheduled by the Dask scheduler
elsewhere; a seed's result is taken once, when its task first finishes (results are keyed by seed), and
the scheduler's records say which seeds ran more than once (``retried_seeds``): the number of workers
that died while the task was assigned to them (``TaskState.suspicious``) and the starts in its
transition story (``_task_records`` runs on the scheduler, which therefore needs this checkout too).  A
seed whose simulation kills its worker every time ends, after Dask's
``distributed.scheduler.allowed-failures`` deaths, in ``KilledWorker``: a failed seed that says so.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

from models.coverage import closure_report
from models.latency import latency_entry, merge_counts

__all__ = ["SchedulerUnreachable", "scheduler_address", "dask_client", "ModelSeed", "RtlSeed", "regress",
           "run_tasks", "merge", "write_junit", "run_and_write", "run_sweep_and_write", "parse_sweep", "run_rtl",
           "main"]

CONNECT_TIMEOUT_S = 10      # a scheduler that does not answer its identity in this time is unreachable
STALL_REPORT_S = 30         # with nothing finished for this long, say what is running (and if no worker is)


class SchedulerUnreachable(RuntimeError):
    pass


def scheduler_address(explicit=None):
    """The scheduler to use: ``explicit`` (``--scheduler``), else ``DASK_SCHEDULER``, else None (local)."""
    return explicit or os.environ.get("DASK_SCHEDULER") or None


def _scheduler_identity(address, timeout):
    """The scheduler's ``identity()``; any failure to get it within ``timeout`` s is ``SchedulerUnreachable``.

    Asked on a bare RPC before a Client is made: a Client that fails to connect waits twice as long
    again in its own clean-up."""
    from distributed.core import rpc

    async def ask():
        r = rpc(address, timeout=timeout)
        try:
            return await asyncio.wait_for(r.identity(), timeout)
        finally:
            await r.close_rpc()
    try:
        ident = asyncio.run(ask())
    except (asyncio.TimeoutError, TimeoutError):
        raise SchedulerUnreachable(f"Dask scheduler {address}: no answer within {timeout} s") from None
    except Exception as e:          # refused, bad address, something else answering: all "not reachable"
        raise SchedulerUnreachable(f"Dask scheduler {address} cannot be reached: {type(e).__name__}: {e}") \
            from None
    if not isinstance(ident, dict) or ident.get("type") != "Scheduler":
        kind = ident.get("type") if isinstance(ident, dict) else type(ident).__name__
        raise SchedulerUnreachable(f"{address} answers as a Dask {kind}, not a scheduler")
    return ident


@contextmanager
def dask_client(scheduler=None, workers=None, connect_timeout=None, allowed_failures=None):
    """Yields ``(client, label)``: a Client of the scheduler at ``scheduler`` (label: its address), or of
    a LocalCluster of ``workers`` processes (default: the number of cores; label "local").
    ``connect_timeout``: seconds for the scheduler to answer (default ``CONNECT_TIMEOUT_S``).

    ``allowed_failures`` (LocalCluster only; a running scheduler has its own configuration): how many
    worker deaths a task survives before it fails with KilledWorker (Dask's default: 3).  The
    LocalCluster's scheduler hands a worker only as many queued tasks as it has threads
    (worker-saturation 1.0; Dask queues a task group larger than twice the threads), so a worker that
    dies takes only the seeds it was running with it."""
    import dask
    from distributed import Client, LocalCluster
    cluster = None
    connect_timeout = CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
    if scheduler:
        _scheduler_identity(scheduler, connect_timeout)
        try:
            client = Client(scheduler, timeout=connect_timeout, set_as_default=False)
        except Exception as e:               # it answered a moment ago: gone again, or refuses clients
            raise SchedulerUnreachable(f"Dask scheduler {scheduler}: no client connection: "
                                       f"{type(e).__name__}: {e}") from None
        label = scheduler
    else:
        if workers is not None and workers < 1:
            raise ValueError(f"a LocalCluster of {workers} workers: at least 1 is needed")
        cfg = {"distributed.scheduler.worker-saturation": 1.0}
        if allowed_failures is not None:
            cfg["distributed.scheduler.allowed-failures"] = allowed_failures
        with dask.config.set(cfg):
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                                   processes=True, dashboard_address=None)
        client = Client(cluster, set_as_default=False)
        label = "local"
    try:
        yield client, label
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ---------------------------------------------------------------- seed jobs

# Golden-model parameters a sweep may vary: those ``python -m models.system`` takes as options, so that
# every point's seeds have a one-machine reproduce command.
SWEEPABLE = ("caches", "sf_sets", "sf_ways", "credits", "max_outstanding")


@dataclass(frozen=True)
class ModelSeed:
    """One seed of the golden-model system (models.system.run): the cheap seed job.  ``overrides``:
    ((name, value), ...) of ``SWEEPABLE`` Config fields (a sweep point); checked when the job is made."""
    devices: int = 4
    transactions: int = 2000
    overrides: tuple = ()

    def __post_init__(self):
        bad = [name for name, _ in self.overrides if name not in SWEEPABLE]
        if bad:
            raise ValueError(f"cannot sweep {bad}: the golden-model parameters a sweep may vary are {SWEEPABLE}")
        self.config()                        # a ConfigError names the parameter out of range

    def config(self):
        from models.config import Config
        return Config(devices=self.devices, **dict(self.overrides))

    def __call__(self, seed):
        from models.system import run
        try:
            return run(self.config(), self.transactions, seed), None
        except AssertionError as e:          # an invariant or the forward-progress watchdog
            return {"engine": "model", "seed": seed, "violations": 1, "error": str(e)}, None

    def label(self):
        return " ".join(f"{name}={value}" for name, value in self.overrides)

    def reproduce(self, seed):
        options = "".join(f" --{name.replace('_', '-')} {value}" for name, value in self.overrides)
        return (f"python -m models.system --devices {self.devices}{options} --transactions {self.transactions} "
                f"--seed {seed}")

    def describe(self):
        return {"engine": "model", "simulator": None, "devices": self.devices, "config": dict(self.overrides)}


@dataclass(frozen=True)
class RtlSeed:
    """One seed of the system testbench (tb.run_system.run) on a simulator built beforehand: the batched one
    (``batch`` > 0: ``runner`` is the native build, tb.run_system.NativeBuild) or the per-cycle cocotb one.

    ``runner`` (the native build, or the cocotb runner that built the simulator, pickled to the workers with
    its settings) and ``build_dir`` are used by path, so every worker needs the same venv path and the
    build folder on a shared file system.  The seed's summary goes to a worker-local temporary file and
    comes back in the task's result, with the JUnit XML."""
    runner: object
    build_dir: Path
    params: Path
    sim: str
    devices: int
    transactions: int
    think: int = 8
    flit_monitor: bool = True
    testcase: str = None
    trace: str = None
    ber: float = 0.0                         # built into the simulator already; for the reproduce command
    host: str = ""                           # the golden host's Config overrides (tb.run_system --host)
    batch: int = 0                           # K of the batched testbench; 0: the per-cycle one
    dcoh: str = ""                           # the RTL DCOH's parameters (tb.run_system --dcoh): built already
    cache_stall: int = 0                     # slow RTL caches (tb.run_system --cache-stall): built already
    pipelined_dcoh: bool = False             # the pipelined DCOH (tb.run_system --pipelined-dcoh): built already

    def __call__(self, seed):
        from tb.run_system import run
        with tempfile.TemporaryDirectory(prefix=f"seed{seed}_") as tmp:
            s = run(self.runner, self.build_dir, self.params, seed, self.transactions, Path(tmp) / "summary.json",
                    self.think, self.flit_monitor, False, self.testcase, self.trace, host=self.host,
                    batch=self.batch)
        s["simulator"] = s.get("simulator") or self.sim
        results = self.build_dir / f"results_{seed}.xml"
        return s, (results.read_text() if results.exists() else None)

    def label(self):
        return ""

    def reproduce(self, seed):
        """The one-machine run of this seed with every setting of the regression (``make sim`` has only
        some of them)."""
        from tb.run_system import default_batch
        batch = self.batch != default_batch(self.sim, self.ber, self.trace, False, self.testcase)
        options = "".join([f" --think {self.think}" if self.think != 8 else "",
                           f" --batch {self.batch}" if batch else "",
                           f" --ber {self.ber:g}" if self.ber else "",
                           " --no-flit-monitor" if not self.flit_monitor and not self.ber else "",
                           f" --testcase {self.testcase}" if self.testcase else "",
                           f" --trace {self.trace}" if self.trace else "",
                           f" --host {self.host}" if self.host else "",
                           f" --dcoh {self.dcoh}" if self.dcoh else "",
                           f" --cache-stall {self.cache_stall}" if self.cache_stall else "",
                           " --pipelined-dcoh" if self.pipelined_dcoh else ""])
        return (f"python -m tb.run_system --sim {self.sim} --devices {self.devices} --transactions "
                f"{self.transactions} --seed {seed}{options}")

    def describe(self):
        return {"engine": "rtl", "simulator": self.sim, "devices": self.devices}


def _run_seed(job, seed):
    """The task: the job on one seed, never raising (an exception is the seed's failure), plus where it ran."""
    t0 = time.perf_counter()
    try:
        summary, junit = job(seed)
    except Exception as e:
        summary, junit = {"seed": seed, "violations": 1,
                          "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}, None
    try:
        from distributed import get_worker
        worker = get_worker().address
    except ValueError:                       # not in a worker (a direct call)
        worker = None
    return {"summary": summary, "junit": junit, "worker": worker, "host": socket.gethostname(),
            "task_s": round(time.perf_counter() - t0, 3)}


def _task_records(keys, dask_scheduler=None):
    """On the scheduler: per key, the workers that died running it and the times it was started."""
    out = {}
    for k in keys:
        ts = dask_scheduler.tasks.get(k)
        starts = sum(1 for t in dask_scheduler.story(k) if t.key == k and t.finish == "processing")
        out[k] = {"died": ts.suspicious if ts is not None else 0, "starts": starts}
    return out


# ---------------------------------------------------------------- running and merging

def regress(client, job, seeds, progress=print, on_result=None):
    """Runs ``job`` on every seed as Dask tasks of ``client``; returns the per-seed rows, in seed order.

    Row: ``seed``, ``point`` (``job.label()``), ``ok``, ``summary`` (the seed's own summary), ``junit``,
    ``worker``, ``host``, ``task_s``, ``attempts`` (1 + reruns), ``retried``, ``reproduce``, and
    ``error`` for a failure.  ``progress`` gets one line per finished seed (tasks done/total, failures
    so far) and a line when nothing has finished for a while.  ``on_result(row, done, total)`` is
    called after each seed (tests use it to kill a worker part-way)."""
    return run_tasks(client, [(job, seed) for seed in seeds], progress, on_result)


def run_tasks(client, tasks, progress=print, on_result=None):
    """``regress`` for any list of (job, seed) tasks (a sweep: several jobs); rows in the tasks' order."""
    from distributed import as_completed
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker
    tasks = list(tasks)
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"each (job, seed) once: {[(j.label(), s) for j, s in tasks]}")
    # Keys of this run only (a scheduler may serve other clients), all in one task group ("regress") and
    # submitted in one call: a group larger than twice the cluster's threads is queued on the scheduler
    # and handed out as threads free up, so a worker that dies holds only the seeds it was running.
    # (Submitted one by one, the first seeds would go out before the group is that large.)
    run_id = uuid.uuid4().hex[:8]
    submitted = client.map(_run_seed, [j for j, _ in tasks], [s for _, s in tasks],
                           key=[f"regress-{run_id}-{i}" for i in range(len(tasks))], pure=False)
    futures = dict(zip(submitted, range(len(tasks))))
    seeds = list(range(len(tasks)))          # row indices; each task's seed is in its row
    finished = as_completed(futures, loop=client.loop)   # each future once: finished, erred or cancelled
    rows, failures = {}, 0
    last_done = last_report = time.monotonic()
    while not finished.is_empty():
        if not finished.has_ready():
            time.sleep(0.2)
            now = time.monotonic()
            if now - max(last_done, last_report) >= STALL_REPORT_S:
                last_report = now
                workers = client.scheduler_info(n_workers=-1).get("workers", {})
                left = [_name(*tasks[i]) for i in sorted(set(seeds) - set(rows))]
                progress(f"[{len(rows)}/{len(seeds)}] nothing finished for {now - last_done:.0f} s; "
                         + (f"{len(workers)} worker(s)" if workers else "NO WORKER connected: waiting for one")
                         + f"; not finished: {', '.join(left[:10])}{' ...' if len(left) > 10 else ''}")
            continue
        done = finished.next_batch(block=False)
        last_done = time.monotonic()
        records = client.run_on_scheduler(_task_records, [f.key for f in done])
        for fut in sorted(done, key=lambda f: futures[f]):
            index = futures[fut]
            assert index not in rows, f"{_name(*tasks[index])} finished twice"
            job, seed = tasks[index]
            rec = records.get(fut.key, {"died": 0, "starts": 1})
            attempts = max(rec["died"] + 1, rec["starts"], 1)
            row = {"seed": seed, "point": job.label(), "reproduce": job.reproduce(seed), "attempts": attempts}
            try:
                res = fut.result()
                s = res["summary"]
                row.update(summary=s, junit=res["junit"], worker=res["worker"], host=res["host"],
                           task_s=res["task_s"], ok=not s.get("violations"))
                if not row["ok"]:
                    row["error"] = s.get("error") or "violations in the summary"
            except KilledWorker as e:
                row.update(summary={"seed": seed, "violations": 1}, junit=None, worker=None, host=None, ok=False,
                           attempts=max(rec["died"], rec["starts"], 1),     # each start ended in a death
                           error=f"the seed's worker process died {rec['died']} time(s) while running it "
                                 f"(Dask allowed-failures reached: the simulation crashes its process): {e}")
            except FutureCancelledError as e:
                row.update(summary={"seed": seed, "violations": 1}, junit=None, worker=None, host=None, ok=False,
                           error=f"the task was cancelled (scheduler restarted or client disconnected): {e}")
            except Exception as e:           # the task itself failed outside the seed job (e.g. unpickling)
                row.update(summary={"seed": seed, "violations": 1}, junit=None, worker=None, host=None, ok=False,
                           error=f"the task failed outside the seed job: {type(e).__name__}: {e}")
            row["retried"] = row["attempts"] > 1
            fut.release()                    # its result is here now: never recompute it
            rows[index] = row
            failures += not row["ok"]
            n = len(rows)
            name = _name(job, seed)
            if row["ok"]:
                s = row["summary"]
                progress(f"[{n}/{len(seeds)}] {name}: ok, {s.get('transactions')} transactions, "
                         f"{s.get('cycles')} cycles, {row['task_s']} s on {row['worker']}"
                         + (f" (attempt {row['attempts']})" if row["retried"] else "")
                         + f"; failures so far: {failures}")
            else:
                progress(f"[{n}/{len(seeds)}] {name}: FAIL: {row['error']}\n  reproduce: {row['reproduce']}"
                         f"\n  failures so far: {failures}")
            if on_result is not None:
                on_result(row, n, len(seeds))
    return [rows[i] for i in seeds]


def _name(job, seed):
    """How progress lines and JUnit suites name a task: "seed 7", or "sf_sets=16 credits=2 seed 7"."""
    return f"{job.label()} seed {seed}".strip()


def _add_counters(into, more):
    """Union of nested counter dicts: numbers add, dicts merge key by key."""
    for k, v in more.items():
        if isinstance(v, dict):
            _add_counters(into.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            into[k] = into.get(k, 0) + v
    return into


def _sorted(d):
    return {k: _sorted(v) if isinstance(v, dict) else v for k, v in sorted(d.items())}


def merge(rows, describe, dask_info, elapsed_s):
    """The total summary of a regression from its rows.  The keys of the fork-pool regression it replaced
    (``seeds``, ``first_seed``, ``failures``, ``failed_seeds``, ``transactions``, ``cycles``, ``wall_s``,
    ``sim_cycles_per_s``, ``jobs``, ``elapsed_s``; totals over the passing seeds), and: ``dask``
    {scheduler, workers}, ``retried_seeds``, ``failed`` (seed, error, reproduce), ``per_seed`` rows,
    ``coverage`` (the union of the seeds' coverage counters), ``latency_cycles`` (per opcode, the
    percentiles and histogram of every seed's requests together: models/latency.py) and
    ``transactions_per_s`` (passing seeds' transactions over the elapsed wall time)."""
    ok = [r for r in rows if r["ok"]]
    tx = sum(r["summary"].get("transactions") or 0 for r in ok)
    cycles = sum(r["summary"].get("cycles") or 0 for r in ok)
    wall = sum(r["summary"].get("wall_s") or 0 for r in ok)
    coverage, by_op = {}, {}
    for r in ok:
        # the counters add; a closure (hit/total/holes) does not: it is worked out again from the union below
        _add_counters(coverage, {k: v for k, v in (r["summary"].get("coverage") or {}).items() if k != "closure"})
        for op, v in (r["summary"].get("latency_cycles") or {}).items():
            merge_counts(by_op.setdefault(op, {}), v.get("by_cycles") or {})
    if "state_event" in coverage:
        closure = closure_report(coverage["state_event"], coverage.get("flits") or {})
        coverage["closure"] = closure if "flits" in coverage else {"state_event": closure["state_event"]}
    failed = [r for r in rows if not r["ok"]]
    return {
        **describe,
        "seeds": len(rows),
        "first_seed": min((r["seed"] for r in rows), default=None),
        "failures": len(failed),
        "transactions": tx,
        "cycles": cycles,
        "wall_s": round(wall, 1),
        "sim_cycles_per_s": round(cycles / wall) if wall else None,
        "jobs": min(dask_info["workers"], len(rows)),
        "elapsed_s": round(elapsed_s, 1) if elapsed_s is not None else None,
        "transactions_per_s": round(tx / elapsed_s, 1) if elapsed_s else None,
        "failed_seeds": [r["seed"] for r in failed],
        "failed": [{"seed": r["seed"], "error": r["error"], "reproduce": r["reproduce"]} for r in failed],
        "retried_seeds": [r["seed"] for r in rows if r["retried"]],
        "dask": dict(dask_info),
        "coverage": _sorted(coverage),
        "latency_cycles": {op: latency_entry(c) for op, c in sorted(by_op.items())},
        "per_seed": [{"seed": r["seed"], "ok": r["ok"], "transactions": r["summary"].get("transactions"),
                      "cycles": r["summary"].get("cycles"), "wall_s": r["summary"].get("wall_s"),
                      "task_s": r.get("task_s"), "worker": r["worker"], "host": r["host"], "attempts": r["attempts"],
                      **({"error": r["error"], "reproduce": r["reproduce"]} if not r["ok"] else {})}
                     for r in rows],
    }


def _seed_junit(row, classname):
    """One seed's JUnit tree: cocotb's own XML (its test suite renamed after the seed), or, for a seed
    without one (the golden model, a crashed worker), one test case made from the row."""
    name = f"{row.get('point', '')} seed {row['seed']}".strip()
    if row.get("junit"):
        tree = ET.ElementTree(ET.fromstring(row["junit"]))
        suites = list(tree.iter("testsuite"))
        for ts in suites:
            ts.set("name", name)
        failed_inside = any(tc.find("failure") is not None or tc.find("error") is not None
                            for tc in tree.iter("testcase"))
        if suites and (row["ok"] or failed_inside):
            return tree
    root = ET.Element("testsuites", name="results")
    suite = ET.SubElement(root, "testsuite", name=name, tests="1", failures=str(int(not row["ok"])))
    case = ET.SubElement(suite, "testcase", classname=classname, name=f"seed_{row['seed']}",
                         time=str(row.get("task_s", 0)))
    if not row["ok"]:
        failure = ET.SubElement(case, "failure", message=row["error"].splitlines()[0][:500])
        failure.text = f"{row['error']}\nreproduce: {row['reproduce']}"
    return ET.ElementTree(root)


def write_junit(rows, path, classname):
    """Every seed's JUnit XML combined into ``path`` by cocotb's ``cocotb_tools.combine_results``."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="junit_") as tmp:
        for i, r in enumerate(rows):             # by row: a sweep runs each seed once per point
            _seed_junit(r, classname).write(Path(tmp) / f"results_{i}.xml", encoding="UTF-8")
        # combine_results exits 1 when a test case failed: that is what the summary says too, not an error.
        proc = subprocess.run([sys.executable, "-m", "cocotb_tools.combine_results", tmp,
                               "--input-filename", r"results_\d+\.xml", "--output-file", str(path),
                               "--output-testsuites-name", "regress"], capture_output=True, text=True)
    if not path.exists():
        raise RuntimeError(f"cocotb_tools.combine_results wrote no {path}: {proc.stdout}{proc.stderr}")
    return path


def run_and_write(client, label, job, seeds, out, progress=print, on_result=None):
    """``regress`` + ``merge``, one JSON per seed beside ``out`` (``<stem>_seed<N>.json``), the combined
    JUnit (``<stem>_junit.xml``) and the total in ``out``; returns the total."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
    progress(f"dask: {len(seeds)} seeds on {label} ({workers} worker(s))")
    t0 = time.perf_counter()
    rows = regress(client, job, seeds, progress, on_result)
    elapsed = time.perf_counter() - t0
    for r in rows:
        out.with_name(f"{out.stem}_seed{r['seed']}.json").write_text(json.dumps(r["summary"], indent=2))
    total = merge(rows, job.describe(), {"scheduler": label, "workers": workers}, elapsed)
    total["junit"] = str(write_junit(rows, out.with_name(f"{out.stem}_junit.xml"), total["engine"]))
    out.write_text(json.dumps(total, indent=2))
    progress(f"{total['seeds']} seeds: {total['failures']} failure(s)"
             + (f" (seeds {total['failed_seeds']})" if total["failed_seeds"] else "") + ", "
             f"{total['transactions']} transactions, {total['cycles']} cycles in {elapsed:.0f} s "
             f"({total['transactions_per_s']} transactions/s; {workers} worker(s) on {label}); "
             f"retried: {total['retried_seeds'] or 'none'}; wrote {out}")
    return total


def run_sweep_and_write(client, label, jobs, seeds, out, progress=print):
    """A sweep: every job (one per point, e.g. ``ModelSeed`` with different ``overrides``) on every seed,
    submitted together.  ``out`` holds ``points`` (per point, ``merge`` of its seeds, with its
    ``config``; its ``elapsed_s`` is None, the points sharing the workers), the totals ``failures``,
    ``failed`` (point, seed, error, reproduce) and ``retried``, ``dask``, ``elapsed_s`` and ``junit``;
    beside it ``<stem>_p<point>_seed<N>.json`` per task.  Returns the total."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    seeds, jobs = list(seeds), list(jobs)
    workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
    progress(f"dask: {len(jobs)} points x {len(seeds)} seeds on {label} ({workers} worker(s))")
    t0 = time.perf_counter()
    rows = run_tasks(client, [(job, seed) for job in jobs for seed in seeds], progress)
    elapsed = time.perf_counter() - t0
    dask_info = {"scheduler": label, "workers": workers}
    points = []
    for p, job in enumerate(jobs):
        point_rows = rows[p * len(seeds):(p + 1) * len(seeds)]
        for r in point_rows:
            out.with_name(f"{out.stem}_p{p}_seed{r['seed']}.json").write_text(json.dumps(r["summary"], indent=2))
        points.append(merge(point_rows, job.describe(), dask_info, None))
    failed = [{"point": r["point"], "seed": r["seed"], "error": r["error"], "reproduce": r["reproduce"]}
              for r in rows if not r["ok"]]
    total = {"engine": jobs[0].describe()["engine"] if jobs else None, "points": points, "seeds": seeds,
             "failures": len(failed), "failed": failed,
             "retried": [{"point": r["point"], "seed": r["seed"]} for r in rows if r["retried"]],
             "dask": dask_info, "elapsed_s": round(elapsed, 1)}
    total["junit"] = str(write_junit(rows, out.with_name(f"{out.stem}_junit.xml"), total["engine"]))
    out.write_text(json.dumps(total, indent=2))
    for pt in points:
        progress(f"  {pt['config']}: {pt['transactions']} transactions, {pt['cycles']} cycles, "
                 f"{pt['failures']} failure(s); p99 " + ", ".join(f"{op} {v['p99']}"
                                                               for op, v in pt["latency_cycles"].items()))
    progress(f"{len(jobs)} points x {len(seeds)} seeds: {len(failed)} failure(s) in {elapsed:.0f} s; wrote {out}")
    return total


def parse_sweep(specs, devices, transactions):
    """``["sf_sets=16,64", "credits=2,8"]`` -> one ModelSeed per point of the product (2 x 2 here)."""
    import itertools
    axes = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        try:
            vals = [int(v) for v in values.split(",")] if sep and values else None
        except ValueError:
            vals = None
        if not vals:
            raise ValueError(f"--sweep {spec!r}: NAME=V1,V2,... with whole numbers, NAME one of {SWEEPABLE}")
        axes.append([(name, v) for v in vals])
    return [ModelSeed(devices, transactions, tuple(point)) for point in itertools.product(*axes)]


def run_rtl(args, build):
    """The multi-seed path of ``python -m tb.run_system``: connect (fails fast), build once, run, merge.
    ``args``: its parsed arguments; ``build``: tb.run_system.build."""
    address = scheduler_address(args.scheduler)
    if args.jobs is not None and args.jobs < 1:
        raise SystemExit(f"--jobs {args.jobs}: at least 1 worker is needed")
    if address and args.jobs:
        print(f"--jobs {args.jobs} ignored: the workers of {address} run the seeds", flush=True)
    with dask_client(address, args.jobs) as (client, label):
        t0 = time.perf_counter()
        batch = getattr(args, "batch", 0) or 0
        cache_stall = getattr(args, "cache_stall", 0)
        runner, build_dir, params = build(args.sim, args.devices, Path(args.build_root).resolve(), args.ber,
                                          dcoh=getattr(args, "dcoh_params", None), batched=batch > 0,
                                          cache_stall=cache_stall,
                                          pipelined_dcoh=getattr(args, "pipelined_dcoh", False))
        print(f"build: {time.perf_counter() - t0:.1f} s ({build_dir})", flush=True)
        job = RtlSeed(runner, build_dir, params, args.sim, args.devices, args.transactions, args.think,
                      not args.no_flit_monitor and args.ber == 0, args.testcase, args.trace, args.ber,
                      getattr(args, "host", ""), batch, getattr(args, "dcoh", ""), cache_stall,
                      getattr(args, "pipelined_dcoh", False))
        seeds = range(args.seed, args.seed + args.seeds)
        total = run_and_write(client, label, job, seeds, Path(args.out).resolve(),
                              progress=lambda line: print(line, flush=True))
    return 1 if total["failures"] else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="golden-model regression on Dask (the seed job of tb.regress's "
                                             "own checks and benchmark)")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1, help="first seed")
    ap.add_argument("--transactions", type=int, default=2000, help="per seed")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes (default: cores)")
    ap.add_argument("--scheduler", default=None, help="Dask scheduler address (default: $DASK_SCHEDULER, "
                                                      "else a LocalCluster)")
    ap.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2",
                    help=f"run every seed at each point of the product of these ({', '.join(SWEEPABLE)})")
    ap.add_argument("--out", default="build/regress_model/summary.json")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.transactions < 1 or (args.workers is not None and args.workers < 1):
        ap.error("--seeds, --transactions and --workers must be at least 1")
    from models.config import ConfigError
    try:
        jobs = parse_sweep(args.sweep, args.devices, args.transactions) if args.sweep else \
            [ModelSeed(args.devices, args.transactions)]
    except (ValueError, ConfigError) as e:       # checked before any cluster starts
        ap.error(str(e))
    seeds = range(args.seed, args.seed + args.seeds)
    progress = lambda line: print(line, flush=True)   # noqa: E731
    try:
        with dask_client(scheduler_address(args.scheduler), args.workers) as (client, label):
            if args.sweep:
                total = run_sweep_and_write(client, label, jobs, seeds, args.out, progress)
            else:
                total = run_and_write(client, label, jobs[0], seeds, args.out, progress)
    except SchedulerUnreachable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if total["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
