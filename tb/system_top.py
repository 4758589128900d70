"""Verilog of the system testbench's toplevel: N RTL devices, each behind its own flit link.

``build_system(devices, out_dir, **params)`` writes two files and returns their paths:

* ``linked_device.v``: :class:`tb.linked_device.LinkedDevice` (DCOH + device link end + two wires +
  host link end) converted once (``hdl.verilog.to_verilog``: the simulator-friendly Yosys script).  Converting is the slow step (about a minute through the
  WebAssembly Yosys), so it is done for one device only and cached: the file is rewritten only when
  the parameters or any source it depends on change (:func:`source_hash`, in its first line;
  :func:`cached_verilog` does the same for any other top, e.g. tests/test_cocotb_link.py).
* ``system_top_<N>dev.v``: a plain Verilog wrapper, generated here, that instantiates ``linked_device`` N
  times.  Every port of device ``i`` appears on the top as ``d<i>_<port>`` (e.g. ``d0_h2d_req__valid``:
  the VIP's ``<prefix>__valid`` naming).  One more output, ``mon``, packs every per-cycle status bit
  a testbench polls (:data:`MON_BITS` per device, device 0 in the low bits) so that it reads one
  vector per cycle instead of a hundred handles.

The host side of each device (``d<i>_h2d_*`` in, ``d<i>_d2h_*`` out) is the host end of its link: the
host BFM drives and takes CXL.cache messages there, and they cross the 68B-flit link both ways.

``build_batched_unit(out_dir, ...)`` writes the batched testbench's device instead (tb/system_batch.py,
run by tb/native.py): ``batched_device.v`` and ``batched_recorder.v`` (tb/batched_device.py, cached the
same way) and ``batched_unit.v``, the device with its recorder beside it.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import warnings
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from hdl.device import PIPELINED_EVENTS
from hdl.verilog import to_verilog

__all__ = ["MON_BITS", "MON_BITS_PIPELINED", "MON_FIELD_WIDTH", "mon_layout", "DEFAULT_DCOH", "DEFAULT_LINK", "UNIT_RESET_CYCLES", "build_system", "build_batched_unit",
           "build_lock", "cached_verilog", "params_path", "source_hash", "system_params", "write_atomically"]

ROOT = Path(__file__).resolve().parent.parent

# The per-device status fields packed into ``mon`` (bit 0 first): those of both DCOH tops, then the
# serializing DCOH's dispatch, or the pipelined DCOH's intake and commit ports (hdl/device.py).
_MON_COMMON = ("d2h_req__valid", "d2h_rsp__valid", "d2h_data__valid",
               "h2d_req__ready", "h2d_rsp__ready", "h2d_data__ready",
               "cpu_req__ready", "cpu_rsp__valid", "probe__valid", "cmd__valid", "cmd_rsp__ready",
               "dcoh_idle", "up_flit", "down_flit", "error")
MON_BITS = _MON_COMMON + ("scan_before", "dispatch")
MON_BITS_PIPELINED = _MON_COMMON + PIPELINED_EVENTS + ("commit_lane_probed", "commit_probe_evict")
#: the fields wider than one bit
MON_FIELD_WIDTH = {"dispatch": 3, "commit_c": 3, "rsp_commit": 2}


def mon_layout(pipelined=False):
    """({field: its lowest bit}, the width of one device's part) of ``mon``."""
    pos, at = {}, 0
    for name in (MON_BITS_PIPELINED if pipelined else MON_BITS):
        pos[name] = at
        at += MON_FIELD_WIDTH.get(name, 1)
    return pos, at


MON_WIDTH = mon_layout()[1]

# Default RTL parameters of the system testbench.  A small snoop filter (16 sets x 2 ways) so that
# capacity evictions (back-invalidations) happen often; the rest are the DCOH's defaults.
DEFAULT_DCOH = dict(caches=2, sf_sets=16, sf_ways=2, tracker=16, work=8, coalesce_window=4,
                    coalesce_block=4, coalesce_groups=4, starvation_bound=4, credits=64)
# The link ends' defaults (hdl/link/port.py): 64-entry retry buffers, 8-deep packer queues.  (32-entry
# buffers were used until the packer's skid register made the retry-buffer reserve 25 entries at 8-deep
# queues; the port asks for reserve + 8.)
DEFAULT_LINK = dict(retry_depth=64)
# the batched testbench's RTL internal caches (tb/rtl_caches.py): stall_bits > 0 makes them slow
DEFAULT_CACHES = dict(stall_bits=0)


def parse_dcoh(text):
    """``"work=1,tracker=2"`` -> ``{"work": 1, "tracker": 2}``: RTL DCOH parameters of the system testbench
    over DEFAULT_DCOH (the command-line form of ``make sim DCOH=...``).  An unknown name or a value that is
    not an integer raises ValueError naming it; the ranges are the DCOH's own (checked at elaboration)."""
    from models.config import parse_assignments
    return parse_assignments(text, {name: int for name in DEFAULT_DCOH}, "the DCOH parameters")


def system_params(dcoh=None, link=None, ber=0.0, caches=None, pipelined=False):
    """The full parameter set (defaults overridden by the given dicts), as stored in the hash.
    ``pipelined``: the devices have the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py)."""
    params = {"dcoh": {**DEFAULT_DCOH, **(dcoh or {})}, "link": {**DEFAULT_LINK, **(link or {})}, "ber": ber}
    if caches:              # only when set: the default build keeps its hash
        params["caches"] = {**DEFAULT_CACHES, **caches}
    if pipelined:           # the same
        params["pipelined"] = True
    return params


def source_hash(params, extra=()):
    """A key for generated Verilog: ``params`` plus every source it depends on (hdl/, the definitions in cxl/
    that the RTL reads at elaboration, tb/linked_device.py, this file's Icarus fixes) and the ``extra`` files.
    The RTL imports nothing else (tests/test_layering.py), so a change to the golden model alone keeps the
    Verilog and the simulator builds."""
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    files = sorted((ROOT / "hdl").rglob("*.py")) + sorted((ROOT / "cxl").rglob("*.py"))
    files += [ROOT / "tb" / "linked_device.py", Path(__file__)]
    for f in files + [Path(x) for x in extra]:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cached_verilog(path, key, make):
    """``path``: simulator Verilog (``hdl.verilog.to_verilog`` and the Icarus fixes) of the
    elaboratable ``make()`` returns, module named after the file; converted again only when ``key``
    (its first line) changes."""
    path = Path(path)
    tag = f"// cxl-dcoh {path.stem} {key}"
    if path.exists() and path.read_text().split("\n", 1)[0] == tag:
        return path
    text = _icarus_fixes(to_verilog(make(), path.stem))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, tag + "\n" + text)
    return path


def write_atomically(path, text):
    """Write ``path`` whole or not at all (a temporary file renamed over it): a process reading it meanwhile
    (another test worker, another run on the same build folder) sees the old file or the new one, never
    a part."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def build_lock(folder):
    """Hold an exclusive lock on ``folder`` (a ``.lock`` file in it) while building there: two runs or test
    workers that build into the same folder at once take turns, the second finds the first's build."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_PORT = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s+)?\\?([A-Za-z_][\w$]*)\s*;")


def _ports(text, module):
    """(direction, width, name) of each port of ``module`` in Yosys-written Verilog."""
    start = text.index(f"module {module}(")
    end = text.index("endmodule", start)
    ports = []
    for line in text[start:end].splitlines():
        m = _PORT.match(line)
        if m:
            width = int(m.group(2)) - int(m.group(3)) + 1 if m.group(2) else 1
            ports.append((m.group(1), width, m.group(4)))
    if not ports:
        raise RuntimeError(f"no ports found in module {module}")
    return ports


_BATCHED_SOURCES = [ROOT / "tb" / f for f in ("batched_device.py", "rtl_caches.py", "stamped.py")]


def _batched_device(params):
    from tb.batched_device import BatchedDevice
    return BatchedDevice(dcoh=params["dcoh"], link=params["link"], caches=params.get("caches"),
                         pipelined=params.get("pipelined", False))


def _device_verilog(out_dir, params, module="linked_device"):
    if module == "batched_device":
        from tb.batched_device import BatchedDevice
        return cached_verilog(out_dir / "batched_device.v", source_hash(params, _BATCHED_SOURCES),
                              lambda: _batched_device(params))
    if module == "batched_recorder":
        from tb.batched_device import Recorder

        def make():                     # the device's record layout (the device is not elaborated)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnusedElaboratable)
                return Recorder(_batched_device(params).layout)
        return cached_verilog(out_dir / "batched_recorder.v", source_hash(params, _BATCHED_SOURCES), make)
    from tb.linked_device import LinkedDevice
    return cached_verilog(out_dir / "linked_device.v", source_hash(params),
                          lambda: LinkedDevice(dcoh=params["dcoh"], link=params["link"], ber=params["ber"],
                                               pipelined=params.get("pipelined", False)))


_NONBLOCKING = re.compile(r"^\s*(\\?[\w$]+)\s*(?:\[[^\]]*\]\s*)?<=", re.M)
_REG_DECL = re.compile(r"^(\s*reg\s+(?:\[\d+:\d+\]\s+)?)(\\?[\w$]+)(\s*);$", re.M)


def _icarus_fixes(text):
    """Icarus fixes.  Give every clocked register that Yosys declared without an initial value an initial 0.

    Yosys writes a memory's read-data register (``reg [11:0] _0_;`` ... ``_0_ <= storage[addr]``)
    with no initializer.  Amaranth's simulator starts it at 0, 2-state Verilator too, but in 4-state
    Icarus it is X until its first read, and X from an empty FIFO's head spreads through the credit and
    arbitration logic.  Starting those registers at 0 makes Icarus agree with the other two.  And
    make every combinational block run at time 0 (``_TRIGGER``)."""
    clocked = set(_NONBLOCKING.findall(text))
    text = _REG_DECL.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)} = 0;" if m.group(2) in clocked
                         else m.group(0), text)
    text = _TRIGGER.sub(lambda m: f"{m.group(0)}\n  initial #0 {m.group(1)} = 1;", text)
    return _MODULE.sub(_trigger_single_assignments, text)


_MODULE = re.compile(r"^module .*?^endmodule\n", re.M | re.S)
_SINGLE = re.compile(r"^  always @\*\n(    [^\n]* = [^\n]*;)\n", re.M)


def _trigger_single_assignments(m):
    """Yosys writes a comb assignment of a constant (or of a value that may never change) as a bare
    ``always @* x = c;``, which no event ever starts in Icarus: give it the module's time-0 trigger."""
    body = m.group(0)
    if not _SINGLE.search(body):
        return body
    trig = _TRIGGER.search(body)
    if trig is None:
        name = "\\$tb_time0 "
        head_end = body.index(");\n") + 3
        body = body[:head_end] + f"  reg {name} = 0;\n  initial #0 {name} = 1;\n" + body[head_end:]
    else:
        name = trig.group(1)
    return _SINGLE.sub(lambda s: f"  always @* begin\n    if ({name}) begin end\n{s.group(1)}\n  end\n", body)


# Yosys makes every ``always @*`` block sensitive to a register initialized to 0 so that it runs at
# time 0.  Under ``-g2012`` (cocotb's Icarus flags) a declaration initializer is not an event, so a
# block whose inputs never change would stay X; a ``#0`` assignment in an initial block is one.
_TRIGGER = re.compile(r"^\s*reg (\\\$auto\$verilog_backend[^ ]*dump_module\$\d+ ) = 0;", re.M)


def write_if_changed(path, text):
    """A rewritten source is newer than the simulator's build, which then rebuilds (~9 min for 4
    devices on Verilator): leave an identical file alone."""
    if not path.exists() or path.read_text() != text:
        write_atomically(path, text)


# The power-on reset of the batched unit: reset held for this many rising edges from the start.
UNIT_RESET_CYCLES = 3


def build_batched_unit(out_dir, dcoh=None, link=None, caches=None, pipelined=False):
    """Verilog of one device of the batched testbench (tb/system_batch.py), for the native driver
    (tb/native.py): ``batched_device.v`` and ``batched_recorder.v`` (tb/batched_device.py, cached as
    ``linked_device.v`` is) and ``batched_unit.v`` (module ``batched_unit``), the device with its recorder
    beside it, wired by ``record``, ``record_write`` and ``now``.  Ports: the device's others, the
    recorder's as ``rec<j>`` (the window) and ``rec_count`` / ``rec_pop`` / ``rec_pop_seq`` /
    ``rec_overflow``, ``poll`` = {rec_count, status} (what a testbench reads first at each look, in one
    read), and ``clk``.

    No reset input: the unit resets itself for its first :data:`UNIT_RESET_CYCLES` rising edges.  A reset
    input feeds every register's next-state logic, and Verilator evaluates all logic that depends on an
    input once more at every evaluation; from a register, the reset leaves that logic to the clock edge
    (about a fifth of the model's work, docs/testbench.md).  Returns the three files, the unit last, and
    writes :func:`params_path` for one device."""
    out_dir = Path(out_dir)
    params = system_params(dcoh, link, caches=caches, pipelined=pipelined)
    dev_v = _device_verilog(out_dir, params, "batched_device")
    rec_v = _device_verilog(out_dir, params, "batched_recorder")
    inner = {"record", "record_write"}
    dev_ports = [p for p in _ports(dev_v.read_text(), "batched_device") if p[2] not in ("clk", "rst")]
    rec_ports = [p for p in _ports(rec_v.read_text(), "batched_recorder") if p[2] not in ("clk", "rst")]
    width = {n: w for _, w, n in dev_ports}
    if not inner <= set(width):
        raise RuntimeError("batched_device has no record/record_write ports")
    rec_top = {n: (n if n.startswith("rec") and n[3:].isdigit() else f"rec_{n}") for _, _, n in rec_ports
               if n not in ("now", "record", "write")}
    top_ports = [(d, w, n) for d, w, n in dev_ports if n not in inner] + \
                [(d, w, rec_top[n]) for d, w, n in rec_ports if n in rec_top]
    rec_width = {n: w for _, w, n in rec_ports}
    top_ports.append(("output", width["status"] + rec_width["count"], "poll"))
    decl = lambda d, w, n: f"  {d} " + (f"[{w - 1}:0] " if w > 1 else "") + f"{n};"
    bits = UNIT_RESET_CYCLES.bit_length()
    lines = ["// Generated by tb/system_top.py: one batched device with its recorder; do not edit.",
             "module batched_unit(clk, " + ", ".join(n for _, _, n in top_ports) + ");", "  input clk;"]
    lines += [decl(d, w, n) for d, w, n in top_ports]
    lines += [decl("wire", width[n], f"{n}_w") for n in sorted(inner)]
    lines += [f"  reg [{bits - 1}:0] por = 0;", f"  wire rst = por != {UNIT_RESET_CYCLES};",
              f"  always @(posedge clk) if (por != {UNIT_RESET_CYCLES}) por <= por + 1;"]
    conn = [f".{n}({n}_w)" if n in inner else f".{n}({n})" for _, _, n in dev_ports]
    lines.append(f"  batched_device dev (.clk(clk), .rst(rst), {', '.join(conn)});")
    conn = [".now(now)", ".record(record_w)", ".write(record_write_w)"] + [f".{n}({t})" for n, t in rec_top.items()]
    lines.append(f"  batched_recorder rec (.clk(clk), .rst(rst), {', '.join(conn)});")
    lines.append("  assign poll = {rec_count, status};")
    lines.append("endmodule")
    top = out_dir / "batched_unit.v"
    write_if_changed(top, "\n".join(lines) + "\n")
    write_if_changed(params_path(out_dir, 1), json.dumps({"devices": 1, **params}, indent=1))
    return [dev_v, rec_v, top]


def params_path(out_dir, devices):
    """The parameter file a build of ``devices`` devices in ``out_dir`` leaves for the testbench
    (``SIM_PARAMS``).  Named per device count, like the top, so that builds of several N can share
    ``out_dir`` (and the cached ``linked_device.v``) while another N's simulation runs."""
    return Path(out_dir) / f"system_params_{devices}dev.json"


def build_system(devices, out_dir, dcoh=None, link=None, ber=0.0, pipelined=False):
    """Write ``linked_device.v`` (cached) and ``system_top_<N>dev.v`` (module ``system_top``) for
    ``devices`` devices into ``out_dir``, and :func:`params_path`; return the Verilog files, the top last.
    ``pipelined``: the pipelined DCOH (give it an ``out_dir`` of its own).  (The batched testbench's
    device: :func:`build_batched_unit`.)"""
    if not 1 <= devices <= 16:
        raise ValueError(f"devices={devices}: must be 1..16 (CXL.cache CacheID is 4 bits)")
    out_dir = Path(out_dir)
    params = system_params(dcoh, link, ber, pipelined=pipelined)
    dev_v = _device_verilog(out_dir, params)
    ports = [p for p in _ports(dev_v.read_text(), "linked_device") if p[2] not in ("clk", "rst")]
    width = {p[2]: p[1] for p in ports}
    mon_bits = MON_BITS_PIPELINED if pipelined else MON_BITS
    bad = [b for b in mon_bits if width.get(b) != MON_FIELD_WIDTH.get(b, 1)]
    if bad:
        raise RuntimeError(f"linked_device has no port(s) of the mon vector's width for {bad}")
    mon_width = mon_layout(pipelined)[1]
    lines = ["// Generated by tb/system_top.py: N linked devices; do not edit.",
             "module system_top(clk, rst, mon, " +
             ", ".join(f"d{i}_{n}" for i in range(devices) for _, _, n in ports) + ");",
             "  input clk;", "  input rst;", f"  output [{mon_width * devices - 1}:0] mon;"]
    for i in range(devices):
        for d, w, n in ports:
            lines.append(f"  {d} " + (f"[{w - 1}:0] " if w > 1 else "") + f"d{i}_{n};")
    for i in range(devices):
        conn = ", ".join(f".{n}(d{i}_{n})" for _, _, n in ports)
        lines.append(f"  linked_device dev{i} (.clk(clk), .rst(rst), {conn});")
        bits = ", ".join(f"d{i}_{b}" for b in reversed(mon_bits))
        lines.append(f"  assign mon[{mon_width * (i + 1) - 1}:{mon_width * i}] = {{{bits}}};")
    lines.append("endmodule")
    top = out_dir / f"system_top_{devices}dev.v"
    write_if_changed(top, "\n".join(lines) + "\n")
    write_if_changed(params_path(out_dir, devices), json.dumps({"devices": devices, **params}, indent=1))
    return [dev_v, top]


if __name__ == "__main__":
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    print(build_system(n, ROOT / "build" / "sim" / "rtl"))
