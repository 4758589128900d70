"""Coherence states, their access permissions, and every declared transition of a CXL.cache device and
of the host home agent; the D2H responses the specification allows to each snoop.

The tables here are behaviour, not documentation of it: the golden device and host (models/dcoh.py,
models/host.py) look their transitions up in them, the RTL DCOH (hdl/dcoh/dcoh.py) turns them into logic
at elaboration, and ``make table`` prints them (docs/protocol.md).  docs/conformance.md gives the
specification section of each rule.  A (state, event) pair that is not declared
raises :class:`UndeclaredTransition` naming both.

Device line states (the DCOH's view of one line, as the host sees the device):
  stable      I, S, E, M
  requests    X Y _ AD : request from X to Y pending, waiting for GO (A) and data (D)
              X Y _ D  : GO seen, data still to come;  X Y _ A : data (or no data needed) seen, GO pending
  evictions   SI_A, EI_A, MI_A : CleanEvict(NoData)/DirtyEvict sent, waiting for the host's answer
              II_A             : the line was snooped away while its eviction waited (data will be bogus)
  uncached    IC_D (RdCurr waits for data), IW_A (ItoMWr waits for GO_WritePull),
              IV_P / IV_A (WrInv waits for WritePull / for GO), IF_A (CLFlush waits for GO-I)

# Ref: docs/sources.md §1.2-1.5 (opcodes, snoop-response table), §1.1 (ordering),
#      ISA transient states (ISAD, IMAD, SMAD, MIA, SIA, IIA) cited there.
"""

import enum

from cxl.messages import D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp, GOState

__all__ = [
    "Perm", "MESI", "DevState", "INTERNAL_PERMISSION", "UndeclaredTransition", "STALL",
    "SNOOP_TABLE", "SNOOP_RESPONSES", "snoop_transition", "REQUEST_START", "RESPONSE_TABLE", "response_transition",
    "HOST_TABLE", "GO_OF", "GRANTED",
]


class UndeclaredTransition(RuntimeError):
    """A (state, event) pair reached that the model does not declare."""

    def __init__(self, where, state, event):
        super().__init__(f"{where}: undeclared transition: state {getattr(state, 'name', state)} "
                         f"on event {getattr(event, 'name', event)}")
        self.state, self.event = state, event


class Perm(enum.IntEnum):
    """Access permission of a cached copy (gem5 SLICC style); SWMR is checked over these."""
    NONE = 0
    READ = 1
    READWRITE = 2


class MESI(enum.Enum):
    """Internal-cache states.  E -> M is silent (a store to an E copy needs no message)."""
    I = (0, Perm.NONE)
    S = (1, Perm.READ)
    E = (2, Perm.READWRITE)
    M = (3, Perm.READWRITE)

    # Members are compared by identity, so the identity hash is consistent with equality, and much
    # cheaper than Enum's hash of the name (the golden model hashes states in its hot loop).
    __hash__ = object.__hash__

    @property
    def perm(self):
        return self.value[1]


class DevState(enum.Enum):
    I = "I"; S = "S"; E = "E"; M = "M"
    IS_AD = "IS_AD"; IS_D = "IS_D"; IS_A = "IS_A"
    IM_AD = "IM_AD"; IM_D = "IM_D"; IM_A = "IM_A"
    SM_AD = "SM_AD"; SM_D = "SM_D"; SM_A = "SM_A"
    SI_A = "SI_A"; EI_A = "EI_A"; MI_A = "MI_A"; II_A = "II_A"
    IC_D = "IC_D"; IW_A = "IW_A"; IV_P = "IV_P"; IV_A = "IV_A"; IF_A = "IF_A"

    __hash__ = object.__hash__      # as MESI

    @property
    def stable(self):
        return self in _STABLE


_STABLE = {DevState.I, DevState.S, DevState.E, DevState.M}

# The most permission the device's internal copies may have in each device state (none in any state not
# listed): a device state grants its internal caches at most what the host granted the device.
INTERNAL_PERMISSION = {
    DevState.I: Perm.NONE, DevState.S: Perm.READ, DevState.E: Perm.READWRITE, DevState.M: Perm.READWRITE,
    DevState.SM_AD: Perm.READ, DevState.SM_A: Perm.READ, DevState.SM_D: Perm.READ,
}

# A snoop that hits a line whose GO arrived but whose data has not is held (the H2D Req channel may be
# back-pressured); it proceeds when the data arrives, which needs no D2H progress (facts §1.1).
STALL = "Stall"

D = DevState
# (state, snoop) -> (response, next state, data returned).  Ref: docs/sources.md §1.5 table for I/S/E/M.
# Decisions where the facts are unconfirmed are listed in docs/protocol.md ("Decisions").
SNOOP_TABLE = {
    (D.I, Snp.SnpData): (Rsp.RspIHitI, D.I, 0),
    (D.I, Snp.SnpInv): (Rsp.RspIHitI, D.I, 0),
    (D.I, Snp.SnpCur): (Rsp.RspIHitI, D.I, 0),
    (D.S, Snp.SnpData): (Rsp.RspSHitSE, D.S, 0),
    (D.S, Snp.SnpInv): (Rsp.RspIHitSE, D.I, 0),
    (D.S, Snp.SnpCur): (Rsp.RspVHitV, D.S, 0),
    (D.E, Snp.SnpData): (Rsp.RspSHitSE, D.S, 0),
    (D.E, Snp.SnpInv): (Rsp.RspIHitSE, D.I, 0),
    (D.E, Snp.SnpCur): (Rsp.RspVHitV, D.E, 0),
    (D.M, Snp.SnpData): (Rsp.RspSFwdM, D.S, 1),
    (D.M, Snp.SnpInv): (Rsp.RspIFwdM, D.I, 1),
    (D.M, Snp.SnpCur): (Rsp.RspVFwdV, D.M, 1),     # decision: SnpCur leaves M in M [U in facts]
}
for _s in (D.IS_AD, D.IS_A, D.IM_AD, D.IM_A, D.II_A, D.IC_D, D.IW_A, D.IV_P, D.IV_A, D.IF_A):
    # No GO seen yet (or an uncached request): the host has not serialized this device's request,
    # so the device answers from the state the host knows, I.
    for _snp in Snp:
        SNOOP_TABLE[(_s, _snp)] = (Rsp.RspIHitI, _s, 0)
for _s in (D.IS_D, D.IM_D, D.SM_D):
    for _snp in Snp:
        SNOOP_TABLE[(_s, _snp)] = (STALL, _s, 0)
for _s, _inv in ((D.SM_AD, D.IM_AD), (D.SM_A, D.IM_A)):
    # Upgrade pending, GO not seen: the device is still a sharer.
    SNOOP_TABLE[(_s, Snp.SnpData)] = (Rsp.RspSHitSE, _s, 0)
    SNOOP_TABLE[(_s, Snp.SnpInv)] = (Rsp.RspIHitSE, _inv, 0)
    SNOOP_TABLE[(_s, Snp.SnpCur)] = (Rsp.RspVHitV, _s, 0)
for _s in (D.SI_A, D.EI_A):
    # Clean eviction under way: the internal copies are already gone ("the device no longer contains
    # any cached copies of this line", CXL 1.1 §3.2.4.1.14 / 3.x §3.2.4.2.14), so the device answers as
    # one without the line: RspIHitI, the one such response Table 3-26 allows for SnpData and SnpCur;
    # RspIHitSE ("hit in a clean state ... now invalid") for SnpInv, which allows it.  Any snoop makes
    # a later write-back Bogus (CXL 1.1 §3.2.5.4): II_A.
    SNOOP_TABLE[(_s, Snp.SnpData)] = (Rsp.RspIHitI, D.II_A, 0)
    SNOOP_TABLE[(_s, Snp.SnpInv)] = (Rsp.RspIHitSE, D.II_A, 0)
    SNOOP_TABLE[(_s, Snp.SnpCur)] = (Rsp.RspIHitI, D.II_A, 0)
SNOOP_TABLE[(D.MI_A, Snp.SnpData)] = (Rsp.RspIFwdM, D.II_A, 1)
SNOOP_TABLE[(D.MI_A, Snp.SnpInv)] = (Rsp.RspIFwdM, D.II_A, 1)
SNOOP_TABLE[(D.MI_A, Snp.SnpCur)] = (Rsp.RspVFwdV, D.MI_A, 1)


# The D2H responses the specification allows to each snoop: CXL 1.1 Table 19 = CXL 3.x Table 3-26
# ("CXL.cache -- Mapping of H2D Requests to D2H Responses").  The host rejects any other answer.
SNOOP_RESPONSES = {
    Snp.SnpData: frozenset({Rsp.RspIHitI, Rsp.RspSHitSE, Rsp.RspSFwdM, Rsp.RspIFwdM}),
    Snp.SnpInv: frozenset({Rsp.RspIHitI, Rsp.RspIHitSE, Rsp.RspIFwdM}),
    Snp.SnpCur: frozenset({Rsp.RspIHitI, Rsp.RspVHitV, Rsp.RspSHitSE, Rsp.RspSFwdM, Rsp.RspIFwdM,
                           Rsp.RspVFwdV}),
}


def snoop_transition(state, snoop):
    try:
        return SNOOP_TABLE[(state, snoop)]
    except KeyError:
        raise UndeclaredTransition("device snoop handler", state, snoop) from None


# Which transient state a device request starts in, from the line's state at issue.  CleanEvict is for
# an Exclusive line only ("evict a full 64 byte Exclusive cache line", CXL 1.1 §3.2.4.1.14, CXL 3.x
# §3.2.4.2.14 and Table 3-28); a clean S line leaves with CleanEvictNoData.
REQUEST_START = {
    (Req.RdShared, D.I): D.IS_AD,
    (Req.RdAny, D.I): D.IS_AD,
    (Req.RdOwn, D.I): D.IM_AD,
    (Req.RdOwn, D.S): D.SM_AD,
    (Req.RdOwnNoData, D.I): D.IM_A,
    (Req.RdOwnNoData, D.S): D.SM_A,
    (Req.CleanEvictNoData, D.S): D.SI_A,
    (Req.CleanEvictNoData, D.E): D.EI_A,
    (Req.CleanEvict, D.E): D.EI_A,
    (Req.DirtyEvict, D.M): D.MI_A,
    (Req.RdCurr, D.I): D.IC_D,
    (Req.ItoMWr, D.I): D.IW_A,
    (Req.WrInv, D.I): D.IV_P,
    (Req.CLFlush, D.I): D.IF_A,
}

# Events on the request side: "GO-S", "GO-E", "GO-I" (a GO carrying that state), "Data" (H2D Data),
# "GO_WritePull", "GO_WritePull_Drop", "WritePull".
# (state, event) -> (next state, action).  Actions: None; "send_data" (D2H Data, real);
# "send_bogus" (D2H Data with Bogus=1).  The request completes when the next state is stable;
# GRANTED stands for the state the GO granted (S or E, for RdShared/RdAny that saw GO before data).
GRANTED = "granted"
RESPONSE_TABLE = {
    (D.IS_AD, "GO-S"): (D.IS_D, None), (D.IS_AD, "GO-E"): (D.IS_D, None),
    (D.IS_AD, "Data"): (D.IS_A, None),
    (D.IS_D, "Data"): (GRANTED, None),
    (D.IS_A, "GO-S"): (D.S, None), (D.IS_A, "GO-E"): (D.E, None),
    (D.IM_AD, "GO-E"): (D.IM_D, None), (D.IM_AD, "Data"): (D.IM_A, None),
    (D.IM_D, "Data"): (D.E, None),
    (D.IM_A, "GO-E"): (D.E, None),
    (D.SM_AD, "GO-E"): (D.SM_D, None), (D.SM_AD, "Data"): (D.SM_A, None),
    (D.SM_D, "Data"): (D.E, None),
    (D.SM_A, "GO-E"): (D.E, None),
    (D.SI_A, "GO-I"): (D.I, None),          # SI_A is CleanEvictNoData's: GO-I only (CXL 3.x Table 3-23)
    (D.EI_A, "GO-I"): (D.I, None), (D.EI_A, "GO_WritePull_Drop"): (D.I, None),
    (D.EI_A, "GO_WritePull"): (D.I, "send_data"),
    (D.MI_A, "GO_WritePull"): (D.I, "send_data"),
    (D.II_A, "GO-I"): (D.I, None), (D.II_A, "GO_WritePull_Drop"): (D.I, None),
    (D.II_A, "GO_WritePull"): (D.I, "send_bogus"),
    (D.IC_D, "Data"): (D.I, None),
    (D.IW_A, "GO_WritePull"): (D.I, "send_data"),
    (D.IV_P, "WritePull"): (D.IV_A, "send_data"),
    (D.IV_A, "GO-I"): (D.I, None),
    (D.IF_A, "GO-I"): (D.I, None),
}


def response_transition(state, event):
    try:
        return RESPONSE_TABLE[(state, event)]
    except KeyError:
        raise UndeclaredTransition("device request tracker", state, event) from None


GO_OF = {GOState.Shared: "GO-S", GOState.Exclusive: "GO-E", GOState.Invalid: "GO-I"}

# Host home agent: what each request makes the host do.  "snoop" names the snoop sent and to whom
# ("owner": the one device other than the requester holding E/M; "others": every other holder),
# "grant" the H2D response, "data" whether H2D Data carries the line, "requester" the state the
# host records for the requester afterwards.  "RdAny" grants E when nobody else holds the line.
HOST_TABLE = {
    Req.RdShared: dict(snoop=(Snp.SnpData, "owner"), grant="GO-S", data=True, requester="S"),
    Req.RdAny: dict(snoop=(Snp.SnpData, "owner"), grant="GO-E if no other holder else GO-S", data=True,
                    requester="E or S"),
    Req.RdOwn: dict(snoop=(Snp.SnpInv, "others"), grant="GO-E", data=True, requester="E"),
    Req.RdOwnNoData: dict(snoop=(Snp.SnpInv, "others"), grant="GO-E", data=False, requester="E"),
    Req.RdCurr: dict(snoop=(Snp.SnpCur, "owner"), grant="(none: data only)", data=True,
                     requester="unchanged"),
    Req.ItoMWr: dict(snoop=(Snp.SnpInv, "others"), grant="GO_WritePull, then D2H Data", data=False,
                     requester="I"),
    Req.WrInv: dict(snoop=(Snp.SnpInv, "others"), grant="WritePull, D2H Data, then GO-I", data=False,
                    requester="I"),
    Req.CLFlush: dict(snoop=(Snp.SnpInv, "others"), grant="GO-I", data=False, requester="I"),
    Req.CleanEvict: dict(snoop=None, grant="GO_WritePull_Drop (memory is current)", data=False,
                         requester="I"),
    Req.DirtyEvict: dict(snoop=None, grant="GO_WritePull, then D2H Data (Bogus if snooped away)",
                         data=False, requester="I"),
    Req.CleanEvictNoData: dict(snoop=None, grant="GO-I", data=False, requester="I"),
}
