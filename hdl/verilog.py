"""`make verilog`: one Verilog file per synthesizable top, at default parameters.

    python -m hdl.verilog --out build/verilog [--tops dcoh,link_tx] [--with-asserts]

Each top is elaborated and written to ``<out>/<name>.v`` (module name = file name) in the *synthesis
flavour*: plain Verilog-2005 that any Verilog reader takes (Yosys ``read_verilog`` without ``-sv``, vendor
FPGA tools).  The RTL's ``Assert`` statements are simulation and proof checks, written by Yosys as
SystemVerilog immediate ``assert`` statements, so this flavour removes them (``chformal -remove``), as
``make synth`` does.  ``--with-asserts`` also writes ``<out>/<name>.sv``, the same logic with the
assertions kept (SystemVerilog, for simulators and formal tools).  The Makefile then runs
``verilator --lint-only`` on each ``.v`` file.  A top whose module is missing is an error naming it, not a
silent skip.
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
    # the same behind the input register that splits its pre-decode, as the link port builds it
    "link_rx_split": ("hdl.link.rx", "RegisteredFlitUnpacker", {"upstream": False}),
    # ... and never waiting for room in its lanes (the port's credits keep them from overflowing)
    "link_rx_nostall": ("hdl.link.rx", "RegisteredFlitUnpacker", {"upstream": False, "stall": False}),
    "link":    ("hdl.link.port", "LinkPort", {"upstream": True}),     # device end: TX + RX + credits + retry
    # the same with its message side on chip (generators, a fold of what it receives): only flits at the pins
    "link_end": ("hdl.link.end_harness", "LinkEndHarness", {"upstream": True}),
    "device":  ("hdl.device", "Device", {}),                          # DCOH + device link end
    # the DCOH's snoop filter alone (its default size and mode), and the pipelined one beside it
    "snoop_filter": ("hdl.dcoh.snoop_filter", "SnoopFilter", {"sets": 64, "ways": 4, "caches": 2,
                                                               "busy_at_result": True}),
    "sf_pipe": ("hdl.dcoh.sf_pipe", "PipelinedSnoopFilter", {"sets": 64, "ways": 4, "caches": 2}),
    "sf_pipe_nostall": ("hdl.dcoh.sf_pipe", "PipelinedSnoopFilter", {"sets": 64, "ways": 4, "caches": 2,
                                                                     "stall": False}),
    # the pipelined DCOH's snoop path (hdl/dcoh/pipe/snoop_pipe.py), with the work entries that let
    # probed snoops stream at one a cycle (docs/dcoh_pipeline.md)
    "snoop_pipe": ("hdl.dcoh.pipe.snoop_pipe", "SnoopPipe", {"work": 24}),
    # its response path (hdl/dcoh/pipe/response_path.py): H2D Rsp / Data over the tracker, the lane
    "response_path": ("hdl.dcoh.pipe.response_path", "ResponsePath", {}),
    # the engine: the snoop path, the request path (the caches' accesses) and the response path over one
    # snoop filter (hdl/dcoh/pipe/engine.py)
    "engine": ("hdl.dcoh.pipe.engine", "Engine", {}),
    # the pipelined DCOH top: the engine behind the D2H credits, with DevLoad and the error status, the
    # ports of ``dcoh`` (hdl/dcoh/pipe/dcoh_top.py)
    "dcoh_pipe": ("hdl.dcoh.pipe.dcoh_top", "PipelinedDCOH", {}),
    # the device top with it (hdl/device.py)
    "device_pipe": ("hdl.device", "Device", {"pipelined": True}),
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


def synthesis_verilog(dut, name):
    """Plain Verilog-2005 of ``dut`` (top module ``name``): Amaranth's own Yosys script
    (``amaranth.back.verilog.convert``) with the formal cells (``Assert``/``Assume``/``Cover``) deleted
    after ``proc``, where they become ``$check`` cells.  Source attributes are kept (they name the Python
    line of each signal)."""
    from amaranth.back import rtlil
    from amaranth._toolchain.yosys import find_yosys
    text = rtlil.convert(dut, name=name)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = "\n".join([f"read_rtlil <<rtlil\n{text}\nrtlil", "proc -nomux -norom", "delete t:$check t:$assert t:$assume t:$cover t:$live t:$fair",
                        "memory_collect", "write_verilog -norename"])
    return yosys.run(["-q", "-"], script, ignore_warnings=True)


def build(name):
    module, cls, kwargs = TOPS[name]
    return getattr(importlib.import_module(module), cls)(**kwargs)


def write(name, out, with_asserts=False):
    """Writes ``<out>/<name>.v`` (synthesis flavour) and, with ``with_asserts``, ``<out>/<name>.sv``;
    returns [(path, seconds), ...]."""
    written = []
    t0 = time.monotonic()
    path = Path(out) / f"{name}.v"
    path.write_text(synthesis_verilog(build(name), name))
    written.append((path, time.monotonic() - t0))
    if with_asserts:
        t0 = time.monotonic()
        path = Path(out) / f"{name}.sv"
        path.write_text(verilog.convert(build(name), name=name))
        written.append((path, time.monotonic() - t0))
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/verilog")
    ap.add_argument("--tops", default=",".join(TOPS), help=f"comma-separated, from {sorted(TOPS)}")
    ap.add_argument("--with-asserts", action="store_true",
                    help="also write <name>.sv with the RTL's assertions (SystemVerilog)")
    args = ap.parse_args(argv)
    names = [n for n in args.tops.split(",") if n]
    unknown = [n for n in names if n not in TOPS]
    if unknown:
        ap.error(f"unknown top(s) {unknown}; known: {sorted(TOPS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in names:
        for path, seconds in write(name, args.out, args.with_asserts):
            print(f"{path}: {path.stat().st_size // 1024} KiB in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
