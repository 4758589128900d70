"""The pipelined DCOH's snoop path (hdl/dcoh/pipe/snoop_pipe.py) against the golden device, and its corners.

* Random snoops (every opcode, to lines held in every shape and to lines the device lacks) against the
  golden model's device started from the same state, through back-pressure on every port, commands
  answered late, and the edge sizes (one work entry, a window of four, one command outstanding, one
  coalescer group, a direct-mapped filter): every D2H message compared one for one, the snoop filter
  and the caches at the end (tb/snoop_pipe.py).
* Streams of snoop-filter misses, of hits that need no probe and of hits that probe the caches: one
  snoop a cycle (with enough work entries for the probes' round trip).
* A second snoop to a line whose first is still being answered is counted once, held, and answered
  after the first; a reserved opcode is counted and dropped; bad parameters are named.
"""

import pytest
from amaranth.sim import Simulator

from cxl.messages import D2HRspOpcode, H2DReqOpcode
from hdl.dcoh.encodings import ErrorKind
from hdl.dcoh.pipe.snoop_pipe import SnoopPipe
from hdl.dcoh.pipe.snoop_window import SnoopWindow
from hdl.dcoh.pipe.snoop_work import SnoopWork
from tb.snoop_pipe import Mismatch, SnoopPipeBench, per_cycle

# (parameters, sink probability, command delay): the defaults, then the edges
CASES = [
    (dict(), 1.0, 0),
    (dict(), 0.6, 2),
    (dict(work=1, window=4, cmd_depth=1, coalesce_groups=1), 0.7, 1),
    (dict(work=2, caches=3, sf_sets=4, sf_ways=4, coalesce_window=0), 0.5, 3),
    (dict(work=3, caches=1, sf_sets=16, sf_ways=1, coalesce_block=1), 0.8, 0),
    (dict(work=16, cmd_depth=8, coalesce_window=1, coalesce_groups=2, sf_ways=8, sf_sets=8), 0.9, 1),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_snoops_match_the_model(case, seed):
    params, p_sink, delay = CASES[case]
    b = SnoopPipeBench(seed=100 * case + seed, **params)
    r = b.run(b.random_snoops(120), p_sink=p_sink, cmd_delay=delay)
    assert len(r["rtl_rsp"]) == 120 and r["errors"] == 0


def test_the_bench_catches_a_snoop_answered_without_its_probe(monkeypatch):
    """The comparison can fail: a C stage that never sees that an answer takes permission from the copies
    (an SnpInv to an S line answered at once, the copies left valid) is caught."""
    import hdl.dcoh.pipe.snoop_pipe as pipe
    monkeypatch.setattr(pipe, "perm_none", lambda nxt: 0)
    b = SnoopPipeBench(seed=5, shapes=("S",))
    with pytest.raises(Mismatch):
        b.run([(H2DReqOpcode.SnpInv, line) for line in b.held_lines[:6]])


def _stream(op, shapes, held, work=24):
    lines = [0x400 + i for i in range(128)]
    b = SnoopPipeBench(seed=1, sf_sets=64, sf_ways=4, work=work, lines=lines, shapes=shapes)
    r = b.run([(op, line) for line in (lines if held else [0x10000 + i for i in range(128)])])
    return per_cycle(r["rsp_cycles"]), r


@pytest.mark.parametrize("kind", ["miss", "hit", "probe"])
def test_snoops_stream_one_per_cycle(kind):
    op, held = {"miss": (H2DReqOpcode.SnpData, False), "hit": (H2DReqOpcode.SnpData, True),
                "probe": (H2DReqOpcode.SnpInv, True)}[kind]
    rate, r = _stream(op, ("S",), held)
    assert rate >= 0.99, f"{kind}: {rate:.3f} snoops per cycle"
    if kind == "probe":                  # each probed: no copy is left, every answer RspIHitSE
        assert {m.op for m in r["rtl_rsp"]} == {D2HRspOpcode.RspIHitSE}


def _directed(dut, snoops, probe_from=0, cycles=80):
    """Drive ``snoops`` ([(op, line, uqid)]) into h2d_req in order, each offered until taken; the caches
    take probes from cycle ``probe_from`` on and answer each command in the next cycle (S copies:
    nothing dirty); returns [(cycle, opcode, uqid)] of the responses and the error registers."""
    got = []
    out = {}

    async def bench(ctx):
        queue = list(snoops)
        answers = []
        for cyc in range(cycles):
            if queue:
                op, line, uqid = queue[0]
                ctx.set(dut.h2d_req.valid, 1)
                ctx.set(dut.h2d_req.p, {"valid": 1, "addr": line, "uqid": uqid})
                ctx.set(dut.h2d_req.p.opcode.as_value(), getattr(op, "value", op))    # a reserved code too
            else:
                ctx.set(dut.h2d_req.valid, 0)
            ctx.set(dut.probe.ready, cyc >= probe_from)
            for port in (dut.cmd, dut.d2h_rsp, dut.d2h_data):
                ctx.set(port.ready, 1)
            ctx.set(dut.cmd_rsp.valid, bool(answers))
            if answers:
                answers.pop(0)
                ctx.set(dut.cmd_rsp.p, {"dirty": 0, "excl": 0, "data": 0})
            if queue and ctx.get(dut.h2d_req.ready):
                queue.pop(0)
            if ctx.get(dut.cmd.valid):
                answers.append(1)
            if ctx.get(dut.d2h_rsp.valid):
                r = ctx.get(dut.d2h_rsp.p)
                got.append((cyc, D2HRspOpcode(r.opcode), int(r.uqid)))
            await ctx.tick()
        out["errors"] = ctx.get(dut.protocol_errors)
        out["last"] = ErrorKind(ctx.get(dut.last_error))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got, out


def _one_s_line(line, **params):
    """A SnoopPipe whose filter holds ``line`` in S in cache 0 (no other line)."""
    b = SnoopPipeBench(seed=1, lines=[line], shapes=("S",), caches=1, **params)
    return b.dut


def test_second_snoop_to_a_line_is_counted_held_and_answered_after_the_first():
    """CXL allows one snoop per line at a time: a host that sends a second while the first waits for its
    probe gets it counted once (SECOND_SNOOP, however often C holds it again), and both answered, the
    second after the first and from the state the first left (the line invalid: RspIHitI).  A snoop to
    another line behind them waits in order."""
    line = 0x40
    dut = _one_s_line(line)
    got, out = _directed(dut, [(H2DReqOpcode.SnpInv, line, 7), (H2DReqOpcode.SnpData, line, 8),
                               (H2DReqOpcode.SnpData, 0x999, 9)], probe_from=30)
    assert [(op, u) for _, op, u in got] == [(D2HRspOpcode.RspIHitSE, 7), (D2HRspOpcode.RspIHitI, 8),
                                             (D2HRspOpcode.RspIHitI, 9)]
    assert got[0][0] > 30                  # the first waited for its probe
    assert out["errors"] == 1 and out["last"] is ErrorKind.SECOND_SNOOP


def test_reserved_snoop_opcode_is_counted_and_dropped():
    dut = _one_s_line(0x40)
    got, out = _directed(dut, [(0b111, 0x40, 3), (H2DReqOpcode.SnpData, 0x40, 4)])
    assert [(op, u) for _, op, u in got] == [(D2HRspOpcode.RspSHitSE, 4)]
    assert out["errors"] == 1 and out["last"] is ErrorKind.RESERVED_SNOOP


@pytest.mark.parametrize("make, name", [
    (lambda: SnoopWindow(depth=6), "depth"),
    (lambda: SnoopWindow(depth=2), "depth"),
    (lambda: SnoopWork(0, 2, 46, 4, 4), "entries"),
    (lambda: SnoopWork(4, 2, 46, 4, 4, cmd_depth=0), "cmd_depth"),
])
def test_bad_parameters_are_named(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_elaborates_at_the_defaults():
    from amaranth.back import rtlil
    assert "snoop" in rtlil.convert(SnoopPipe())


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 11, 16])
def test_priority_encoder_finds_the_lowest_set_bit(n):
    """hdl.dcoh.pipe.snoop_work.lowest, the work entries' arbiters (a tree, not a chain), its index and
    its one-hot grant: every input up to 11 bits, and single bits, all ones and a pattern at 16."""
    from amaranth.hdl import Module, Signal
    from hdl.dcoh.pipe.snoop_work import lowest
    m = Module()
    bits = Signal(n)
    anyv, idx, grant = lowest(m, bits, "t")
    wrong = []

    async def bench(ctx):
        values = range(1 << n) if n <= 11 else [1 << k for k in range(n)] + [0, (1 << n) - 1, 0b1010 << 4]
        for v in values:
            ctx.set(bits, v)
            exp = (v & -v).bit_length() - 1
            if ctx.get(anyv) != (v != 0) or (v and ctx.get(idx) != exp) or ctx.get(grant) != (v & -v):
                wrong.append((v, ctx.get(anyv), ctx.get(idx), ctx.get(grant)))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]
