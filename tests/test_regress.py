"""Regressions on Dask (tb/regress.py): a LocalCluster regress, a `dask scheduler` with two `dask worker`
processes on 127.0.0.1 with one worker killed mid-run, an unreachable scheduler, a seed that crashes its
worker, and the latency merge (models/latency.py).  The seed job is the golden model (a few hundred
transactions, well under a second a seed), and one RTL regress of two short Icarus seeds checks the real
seed job.  Every wait is bounded (``deadline``) and every process started here is killed at the end."""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from models.coverage import closure, state_event_universe
from models.config import Config
from models.latency import histogram, latency_entry, merge_counts, percentile, percentile_of_counts
from models.system import run as model_run
from tb import regress
from tb.regress import ModelSeed, SchedulerUnreachable, dask_client, run_and_write

ROOT = Path(__file__).resolve().parent.parent
DASK = Path(sys.executable).parent / "dask"


@contextlib.contextmanager
def deadline(seconds, what):
    """Fails the test (instead of hanging it) if the block takes longer than ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"{what}: not done after {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _direct(devices, transactions, seed):
    s = model_run(Config(devices=devices), transactions, seed)
    return s["transactions"], s["cycles"]


@dataclass(frozen=True)
class HeldModelSeed(ModelSeed):
    """The golden-model seed, then ``hold_s`` asleep: a task long enough to kill its worker during it.
    With ``mark_dir``, the hold begins by writing ``<seed>.<pid>`` there (holding the wall time), so a test
    knows which seed a worker process is busy with and for how much longer."""
    hold_s: float = 0.0
    mark_dir: str = ""

    def __call__(self, seed):
        out = super().__call__(seed)
        if self.mark_dir:
            (Path(self.mark_dir) / f"{seed}.{os.getpid()}").write_text(repr(time.time()))
        time.sleep(self.hold_s)
        return out


@dataclass(frozen=True)
class CrashingModelSeed(ModelSeed):
    """The golden-model seed, except that seed ``crash`` ends its worker process (as a simulator that
    segfaults in-process would) and seed ``raises`` raises."""
    crash: int = -1
    raises: int = -1

    def __call__(self, seed):
        if seed == self.crash:
            os._exit(3)
        if seed == self.raises:
            raise ValueError(f"broken on purpose at seed {seed}")
        return super().__call__(seed)


# ---------------------------------------------------------------- latency merge

def test_latency_of_counts_matches_the_list_it_stands_for():
    rng = random.Random(22)
    for trial in range(200):
        values = [rng.choice([rng.randrange(5, 40), rng.randrange(5, 400)]) for _ in range(rng.randrange(1, 300))]
        counts = Counter(values)
        for p in (0, 1, 50, 90, 99, 100):
            assert percentile_of_counts(counts, p) == percentile(sorted(values), p), (trial, p)
        h = histogram(counts)
        assert sum(h["counts"]) == len(values) and len(h["edges"]) == len(h["counts"]) + 1 <= 17
        assert h["edges"][0] == min(values) and h["edges"][-1] > max(values) >= h["edges"][-2]
        for v in values[:20]:                     # each value falls in the bin whose edges enclose it
            i = next(i for i in range(len(h["counts"])) if h["edges"][i] <= v < h["edges"][i + 1])
            assert h["counts"][i] > 0


def test_merged_latency_is_that_of_all_requests_together():
    rng = random.Random(7)
    seeds = [[rng.randrange(10, 200) for _ in range(rng.randrange(1, 100))] for _ in range(5)]
    merged = {}
    for values in seeds:                          # through JSON, as per-seed summaries come back
        merge_counts(merged, json.loads(json.dumps(latency_entry(Counter(values))))["by_cycles"])
    everything = sorted(v for values in seeds for v in values)
    e = latency_entry(merged)
    assert e["count"] == len(everything)
    assert (e["p50"], e["p99"]) == (percentile(everything, 50), percentile(everything, 99))
    assert e["histogram"] == histogram(Counter(everything))


# ---------------------------------------------------------------- LocalCluster

def test_local_cluster_regress_merges_every_seed(tmp_path):
    job, seeds = ModelSeed(devices=2, transactions=300), range(5, 9)
    lines = []
    with deadline(180, "LocalCluster regress"), dask_client(workers=2) as (client, label):
        total = run_and_write(client, label, job, seeds, tmp_path / "summary.json", progress=lines.append)
    assert label == "local" and total["dask"] == {"scheduler": "local", "workers": 2}
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(total))
    # The keys of the fork-pool total, with the same meaning.
    assert (total["engine"], total["seeds"], total["first_seed"], total["failures"], total["failed_seeds"]) == \
        ("model", 4, 5, 0, [])
    direct = {s: _direct(2, 300, s) for s in seeds}
    assert total["transactions"] == sum(t for t, _ in direct.values())
    assert total["cycles"] == sum(c for _, c in direct.values())
    assert [(r["seed"], r["transactions"], r["cycles"]) for r in total["per_seed"]] == \
        [(s, *direct[s]) for s in seeds]
    assert total["retried_seeds"] == [] and all(r["attempts"] == 1 for r in total["per_seed"])
    # Coverage and latency: the union of the per-seed summaries written beside the total.
    per_seed = [json.loads((tmp_path / f"summary_seed{s}.json").read_text()) for s in seeds]
    pairs = Counter()
    for s in per_seed:
        pairs.update(s["coverage"]["state_event"])
    assert total["coverage"]["state_event"] == dict(sorted(pairs.items()))
    # the closure is that of the union, not a sum of the seeds' closures
    assert total["coverage"]["closure"]["state_event"] == closure(dict(pairs), state_event_universe())
    for op, entry in total["latency_cycles"].items():
        everything = sorted(int(c) for s in per_seed if op in s["latency_cycles"]
                            for c, n in s["latency_cycles"][op]["by_cycles"].items() for _ in range(n))
        assert (entry["count"], entry["p99"]) == (len(everything), percentile(everything, 99)), op
    # JUnit: one suite per seed, combined by cocotb_tools.combine_results.
    suites = ET.parse(total["junit"]).getroot().findall("testsuite")
    assert sorted(ts.get("name") for ts in suites) == [f"seed {s}" for s in seeds]
    assert not any(list(ts.iter("failure")) for ts in suites) and len(ET.parse(total["junit"]).getroot().findall("testsuite/testcase")) == 4
    # Progress: one line per seed with done/total and failures so far.
    assert sum("failures so far: 0" in line for line in lines) == 4 and any("[4/4]" in line for line in lines)


def test_a_seed_that_crashes_its_worker_is_that_seed_failing(tmp_path):
    job = CrashingModelSeed(devices=2, transactions=200, crash=3, raises=5)
    lines = []
    with deadline(180, "regress with a crashing seed"), \
            dask_client(workers=2, allowed_failures=1) as (client, label):
        total = run_and_write(client, label, job, range(1, 7), tmp_path / "summary.json", progress=lines.append)
    assert total["failed_seeds"] == [3, 5] and total["failures"] == 2, total["per_seed"]
    crashed, raised = total["failed"]
    assert "died 2 time(s)" in crashed["error"] and crashed["reproduce"] == job.reproduce(3)
    assert "--seed 3" in crashed["reproduce"]
    assert "ValueError: broken on purpose at seed 5" in raised["error"] and "--seed 5" in raised["reproduce"]
    assert any("seed 3: FAIL" in line for line in lines) and any(job.reproduce(3) in line for line in lines)
    by_seed = {r["seed"]: r for r in total["per_seed"]}
    assert by_seed[3]["attempts"] == 2 and by_seed[5]["attempts"] == 1, total["per_seed"]
    assert [s for s, r in by_seed.items() if r["ok"]] == [1, 2, 4, 6]
    assert total["transactions"] == sum(_direct(2, 200, s)[0] for s in (1, 2, 4, 6))
    suites = {ts.get("name"): ts for ts in ET.parse(total["junit"]).getroot()}
    assert all(suites[f"seed {s}"].find("testcase/failure") is not None for s in (3, 5))
    assert all(suites[f"seed {s}"].find("testcase/failure") is None for s in (1, 2, 4, 6))


# ---------------------------------------------------------------- unreachable scheduler

def test_unreachable_scheduler_is_a_clear_error_within_seconds():
    address = f"tcp://127.0.0.1:{_free_port()}"           # nothing listens there
    t0 = time.monotonic()
    with deadline(30, "connecting to nothing"), pytest.raises(SchedulerUnreachable) as e:
        with dask_client(address, connect_timeout=2):
            pass
    assert time.monotonic() - t0 < 10
    assert address in str(e.value)


def test_unreachable_scheduler_on_the_command_line(monkeypatch, capsys):
    address = f"tcp://127.0.0.1:{_free_port()}"
    monkeypatch.setattr(regress, "CONNECT_TIMEOUT_S", 2)
    with deadline(30, "python -m tb.regress on an unreachable scheduler"):
        assert regress.main(["--seeds", "2", "--scheduler", address]) == 2
    assert f"error: Dask scheduler {address}" in capsys.readouterr().err


def test_unreachable_scheduler_stops_run_system_before_the_build(monkeypatch, tmp_path):
    import tb.run_system as run_system
    address = f"tcp://127.0.0.1:{_free_port()}"
    built = []
    monkeypatch.setattr(run_system, "build", lambda *a, **k: built.append(a))
    monkeypatch.setattr(regress, "CONNECT_TIMEOUT_S", 2)
    monkeypatch.setenv("DASK_SCHEDULER", address)               # the environment names the scheduler
    with deadline(30, "run_system --seeds on an unreachable scheduler"), pytest.raises(SystemExit) as e:
        run_system.main(["--seeds", "2", "--out", str(tmp_path / "s.json")])
    assert address in str(e.value.code) and not built


# ---------------------------------------------------------------- dask scheduler + 2 dask workers

@contextlib.contextmanager
def _processes():
    procs = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)


def _start_cluster(procs, tmp_path):
    """`dask scheduler` and two `dask worker --no-nanny` (a killed worker stays dead) on 127.0.0.1."""
    # One task at a time per one-thread worker, as in dask_client's LocalCluster (docs/testbench.md).
    # This file on their path: the test-only jobs are pickled by reference to it (the scheduler unpickles
    # the task too).
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    sched_file = tmp_path / "scheduler.json"
    procs.append(subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(_free_port()),
                                   "--no-dashboard", "--scheduler-file", str(sched_file)], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=open(tmp_path / "scheduler.log", "w")))
    t0 = time.monotonic()
    while not sched_file.exists() or not sched_file.read_text().strip():
        assert procs[0].poll() is None, (tmp_path / "scheduler.log").read_text()
        assert time.monotonic() - t0 < 60, "dask scheduler did not start"
        time.sleep(0.2)
    address = json.loads(sched_file.read_text())["address"]
    workers = {}
    for name in ("w0", "w1"):
        workers[name] = subprocess.Popen(
            [str(DASK), "worker", address, "--name", name, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
             "--no-dashboard"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{name}.log", "w"))
        procs.append(workers[name])
    return address, workers


def test_dask_workers_one_killed_mid_run(tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    marks.mkdir()
    job, seeds = HeldModelSeed(devices=2, transactions=200, hold_s=1.5, mark_dir=str(marks)), list(range(1, 9))
    killed = {}

    def kill_one_mid_run(row, done, total):
        # Kill a worker process at most 0.5 s into a seed's 1.5 s hold, so that seed (and only it) is
        # certainly lost with it. The scheduler's view (client.processing()) cannot say this: it may still
        # list a seed whose result is on its way while the worker has begun the next one.
        if killed:
            return
        by_pid = {w.pid: name for name, w in workers.items()}
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            for mark in marks.iterdir():
                seed, pid = (int(x) for x in mark.name.split("."))
                if time.time() - float(mark.read_text() or 0) < 0.5 and pid in by_pid:
                    name = by_pid[pid]
                    address = next(a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()
                                   if w["name"] == name)
                    workers[name].kill()
                    killed.update(worker=name, address=address, seeds=[seed])
                    return
            time.sleep(0.02)

    with _processes() as procs, deadline(240, "regress on dask scheduler + workers"):
        address, workers = _start_cluster(procs, tmp_path)
        monkeypatch.setenv("DASK_SCHEDULER", address)
        with dask_client(regress.scheduler_address()) as (client, label):
            client.wait_for_workers(2, timeout=60)
            total = run_and_write(client, label, job, seeds, tmp_path / "summary.json",
                                  on_result=kill_one_mid_run, progress=lambda line: None)
            assert len(client.scheduler_info(n_workers=-1)["workers"]) == 1, "the killed worker came back?"
    assert killed and len(killed["seeds"]) == 1, killed
    assert total["dask"] == {"scheduler": address, "workers": 2}
    # Nothing lost, nothing counted twice: each seed once, with the transactions of a direct run.
    assert [r["seed"] for r in total["per_seed"]] == seeds and total["failures"] == 0
    assert total["transactions"] == sum(_direct(2, 200, s)[0] for s in seeds)
    # The seed that was running on the killed worker ran again on the other one, and is listed.
    assert total["retried_seeds"] == killed["seeds"], (killed, total["per_seed"])
    (row,) = [r for r in total["per_seed"] if r["seed"] == killed["seeds"][0]]
    assert row["attempts"] == 2 and row["worker"] != killed["address"]
    assert all(r["attempts"] == 1 for r in total["per_seed"] if r["seed"] not in killed["seeds"])


# ---------------------------------------------------------------- the RTL seed job

SEEDS = [11, 12]       # (see below: not a seed that tests/test_system_rtl.py runs in the same build folder)


def test_rtl_seed_job_on_a_local_cluster(tmp_path):
    """Two short Icarus seeds of the real seed job (the build is shared with tests/test_system_rtl.py).

    Its seeds are not tests/test_system_rtl.py's (3, ``SEED`` and ``BREAK_SEED`` there): a run leaves its
    JUnit file in the build folder as ``results_<seed>.xml``, and with the two files on two test workers a
    run of seed 3 there removed the file of seed 3 here before the seed job read it ("Results file ...
    results_3.xml not found", under load)."""
    from tb.run_system import build
    from tb.regress import RtlSeed
    with deadline(300, "RTL regress"):
        runner, build_dir, params = build("icarus", 2, ROOT / "build" / "sim")
        job = RtlSeed(runner, build_dir, params, "icarus", 2, 40, think=2)
        with dask_client(workers=2) as (client, label):
            total = run_and_write(client, label, job, SEEDS, tmp_path / "summary.json", progress=lambda line: None)
    assert (total["engine"], total["simulator"], total["failures"]) == ("rtl", "icarus", 0), total.get("failed")
    assert total["transactions"] >= 80 and total["coverage"]["flits"] and total["latency_cycles"]
    cases = ET.parse(total["junit"]).getroot().findall("testsuite/testcase")
    assert {c.get("name") for c in cases} >= {"system_random"} and len(cases) >= 2
    assert [r["seed"] for r in total["per_seed"]] == SEEDS
    # A failure would print this: the same seed on one machine, with the run's settings.
    assert job.reproduce(3) == "python -m tb.run_system --sim icarus --devices 2 --transactions 40 --seed 3 --think 2"
    job = RtlSeed(runner, build_dir, params, "icarus", 2, 40, think=2, dcoh="work=1,tracker=2")
    assert job.reproduce(3).endswith("--seed 3 --think 2 --dcoh work=1,tracker=2")


# ---------------------------------------------------------------- sweeps

def test_sweep_runs_every_seed_at_every_point(tmp_path):
    from models.system import main as model_main
    from tb.regress import parse_sweep, run_sweep_and_write
    jobs = parse_sweep(["sf_sets=16,256", "credits=2"], devices=2, transactions=200)
    assert [j.overrides for j in jobs] == [(("sf_sets", 16), ("credits", 2)), (("sf_sets", 256), ("credits", 2))]
    seeds = [1, 2, 3]
    with deadline(180, "LocalCluster sweep"), dask_client(workers=2) as (client, label):
        total = run_sweep_and_write(client, label, jobs, seeds, tmp_path / "sweep.json", progress=lambda line: None)
    assert total["failures"] == 0 and [p["config"] for p in total["points"]] == \
        [{"sf_sets": 16, "credits": 2}, {"sf_sets": 256, "credits": 2}]
    for point in total["points"]:
        cfg = Config(devices=2, **point["config"])
        direct = [model_run(cfg, 200, s) for s in seeds]
        assert [(r["seed"], r["cycles"]) for r in point["per_seed"]] == [(s, d["cycles"]) for s, d in zip(seeds, direct)]
        assert point["transactions"] == sum(d["transactions"] for d in direct)
    # A task's reproduce command reruns that point's seed on one machine, to the same cycle.
    row = json.loads((tmp_path / "sweep_p0_seed2.json").read_text())
    cmd = jobs[0].reproduce(2)
    assert model_main(cmd.split("-m models.system ")[1].split() + ["--out", str(tmp_path / "again.json")]) == 0
    assert json.loads((tmp_path / "again.json").read_text())["cycles"] == row["cycles"]
    suites = [ts.get("name") for ts in ET.parse(total["junit"]).getroot()]
    assert sorted(suites) == sorted(f"{j.label()} seed {s}" for j in jobs for s in seeds)


def test_sweep_names_a_bad_parameter():
    from models.config import ConfigError
    from tb.regress import parse_sweep
    with pytest.raises(ValueError, match="watchdog"):
        parse_sweep(["watchdog=5"], 2, 100)
    with pytest.raises(ConfigError, match="sf_sets"):
        parse_sweep(["sf_sets=24"], 2, 100)
    with pytest.raises(ValueError, match="NAME=V1,V2"):
        parse_sweep(["credits=two"], 2, 100)
