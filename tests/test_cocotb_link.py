"""Runs the VIP's link-side cocotb tests (tb/test_link_flits.py: FlitDriver, FlitStreamMonitor) on the
device's RTL flit receiver, ``FlitUnpacker(upstream=False)``, under Icarus (cocotb_tools.runner).

The Verilog (``tb.system_top.cached_verilog``: ``hdl.verilog.to_verilog`` plus the Icarus fixes) is
cached in build/cocotb/link_flits/ by a hash of the RTL and model sources.  ``SEED`` picks the seed
(default 1)."""

import os
import shutil
from pathlib import Path

from tb.seed import env_seed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb" / "link_flits"
TOP = "link_rx"
TESTS = 3
SEED = env_seed(1)


def _verilog():
    from hdl.link.rx import FlitUnpacker
    from tb.system_top import cached_verilog, source_hash
    return cached_verilog(BUILD / f"{TOP}.v", source_hash({"top": TOP, "upstream": False}, [__file__]),
                          lambda: FlitUnpacker(upstream=False))


def test_link_flits_icarus(monkeypatch):
    from cocotb_tools.runner import get_results, get_runner
    assert shutil.which("iverilog"), "iverilog is missing: run `sudo apt-get install iverilog` (or make deps)"
    src = _verilog()
    build_dir = BUILD / "sim_icarus"
    runner = get_runner("icarus")
    runner.build(sources=[src], hdl_toplevel=TOP, build_dir=build_dir, timescale=("1ns", "1ps"))
    results = build_dir / "results.xml"
    results.unlink(missing_ok=True)         # never read a stale file if the simulator dies
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    try:                    # under pytest the runner exits (SystemExit) when a cocotb test fails
        runner.test(hdl_toplevel=TOP, test_module="tb.test_link_flits", test_dir=ROOT, build_dir=build_dir,
                    results_xml=results, extra_env={"SEED": str(SEED)})
    except SystemExit:
        pass
    tests, failures = get_results(results)
    assert tests == TESTS and failures == 0, \
        f"seed {SEED}: {failures} of {tests} cocotb tests failed (see {results}; SEED={SEED})"
