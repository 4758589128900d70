"""`make verilog`: one Verilog file per synthesizable top, at default parameters.

    python -m hdl.verilog --out build/verilog [--tops dcoh,link_tx]

Each top is elaborated and written with ``amaranth.back.verilog.convert`` to ``<out>/<name>.v``
(module name = file name).  The Makefile then runs ``verilator --lint-only`` on each file.
A top whose module is missing is an error naming it, not a silent skip.
"""

import argparse
import importlib
import sys
import time
from pathlib import Path

from amaranth.back import verilog

# THE table of synthesizable tops (`make verilog` and `make synth` both use it): name -> (module, class,
# keyword arguments), at default parameters.  Add a top with one line.
TOPS = {
    "dcoh":    ("hdl.dcoh.dcoh", "DCOH", {}),
    "link_tx": ("hdl.link.tx", "FlitPacker", {"upstream": True}),     # device TX: D2H flits
    "link_rx": ("hdl.link.rx", "FlitUnpacker", {"upstream": False}),  # device RX: H2D flits
    "link":    ("hdl.link.port", "LinkPort", {"upstream": True}),     # device end: TX + RX + credits + retry
    "device":  ("hdl.device", "Device", {}),                          # DCOH + device link end
}


def sim_yosys_script(noopt=True):
    """The Yosys script of ``amaranth.back.verilog`` (proc -nomux -norom; memory_collect; write_verilog
    -norename) without proc's final ``opt_expr``, which bit-blasts AND/OR with wide constants (the CRC
    masks of ``hdl.link.crc.FlitCRC``) into thousands of part-select assigns."""
    return "\n".join([f"proc -nomux -norom{' -noopt' if noopt else ''}", "memory_collect",
                      "write_verilog -norename"])


def to_verilog(dut, name, noopt=True):
    """Verilog for simulators (Verilator, Icarus): ``dut`` through RTLIL and :func:`sim_yosys_script`,
    top module ``name``, no src attributes.  The same logic as ``amaranth.back.verilog.convert``;
    Verilator's C++ of the link is ~3x smaller and ~7x faster with it (bench/link_verilator.py)."""
    from amaranth.back import rtlil
    from amaranth._toolchain.yosys import find_yosys
    text = rtlil.convert(dut, name=name, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    return yosys.run(["-q", "-"], f"read_rtlil <<rtlil\n{text}\nrtlil\n{sim_yosys_script(noopt)}",
                     ignore_warnings=True)


def build(name):
    module, cls, kwargs = TOPS[name]
    return getattr(importlib.import_module(module), cls)(**kwargs)


def write(name, out):
    t0 = time.monotonic()
    text = verilog.convert(build(name), name=name)
    path = Path(out) / f"{name}.v"
    path.write_text(text)
    return path, time.monotonic() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/verilog")
    ap.add_argument("--tops", default=",".join(TOPS), help=f"comma-separated, from {sorted(TOPS)}")
    args = ap.parse_args(argv)
    names = [n for n in args.tops.split(",") if n]
    unknown = [n for n in names if n not in TOPS]
    if unknown:
        ap.error(f"unknown top(s) {unknown}; known: {sorted(TOPS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in names:
        path, seconds = write(name, args.out)
        print(f"{path}: {path.stat().st_size // 1024} KiB in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
