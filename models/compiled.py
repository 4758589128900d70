"""The optional compiled build of the golden model's hot modules (``make fast-model``).

:func:`build` (``make fast-model``) compiles :data:`HOT_MODULES` with Cython (pure-Python mode: the same
``.py`` files, unchanged, become C extension modules) into ``build/fast-model/<interpreter>/models``,
with a manifest of the sources' SHA-256.  When ``models`` is imported, :func:`compiled_dir` puts that
folder first on the package's ``__path__`` if the manifest matches the sources now on disk, so the
extension modules are imported instead of the ``.py`` files; otherwise (no build, a build for another
interpreter, a source changed since) the pure-Python modules are used, as on a bare machine.
``CXL_MODEL_BUILD=python`` forces the pure-Python modules.

The compiled modules are ordinary Python classes and functions (Cython without static types), so they
behave exactly as the sources do: the same messages, summaries and errors (tests/test_model_equivalence.py
runs on whichever build is active), and the tests that patch a handler on purpose still can.
"""

import hashlib
import os
import sys
from pathlib import Path

__all__ = ["HOT_MODULES", "BUILD_ROOT", "build_dir", "sources_digest", "compiled_dir", "active", "build", "main"]

HOT_MODULES = ("system", "dcoh", "host", "link", "checker")
PACKAGE = Path(__file__).resolve().parent
BUILD_ROOT = PACKAGE.parent / "build" / "fast-model"
MANIFEST = "sources.sha256"
ENV = "CXL_MODEL_BUILD"


def build_dir(root=BUILD_ROOT):
    """The package folder of the compiled modules for this interpreter (extension modules are ABI-bound)."""
    return Path(root) / sys.implementation.cache_tag / "models"


def sources_digest(package=PACKAGE):
    """SHA-256 over the names and contents of the hot modules' sources."""
    h = hashlib.sha256()
    for name in HOT_MODULES:
        h.update(name.encode() + b"\0")
        h.update((Path(package) / f"{name}.py").read_bytes())
    return h.hexdigest()


def compiled_dir(package=PACKAGE, root=BUILD_ROOT, environ=os.environ):
    """The folder to put first on ``models.__path__``, or None: the pure-Python modules."""
    if environ.get(ENV, "") == "python":
        return None
    d = build_dir(root)
    try:
        recorded = (d / MANIFEST).read_text().strip()
    except OSError:
        return None
    if recorded != sources_digest(package):
        print(f"note: {d} was built from other sources than models/ now holds; using the pure-Python "
              "golden model (`make fast-model` rebuilds it)", file=sys.stderr)
        return None
    return d


def active():
    """"cython" if the hot modules in use are the compiled ones, else "python"."""
    import importlib
    mods = [importlib.import_module(f"models.{m}") for m in HOT_MODULES]
    return "cython" if all(not m.__file__.endswith(".py") for m in mods) else "python"


def build(root=BUILD_ROOT, package=PACKAGE, jobs=2):
    """Compile the hot modules into :func:`build_dir` and write the manifest last (a build that stops
    half-way is never used)."""
    from Cython.Build import cythonize             # optional: only this build needs Cython
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    out = build_dir(root)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    digest = sources_digest(package)
    tmp = out.parent / "tmp"
    exts = [Extension(f"models.{m}", [str(Path(package) / f"{m}.py")], extra_compile_args=["-O2", "-g0"])
            for m in HOT_MODULES]                      # no debug info: it doubles the C compile time
    exts = cythonize(exts, build_dir=str(tmp), language_level=3, nthreads=jobs, quiet=True,
                     compiler_directives={"binding": True})   # binding: functions keep Python's introspection
    dist = Distribution({"name": "cxl-dcoh-fast-model", "ext_modules": exts})
    cmd = build_ext(dist)
    cmd.build_lib, cmd.build_temp, cmd.parallel = str(out.parent), str(tmp), jobs
    cmd.ensure_finalized()
    cmd.run()
    missing = [m for m in HOT_MODULES if not list(out.glob(f"{m}.*.so")) and not list(out.glob(f"{m}.*.pyd"))]
    if missing:
        raise RuntimeError(f"the compiled build produced no extension module for {', '.join(missing)}")
    (out / MANIFEST).write_text(digest + "\n")
    return out


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="Compile the golden model's hot modules with Cython")
    ap.add_argument("--root", default=str(BUILD_ROOT), help="build folder (default: build/fast-model)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    out = build(args.root, jobs=args.jobs)
    print(f"compiled {', '.join(HOT_MODULES)} into {out}; `import models` uses them while the sources are "
          f"unchanged ({ENV}=python: the pure-Python modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
