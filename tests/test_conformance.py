"""Rules of the CXL specification text, checked against the golden model, each test written from the
specification's own wording (cited per test).  Both revisions read here say the same thing for every
rule below (CXL 1.1 and CXL 3.x section/table numbers are given); CXL 2.0 sits between them.  The RTL
checks of the same rules are in tests/test_rtl_link_rx.py (packing rules, INIT.Param) and
tests/test_races.py (replayed against the RTL DCOH by tests/test_rtl_dcoh.py).  docs/conformance.md
lists every rule the project implements and where it is checked.
"""

import pytest

from cxl.messages import Channel, D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp
from models import flit as F
from models.dcoh import ProtocolError
from models.flit import Direction, FlitError, Unpacker, control, decode_control, encode_control, seal
from models.link import Msg
from cxl.coherence import REQUEST_START, SNOOP_TABLE, STALL, DevState
from scenario import Scenario

L = 0x10

# CXL 1.1 Table 19 "Mapping of Host to Device Requests & Responses" = CXL 3.x Table 3-26 "CXL.cache --
# Mapping of H2D Requests to D2H Responses": the X marks, row by row, typed in from the table (not
# taken from the model, which is what is checked).
TABLE_3_26 = {
    Snp.SnpData: {Rsp.RspIHitI, Rsp.RspSHitSE, Rsp.RspSFwdM, Rsp.RspIFwdM},
    Snp.SnpInv: {Rsp.RspIHitI, Rsp.RspIHitSE, Rsp.RspIFwdM},
    Snp.SnpCur: {Rsp.RspIHitI, Rsp.RspVHitV, Rsp.RspSHitSE, Rsp.RspSFwdM, Rsp.RspIFwdM, Rsp.RspVFwdV},
}


# ---------------------------------------------------------------- 1. INIT.Param (control flit)
def test_init_param_llr_wrap_value_is_payload_31_24():
    """CXL 1.1 Table 42 / CXL 3.x Table 4-10, INIT.Param (LLCTRL 1100b, SubType 1000b): payload 3:0
    Interconnect Version, 7:4, 12:8 and 23:13 RSVD, 31:24 "LLR Wrap Value: Value after which LLR
    sequence counter should wrap to 0".  The payload starts at slot 0 byte 8 (CXL 3.x Figure 4-35,
    "Payload[7:0]" in byte 8), so payload bits 31:24 are slot 0 byte 11."""
    flit = encode_control(control("INIT.Param", llr_wrap=0xA5)).to_bytes(64, "little")
    assert flit[11] == 0xA5
    assert flit[8] & 0x0F == 0b0010                  # Interconnect Version: CXL 2.0 and above
    assert flit[9] == 0 and flit[10] == 0            # payload 23:8 reserved
    # Built from the table by hand: Type 1 (byte 0 bit 0), CTL_FMT 000b, LLCTRL 1100b in byte 4 bits
    # 3:0, SubType 1000b in byte 4 bits 7:4, version in byte 8, wrap value in byte 11.
    by_hand = bytearray(64)
    by_hand[0], by_hand[4], by_hand[8], by_hand[11] = 0x01, 0x8C, 0x02, 0x3C
    ctl = decode_control(int.from_bytes(by_hand, "little"))
    assert ctl.kind == "INIT.Param" and ctl.fields == {"version": 2, "llr_wrap": 0x3C}
    by_hand[9] = 0x01                                # payload bit 8: RSVD in the table
    with pytest.raises(FlitError, match="reserved"):
        decode_control(int.from_bytes(by_hand, "little"))


# ---------------------------------------------------------------- 2./3. snoop responses (Table 3-26)
@pytest.mark.parametrize("snoop", list(Snp), ids=lambda s: s.name)
def test_every_device_state_answers_with_a_response_table_3_26_allows(snoop):
    """CXL 1.1 Table 19 / CXL 3.x Table 3-26: the X marks are "valid D2H response opcodes permitted for
    each H2D snoop request type".  Every state of the device, stable or transient, answers each snoop
    with one of them (STALL holds the snoop; it answers later from the state it then has)."""
    bad = {state.name: SNOOP_TABLE[(state, snoop)][0].name for state in DevState
           if SNOOP_TABLE[(state, snoop)][0] is not STALL
           and SNOOP_TABLE[(state, snoop)][0] not in TABLE_3_26[snoop]}
    assert not bad, f"{snoop.name}: answers Table 3-26 does not allow: {bad}"


@pytest.mark.parametrize("state", [DevState.SI_A, DevState.EI_A], ids=lambda s: s.name)
def test_pending_clean_eviction_answers_as_a_device_without_the_line(state):
    """CXL 1.1 §3.2.4.1.14 / CXL 3.x §3.2.4.2.14 (CleanEvict) and §3.2.4.1.16 / §3.2.4.2.16
    (CleanEvictNoData): an eviction guarantees "that the device no longer contains any cached copies of
    this line", and a snoop after it must make later write-back data Bogus (CXL 1.1 §3.2.5.4, CXL 3.x
    §3.2.5.4).  RspIHitI is the one dataless response that says the line is not in the device and that
    Table 3-26 allows for every snoop: SnpData and SnpCur must not be answered RspIHitSE."""
    for snoop in (Snp.SnpData, Snp.SnpCur):
        rsp, nxt, data = SNOOP_TABLE[(state, snoop)]
        assert (rsp, nxt, data) == (Rsp.RspIHitI, DevState.II_A, 0), (state.name, snoop.name)
    rsp, nxt, data = SNOOP_TABLE[(state, Snp.SnpInv)]
    assert rsp in TABLE_3_26[Snp.SnpInv] and nxt is DevState.II_A and not data


def _host_with_snoop_in_flight(snoop):
    """A scenario whose host has just sent ``snoop`` to dev0 (returns it and the snoop message)."""
    s = Scenario()
    if snoop is Snp.SnpInv:              # dev0 shares the line, dev1 wants to own it
        s.cpu(0, 0, "load", L)
        s.drain()
        s.cpu(1, 0, "store", L, value=2)
        s.deliver(1, Channel.D2H_REQ, Req.RdOwn)
    else:                                # dev0 owns it; dev1 reads it (SnpData) or reads it once (SnpCur)
        s.cpu(0, 0, "store", L, value=1)
        s.drain()
        kind, op = ("load", Req.RdShared) if snoop is Snp.SnpData else ("rdcurr", Req.RdCurr)
        s.cpu(1, 0, kind, L)
        s.deliver(1, Channel.D2H_REQ, op)
    msg = s.sys.links[0].flight[False][-1][1]
    assert msg.op is snoop
    return s, msg


@pytest.mark.parametrize("rsp", list(Rsp), ids=lambda r: r.name)
@pytest.mark.parametrize("snoop", list(Snp), ids=lambda s: s.name)
def test_host_accepts_exactly_the_responses_table_3_26_allows(snoop, rsp):
    """CXL 1.1 Table 19 / CXL 3.x Table 3-26 from the host's side: an X is a response the host must
    accept for that snoop; a blank is one it must reject as a protocol error."""
    s, msg = _host_with_snoop_in_flight(snoop)
    answer = Msg(Channel.D2H_RSP, rsp, msg.uid, L)
    if rsp in TABLE_3_26[snoop]:
        try:
            s.sys.host.on_d2h_rsp(0, answer, 0)
        except Exception as e:           # noqa: BLE001 -- a later check may object (a response that does
            # not match the device's real state breaks an invariant); the legality check must not
            assert "does not allow" not in str(e), e
    else:
        with pytest.raises(ProtocolError, match=f"answered {snoop.name} .* with {rsp.name}, which that snoop "
                                                f"does not allow"):
            s.sys.host.on_d2h_rsp(0, answer, 0)


# ---------------------------------------------------------------- 4. CleanEvict is for E lines only
def test_clean_evict_only_from_exclusive():
    """CXL 1.1 §3.2.4.1.14 / CXL 3.x §3.2.4.2.14: CleanEvict "is a request to the Host to evict a full
    64 byte Exclusive cache line from the device" (CXL 3.x Table 3-28 allows it from E only); a clean
    line in S leaves with CleanEvictNoData (§3.2.4.1.16 / §3.2.4.2.16)."""
    assert {state for (req, state) in REQUEST_START if req is Req.CleanEvict} == {DevState.E}
    assert {state for (req, state) in REQUEST_START if req is Req.CleanEvictNoData} == {DevState.S, DevState.E}


@pytest.mark.parametrize("variant", (0, 1))
def test_shared_line_eviction_sends_clean_evict_no_data(variant):
    """As above, through the device: an S line evicted in either opcode variant goes out as
    CleanEvictNoData (the variant only chooses between CleanEvict and CleanEvictNoData for E)."""
    s = Scenario()
    s.cpu(0, 0, "load", L)
    s.cpu(1, 0, "load", L)
    s.drain()
    assert s.state(0, 0, L)[0] == "S"
    s.cpu(0, 0, "evict", L, variant=variant)
    assert s.find(0, Channel.D2H_REQ, Req.CleanEvictNoData) is not None
    assert s.find(0, Channel.D2H_REQ, Req.CleanEvict) is None
    s.drain()
    assert s.state(0, 0, L) == ("I", None)


# ---------------------------------------------------------------- 5. 68B flit packing rules
UP, DOWN = Direction.UPSTREAM, Direction.DOWNSTREAM
EMPTY = {"slot0": 0, "slot1": 1, "slot2": 1, "slot3": 1}      # H0, G1, G1, G1 with nothing valid


def _hdr(direction, uqid):
    chan = direction.data_channel
    fields = dict(uqid=uqid, chunk_valid=0, poison=0, bogus=0) if direction is UP else \
        dict(cqid=uqid, chunk_valid=0, poison=0, go_err=0)
    return F.CODECS[chan].encode(fields)


def _rsp(direction):
    chan = direction.channels[1]
    if direction is UP:
        return F.CODECS[chan].encode(opcode=Rsp.RspIHitI, uqid=5)
    from cxl.messages import H2DRspOpcode, RspPre
    return F.CODECS[chan].encode(opcode=H2DRspOpcode.GO, rsp_data=1, rsp_pre=RspPre.LocalMiss, cqid=5)


def _slot(direction, kind, code, msgs):
    """Message-area bits of a format with ``msgs`` = {position: message integer}."""
    fmt = F.SLOT_FORMATS[direction, kind, code]
    return sum(v << fmt.fields[pos][1] for pos, v in msgs.items())


def _flit(header, slots, chunks=()):
    """Sealed protocol flit: header fields, {slot: message bits}, and data chunks {slot: 128-bit}."""
    value = F.encode_header(dict(EMPTY, **header))
    for s, bits in slots.items():
        value |= bits << (F.HEADER_BITS if s == 0 else F.SLOT_BITS * s)
    for s in chunks:
        value |= (0x1111 * (s + 1)) << (F.SLOT_BITS * s)
    return seal(value)


def _rejects(direction, flits, match):
    rx = Unpacker(direction)
    for f in flits[:-1]:
        rx.receive(f)
    with pytest.raises(FlitError, match=match) as e:
        rx.receive(flits[-1])
    return e.value


def test_mdh_slot_needs_more_than_one_data_header():
    """CXL 1.1 / CXL 3.x §4.2.5: "A MDH slot format must be chosen by the Tx only if there is more than 1
    valid Data Header to pack in that slot."  Upstream G3 (4 D2H Data Header) with one header in it."""
    bad = _flit({"sz": 1, "slot1": 3, "slot2": 0, "slot3": 0}, {1: _slot(UP, "G", 3, {0: _hdr(UP, 1)})},
                chunks=(2, 3))
    err = _rejects(UP, [bad], "MDH")
    assert "4.2.5" in err.ref
    good = _flit({"sz": 1, "slot1": 3, "slot2": 0, "slot3": 0},
                 {1: _slot(UP, "G", 3, {0: _hdr(UP, 1), 1: _hdr(UP, 2)})}, chunks=(2, 3))
    Unpacker(UP).receive(good)


def test_at_most_one_data_header_in_a_flit_without_mdh():
    """CXL 1.1 / CXL 3.x §4.2.5: "For non-MDH containing flits, there can be at most 1 valid Data Header
    in that flit."  Downstream H1 (H2D Data Header + 2 Rsp) in slot 0 and G2 (Req + Data Header + Rsp)
    in slot 3, a header in each (slots 1-2 carry the first header's chunks)."""
    bad = _flit({"sz": 1, "slot0": 1, "slot1": 0, "slot2": 0, "slot3": 2},
                {0: _slot(DOWN, "H", 1, {0: _hdr(DOWN, 1)}), 3: _slot(DOWN, "G", 2, {1: _hdr(DOWN, 2)})},
                chunks=(1, 2))
    _rejects(DOWN, [bad], "Data Header")


def test_mdh_flit_carries_no_other_data_header():
    """CXL 1.1 / CXL 3.x §4.2.5: "Also, a MDH containing flit cannot be packed with another valid Data
    Header in the same flit."  Downstream H3 (4 H2D Data Header) with two headers in slot 0 (slots 1-2
    carry chunks), and G2 with a third header in slot 3."""
    bad = _flit({"sz": 1, "slot0": 3, "slot1": 0, "slot2": 0, "slot3": 2},
                {0: _slot(DOWN, "H", 3, {0: _hdr(DOWN, 1), 1: _hdr(DOWN, 2)}),
                 3: _slot(DOWN, "G", 2, {1: _hdr(DOWN, 3)})}, chunks=(1, 2))
    _rejects(DOWN, [bad], "Data Header")


def test_slot_after_a_data_header_carries_its_data():
    """CXL 1.1 / CXL 3.x §4.2.5: "If a valid Data Header is packed in a given slot, the next available
    slot for data transfer (Slot 1, Slot 2, Slot 3 or an all-data flit) will be guaranteed to have data
    associated with the header."  Upstream: a header in slot 1 (G2) and slot 2 a G1 (no data)."""
    bad = _flit({"sz": 1, "slot1": 2, "slot2": 1, "slot3": 0}, {1: _slot(UP, "G", 2, {1: _hdr(UP, 1)})},
                chunks=(3,))
    err = _rejects(UP, [bad], "Slot2")
    assert "data" in str(err) and "4.2.5" in err.ref
    # With one chunk rolling over, slot 1 is taken by it; a header in slot 0 then owns slot 2.
    first = _flit({"sz": 1, "slot0": 0, "slot1": 0, "slot2": 0, "slot3": 0},
                  {0: _slot(UP, "H", 0, {0: _hdr(UP, 1)})}, chunks=(1, 2, 3))      # 1 chunk owed after
    bad = _flit({"sz": 1, "slot0": 0, "slot1": 0, "slot2": 1, "slot3": 0},
                {0: _slot(UP, "H", 0, {0: _hdr(UP, 2)})}, chunks=(1, 3))
    _rejects(UP, [first, bad], "Slot2")
    good = _flit({"sz": 1, "slot0": 0, "slot1": 0, "slot2": 0, "slot3": 0},
                 {0: _slot(UP, "H", 0, {0: _hdr(UP, 2)})}, chunks=(1, 2, 3))
    rx = Unpacker(UP)
    rx.receive(first)
    rx.receive(good)


@pytest.mark.parametrize("direction, kind, code, positions", [
    (UP, "H", 0, (2,)),          # H0: D2H Rsp in the second Rsp position, first empty
    (UP, "G", 3, (1, 2)),        # G3: headers 2 and 3, header 1 empty
    (DOWN, "G", 1, (3,)),        # G1: the fourth H2D Rsp alone
], ids=["up-H0-rsp", "up-G3-hdr", "down-G1-rsp"])
def test_messages_in_a_slot_are_tightly_packed(direction, kind, code, positions):
    """CXL 1.1 / CXL 3.x §4.2.5: "Valid messages within a given slot must be tightly packed.  Which
    means, if a slot contains multiple possible locations for a given message, the Tx must pack the
    message in the first available location before advancing to the next available location."  A slot
    whose first position of a message type is empty while a later one is filled breaks it."""
    fmt = F.SLOT_FORMATS[direction, kind, code]
    chan = fmt.fields[positions[0]][0]
    msg = (lambda i: _hdr(direction, i)) if chan is direction.data_channel else (lambda i: _rsp(direction))
    bits = _slot(direction, kind, code, {p: msg(p) for p in positions})
    data = chan is direction.data_channel
    s = 0 if kind == "H" else 1
    header = {"sz": int(data), f"slot{s}": code}
    if data:
        header.update(slot2=0, slot3=0)
    _rejects(direction, [_flit(header, {s: bits}, chunks=(2, 3) if data else ())], "tightly packed")


def test_every_rule_error_names_its_specification_section():
    """A FlitError carries the specification reference of the rule it names (used by the decoder)."""
    err = _rejects(UP, [_flit({"rsvd1": 1}, {})], "reserved")
    assert err.ref.startswith("CXL")
