"""The optional compiled build of the golden model's hot modules (``make fast-model``).

:func:`build` (``make fast-model``) compiles :data:`HOT_MODULES` with Cython (pure-Python mode: the same
``.py`` files, unchanged, become C extension modules) into ``build/fast-model/<interpreter>/models``,
with a manifest of the SHA-256 of the sources and their type declarations.  When ``models`` is imported,
:func:`compiled_dir` puts that folder first on the package's ``__path__`` if the manifest matches the
files now on disk, so the extension modules are imported instead of the ``.py`` files; otherwise (no
build, a build for another interpreter, a file changed since) the pure-Python modules are used, as on a
bare machine.  ``CXL_MODEL_BUILD=python`` forces the pure-Python modules.

Static types.  Beside each hot module, a ``.pxd`` of the same name (Cython's "augmenting" declarations,
which plain Python never reads) makes the model's classes extension types: their attributes become C
fields, the methods it lists ``cpdef`` (called in C when the receiver's type is known), and the locals
it names typed, so that the loop, the handlers and the checks reach the state without dictionary
lookups.  The ``.py`` files stay the one definition of the model; the declarations only say what type
each attribute and local already has.  What that changes for users of the compiled build:

- the classes take no new attributes, and no method can be replaced on the class itself nor on one
  instance: instrument with a subclass, which can override any method (tests/model_trace.py records
  every message that way, and breaks its recording subclasses on purpose; tb/hypothesis_traces.py
  counts in subclasses of ``Device`` and ``Coalescer``, built through ``System(device_class=...)``;
  tb/system_tb.py puts a ``Link`` subclass in with ``System.replace_link``).  Only ``System`` keeps an
  instance ``__dict__``, so that a driver may keep notes on it (models/explore.py): Cython gives every
  instance of such a class a dictionary, and every cpdef call then looks for a method replaced in it,
  through a cache of one instance that misses whenever calls alternate between the devices or links
  (8 % of the run's instructions when ``Device``, ``Coalescer`` and ``Link`` had one);
- a message (``models.link.Msg``) is a value: its fields are read-only in the compiled build (the
  pure-Python class does not enforce it), ``Msg.replace`` makes a changed copy;
- the test suite runs the pure-Python modules (tests/conftest.py), since several tests patch the
  classes; tests/test_model_build.py builds the compiled modules and checks that they give the
  equivalence digests of tests/model_digests.json (the same messages at the same cycles, the same
  summaries, and the same errors at the same cycles for the runs broken on purpose), and that the
  testbenches' instrumented subclasses see the same as with the pure-Python model.
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
        for suffix in (".py", ".pxd"):          # the .pxd: the static types of the compiled build
            f = Path(package) / f"{name}{suffix}"
            if suffix == ".py" or f.exists():
                h.update(f.name.encode() + b"\0")
                h.update(f.read_bytes())
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
                     compiler_directives={"binding": True,       # functions keep Python's introspection
                                          "nonecheck": True})    # None where a typed object is read:
                                                                 # AttributeError, not a crash
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
    ap.add_argument("--if-stale", action="store_true",
                    help="build only if no build matches the sources, and if it cannot be built (no Cython, no "
                         "C compiler) say so and exit 0: the pure-Python model runs (make sim, regress, model)")
    args = ap.parse_args(argv)
    if args.if_stale:
        if compiled_dir(root=Path(args.root), environ={}) is not None:
            return 0
        try:
            out = build(args.root, jobs=args.jobs)
        except Exception as e:          # ImportError (no Cython), CompileError, a C compiler's failure
            print(f"note: the compiled golden model could not be built ({type(e).__name__}: {e}); the "
                  "pure-Python model runs instead (`make fast-model` shows the whole error)", file=sys.stderr)
            return 0
        print(f"compiled the golden model's hot modules into {out} (models/compiled.py)")
        return 0
    out = build(args.root, jobs=args.jobs)
    print(f"compiled {', '.join(HOT_MODULES)} into {out}; `import models` uses them while the sources are "
          f"unchanged ({ENV}=python: the pure-Python modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
