"""The optional compiled golden model (models/compiled.py): ``import models`` takes the compiled modules
only while they were built from the sources on disk, and never when asked for the pure-Python ones."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from models import compiled

ROOT = Path(__file__).resolve().parent.parent


def _fake_build(tmp_path):
    """A copy of the hot modules' sources and a build folder whose manifest matches them."""
    pkg = tmp_path / "src"
    pkg.mkdir()
    for m in compiled.HOT_MODULES:
        for suffix in (".py", ".pxd"):
            shutil.copy(compiled.PACKAGE / f"{m}{suffix}", pkg / f"{m}{suffix}")
    root = tmp_path / "build"
    d = compiled.build_dir(root)
    d.mkdir(parents=True)
    (d / compiled.MANIFEST).write_text(compiled.sources_digest(pkg) + "\n")
    return pkg, root, d


def test_a_build_of_the_current_sources_is_used(tmp_path):
    pkg, root, d = _fake_build(tmp_path)
    assert compiled.compiled_dir(pkg, root, environ={}) == d


def test_a_stale_or_missing_build_falls_back_to_python(tmp_path, capsys):
    pkg, root, d = _fake_build(tmp_path)
    with open(pkg / "host.py", "a") as f:
        f.write("\n# edited after the build\n")
    assert compiled.compiled_dir(pkg, root, environ={}) is None
    assert "other sources" in capsys.readouterr().err
    assert compiled.compiled_dir(pkg, tmp_path / "nothing-built", environ={}) is None


def test_an_edited_type_declaration_makes_the_build_stale(tmp_path):
    """The .pxd files type the compiled build: a build from other declarations is not used."""
    pkg, root, d = _fake_build(tmp_path)
    with open(pkg / "dcoh.pxd", "a") as f:
        f.write("\n# edited after the build\n")
    assert compiled.compiled_dir(pkg, root, environ={}) is None


def test_if_stale_leaves_a_matching_build_alone(tmp_path, monkeypatch):
    """``--if-stale`` (make sim, regress, model) builds nothing while a build matches the sources."""
    fake = _fake_build(tmp_path)
    monkeypatch.setattr(compiled, "compiled_dir", lambda root, environ: fake[2])
    monkeypatch.setattr(compiled, "build", lambda *a, **k: pytest.fail("built although the build matches"))
    assert compiled.main(["--if-stale", "--root", str(fake[1])]) == 0


def test_if_stale_falls_back_to_python_when_it_cannot_build(tmp_path, monkeypatch, capsys):
    """A machine that cannot compile the model (here: no Cython) gets a note, and the job goes on."""
    def no_cython(*a, **k):
        raise ModuleNotFoundError("No module named 'Cython'")
    monkeypatch.setattr(compiled, "build", no_cython)
    assert compiled.main(["--if-stale", "--root", str(tmp_path / "nothing-built")]) == 0
    err = capsys.readouterr().err
    assert "could not be built" in err and "No module named 'Cython'" in err and "pure-Python" in err


def test_the_environment_forces_python(tmp_path):
    pkg, root, _ = _fake_build(tmp_path)
    assert compiled.compiled_dir(pkg, root, environ={compiled.ENV: "python"}) is None


def test_forced_python_imports_the_sources():
    r = subprocess.run([sys.executable, "-c", "import models.compiled as c, models.system as s; "
                        "print(c.active(), s.__file__)"], cwd=ROOT, capture_output=True, text=True,
                       env={**__import__("os").environ, compiled.ENV: "python"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "python" and r.stdout.split()[1].endswith("system.py")


def instrumented_runs():
    """What the testbenches' instrumented subclasses see (tb/hypothesis_traces.py counts in subclasses of
    ``Device`` and ``Coalescer``; tb/system_tb.py's ``HostSendSpy`` is a ``Link`` that hands on what the
    host sends): a fixed random trace through ``run_trace``, and the host's sends a ``HostSendSpy``
    handed on.  The same in both builds, and not nothing, when the compiled callers call the overrides."""
    import hashlib
    import random
    from types import SimpleNamespace
    from models.config import Config
    from tb.hypothesis_traces import run_trace
    from tb.system_tb import HostSendSpy
    rng = random.Random(5)
    ops = [[rng.randrange(2), rng.randrange(2), rng.choice(("load", "store", "evict")), 0x80 + rng.randrange(6),
            i + 1, rng.randrange(2)] for i in range(300)]
    cfg = Config(devices=2, sf_sets=2, sf_ways=2, coalesce_window=16, coalesce_block=4)
    scores = run_trace(ops, cfg)
    scores.pop("coverage")
    from models.system import System, Workload, drive
    sysm = System(Config(), timed=True)
    handed = []
    side = SimpleNamespace(h2d_sent=lambda entry, release: handed.append((entry[1].chan.name, release)))
    bench = SimpleNamespace(devs=[side], cfg=sysm.cfg)
    sysm.replace_link(0, HostSendSpy(sysm.cfg, True, bench, 0))
    wl = Workload(sysm.cfg, random.Random(1))
    drive(sysm, lambda d, k: wl.next_op(k), lambda: 3, lambda done: done >= 200)
    return {**scores, "handed_on": len(handed), "handed": hashlib.sha256(repr(handed).encode()).hexdigest()}


def test_the_compiled_build_runs_the_same_model(tmp_path):
    """Build with Cython into a scratch folder and run the equivalence digests on it, and the testbenches'
    instrumented subclasses (:func:`instrumented_runs`) against the pure-Python model's (about 30 s:
    make sim, regress and model run this build, the rest of the suite the pure-Python modules)."""
    pytest.importorskip("Cython")
    out = compiled.build(tmp_path / "fast")
    code = ("import sys, json; sys.path.insert(0, 'tests'); import models; "
            f"models.__path__.insert(0, {str(out)!r}); import models.compiled as c; "
            "from model_trace import all_digests; from test_model_build import instrumented_runs; "
            "print(json.dumps([c.active(), all_digests(), instrumented_runs()]))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import json
    build, digests, overrides = json.loads(r.stdout.splitlines()[-1])
    assert build == "cython"
    assert digests == json.loads((ROOT / "tests" / "model_digests.json").read_text())
    pure = instrumented_runs()                    # this process runs the pure-Python model (conftest.py)
    assert pure["handed_on"] > 0 and pure["held"] + pure["stalled"] + pure["merged"] > 0, pure
    assert overrides == pure
