"""The DCOH's table lookups, generated at elaboration from the model's tables (:mod:`cxl.coherence`).

The snoop table (``SNOOP_TABLE``: the response, next state and data of each device state and snoop), the
response table (``RESPONSE_TABLE``: the next state of a request for each host response), the internal
copies' permission in a device state (``INTERNAL_PERMISSION``), the stable states, the state a snoop finds
a line in (from the snoop filter's entry and the tracker), and the snoops an S line answers without
change.  Each turns a table into a ``Switch`` (or a compare) over the state and event codes of
:mod:`hdl.dcoh.encodings`, so the RTL cannot disagree with the model's tables.  The functions that build
a ``Switch`` take the module ``m``.
"""

from amaranth.hdl import Cat, Mux, Signal

from cxl.messages import D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp, H2DRspOpcode as HRsp
from cxl.coherence import (DevState as D, Perm, STALL, GO_OF, GRANTED, INTERNAL_PERMISSION, REQUEST_START,
                           RESPONSE_TABLE, SNOOP_TABLE)

from .encodings import EVENTS, EVENT_CODE, STATE_BITS, STATE_CODE, CmdOp
from .snoop_filter import SFState

__all__ = ["snoop_table", "command_for", "cmd_op_for", "verdict_table", "perm_rw", "perm_none", "rsp_event", "response_table", "is_stable", "line_state", "keeps_s", "legal_snoop", "write_back"]


def snoop_table(m, state, op):
    """(stall, rsp, next state, data) for a device state code and a snoop opcode."""
    stall, rsp, nxt, dat = Signal(), Signal(Rsp, init=Rsp.RspIHitI), Signal(STATE_BITS), Signal()
    with m.Switch(state):
        for s, code in STATE_CODE.items():
            with m.Case(code):
                with m.Switch(op):
                    for o in Snp:
                        if (s, o) not in SNOOP_TABLE:
                            continue
                        r_, n_, d_ = SNOOP_TABLE[(s, o)]
                        with m.Case(o):
                            if r_ is STALL:
                                m.d.comb += [stall.eq(1), nxt.eq(STATE_CODE[n_])]
                            else:
                                m.d.comb += [rsp.eq(r_), nxt.eq(STATE_CODE[n_]), dat.eq(d_)]
    return stall, rsp, nxt, dat


def command_for(state):
    """The command (:class:`~hdl.dcoh.encodings.CmdOp`) that leaves a line's internal copies what the
    device state ``state`` (a ``DevState``) allows them: none (invalidate), read (downgrade to S), or
    what they have (keep).  The one rule for the RTL's commands (:func:`cmd_op_for`, :func:`verdict_table`)."""
    perm = INTERNAL_PERMISSION.get(state, Perm.NONE)
    return CmdOp.INV if perm is Perm.NONE else CmdOp.TO_S if state is D.S else CmdOp.KEEP


def cmd_op_for(m, nxt):
    """:func:`command_for` of a device state code, as a signal."""
    op = Signal(CmdOp, name="cmd_op_for")
    with m.Switch(nxt):
        for st, code in STATE_CODE.items():
            with m.Case(code):
                m.d.comb += op.eq(command_for(st))
        with m.Default():                   # (no state has it; as the If chain this replaced)
            m.d.comb += op.eq(CmdOp.KEEP)
    return op


def verdict_table(m, state, op):
    """The snoop table's row for a device state code and a snoop opcode, with what the pipelined snoop
    path derives from it worked out at elaboration, so that one lookup gives all of it: ``rsp``,
    ``nxt``, ``data``, ``cmd`` (:func:`command_for` of ``nxt``), ``probe_s`` / ``probe_rw`` (whether the
    copies must be probed when they are S / E or M: data to fetch, or permission to take away).  A dict
    of signals."""
    out = {"rsp": Signal(Rsp, init=Rsp.RspIHitI), "nxt": Signal(STATE_BITS), "data": Signal(),
           "cmd": Signal(CmdOp), "probe_s": Signal(), "probe_rw": Signal()}
    with m.Switch(state):
        for st, code in STATE_CODE.items():
            with m.Case(code):
                with m.Switch(op):
                    for o in Snp:
                        row = SNOOP_TABLE.get((st, o))
                        if row is None or row[0] is STALL:
                            continue
                        rsp, nxt, dat = row
                        perm = INTERNAL_PERMISSION.get(nxt, Perm.NONE)
                        with m.Case(o):
                            m.d.comb += [out["rsp"].eq(rsp), out["nxt"].eq(STATE_CODE[nxt]), out["data"].eq(dat),
                                         out["cmd"].eq(command_for(nxt)),
                                         out["probe_s"].eq(bool(dat) or perm is Perm.NONE),
                                         out["probe_rw"].eq(bool(dat) or perm is not Perm.READWRITE)]
    return out


def perm_rw(state):
    """The device state allows internal copies write permission."""
    rw = [STATE_CODE[s] for s in D if INTERNAL_PERMISSION.get(s, Perm.NONE) is Perm.READWRITE]
    return Cat(state == c for c in rw).any()


def perm_none(state):
    """The device state leaves internal copies no permission (cxl.coherence.INTERNAL_PERMISSION)."""
    none = [STATE_CODE[s] for s in D if INTERNAL_PERMISSION.get(s, Perm.NONE) is Perm.NONE]
    return Cat(state == c for c in none).any()


def rsp_event(m, opcode, rsp_data):
    """(event code, known) of an H2D Rsp for the response table: a GO by the state its ``rsp_data``
    carries (``GO_OF``), a write pull by its opcode; any other (a reserved GO state, ExtCmp, the Fast_GO
    family) is no event the table knows."""
    code, known = Signal(range(len(EVENTS))), Signal()
    with m.Switch(opcode):
        with m.Case(HRsp.GO):
            with m.Switch(rsp_data[:4]):
                for g, name in GO_OF.items():
                    with m.Case(g):
                        m.d.comb += [code.eq(EVENT_CODE[name]), known.eq(1)]
        for o in (HRsp.GO_WritePull, HRsp.GO_WritePull_Drop, HRsp.WritePull):
            with m.Case(o):
                m.d.comb += [code.eq(EVENT_CODE[o.name]), known.eq(1)]
    return code, known


def response_table(m, state, event):
    """(legal, next state code or GRANTED, granted, send data, bogus)."""
    legal, nxt, granted, send, bogus = Signal(), Signal(STATE_BITS), Signal(), Signal(), Signal()
    with m.Switch(state):
        for s, code in STATE_CODE.items():
            evs = [(e, v) for (s2, e), v in RESPONSE_TABLE.items() if s2 is s]
            if not evs:
                continue
            with m.Case(code):
                with m.Switch(event):
                    for e, (n_, action) in evs:
                        with m.Case(EVENT_CODE[e]):
                            m.d.comb += legal.eq(1)
                            if n_ == GRANTED:
                                m.d.comb += granted.eq(1)
                            else:
                                m.d.comb += nxt.eq(STATE_CODE[n_])
                            m.d.comb += [send.eq(action is not None), bogus.eq(action == "send_bogus")]
    return legal, nxt, granted, send, bogus


_STABLE_CODES = [STATE_CODE[s] for s in (D.I, D.S, D.E, D.M)]


def is_stable(code):
    """The device state code is a stable one (I, S, E, M): a request that reaches it is complete."""
    return Cat(code == c for c in _STABLE_CODES).any()


def line_state(m, hit, entry, th, t_state):
    """(state code, maybe M) of a line: the tracker's state if a request is on it (``th``), else from its
    snoop-filter entry (E may be M: the DCOH cannot see a silent upgrade), else I."""
    st = Signal(STATE_BITS)
    maybe_m = Signal()
    with m.If(th):
        m.d.comb += st.eq(t_state)
    with m.Elif(hit & (entry.state != SFState.PLACEHOLDER)):
        with m.If(entry.dirty):
            m.d.comb += st.eq(STATE_CODE[D.M])
        with m.Elif(entry.state == SFState.E):
            m.d.comb += [st.eq(STATE_CODE[D.E]), maybe_m.eq(1)]
        with m.Else():
            m.d.comb += st.eq(STATE_CODE[D.S])
    with m.Else():
        m.d.comb += st.eq(STATE_CODE[D.I])
    return st, maybe_m


# the snoops an S line answers without a probe or a change (the snoop table's (S, op) rows that
# keep S, send no data and leave the copies their read permission): SNP_RES streams them


def keeps_s(m, opcode):
    """(keeps, response): the snoop ``opcode`` leaves an S line as it is, and what it answers."""
    keeps, keep_rsp = Signal(), Signal(Rsp, init=Rsp.RspSHitSE)
    with m.Switch(opcode):
        for o in Snp:
            rsp_, nxt_, data_ = SNOOP_TABLE[(D.S, o)]
            if rsp_ is not STALL and nxt_ is D.S and not data_ and \
                    INTERNAL_PERMISSION.get(D.S, Perm.NONE) is not Perm.NONE:
                with m.Case(o):
                    m.d.comb += [keeps.eq(1), keep_rsp.eq(rsp_)]
    return keeps, keep_rsp


def legal_snoop(opcode):
    """The snoop ``opcode`` is one CXL defines (``H2DReqOpcode``: SnpData, SnpInv, SnpCur), not a reserved
    encoding: the engine (SNP_RES) and the side path drop the others."""
    return Cat(opcode == o for o in Snp).any()


# the write-back of a line the device gives up, by the state it leaves (the model's evictions): with its
# data, and without (an E line's CleanEvictNoData, the CPU eviction's variant)
_WRITE_BACK = ((D.M, Req.DirtyEvict, Req.DirtyEvict), (D.E, Req.CleanEvict, Req.CleanEvictNoData),
               (D.S, Req.CleanEvictNoData, Req.CleanEvictNoData))


def write_back(m, state, no_data=0):
    """(request, its start state code) that writes back a line in device state code ``state`` (M, E or
    S), the start state from ``REQUEST_START``; ``no_data``: an E line without its data."""
    code, start = Signal(Req, init=Req.CleanEvictNoData), Signal(STATE_BITS)
    with m.Switch(state):
        for st, with_data, without in _WRITE_BACK:
            with m.Case(STATE_CODE[st]):
                m.d.comb += [code.eq(Mux(no_data, without, with_data)),
                             start.eq(Mux(no_data, STATE_CODE[REQUEST_START[(without, st)]],
                                          STATE_CODE[REQUEST_START[(with_data, st)]]))]
    return code, start
