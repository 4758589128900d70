"""The message definitions: widths from the facts, codec round trips, clear errors on bad input."""

import pytest
from hypothesis import given, strategies as st

from cxl.messages import (CODECS, Channel, D2HReqOpcode, D2HRspOpcode, H2DReqOpcode, H2DRspOpcode, GOState,
                          MessageCodec, D2HReq, H2DRsp)
from models.link import Msg, encode, decode


def test_widths_match_cxl2_68b_flit():
    # Ref: docs/sources.md §1.6 totals
    assert {c: CODECS[c].width for c in Channel} == {
        Channel.D2H_REQ: 79, Channel.D2H_RSP: 20, Channel.D2H_DATA: 17,
        Channel.H2D_REQ: 64, Channel.H2D_RSP: 32, Channel.H2D_DATA: 24}


def test_encodings_spot_check():
    assert D2HReqOpcode.DirtyEvict.value == 0b01010 and D2HReqOpcode.CacheFlushed.value == 0b10000
    assert D2HRspOpcode.RspVFwdV.value == 0b10110 and H2DReqOpcode.SnpCur.value == 0b011
    assert H2DRspOpcode.GO_WritePull_Drop.value == 0b1000 and GOState.Modified.value == 0b0110
    # valid is bit 0, opcode follows: a D2H Req RdOwn with everything else zero
    assert CODECS[Channel.D2H_REQ].encode(opcode=D2HReqOpcode.RdOwn, cqid=0, nt=0, addr=0) == (0b00010 << 1) | 1


@st.composite
def fields(draw, codec):
    out = {}
    for name, _, width, enum_cls in codec.fields:
        if name == "valid" or name.startswith("rsvd"):
            continue
        out[name] = draw(st.sampled_from(list(enum_cls))) if enum_cls else draw(st.integers(0, (1 << width) - 1))
    return out


@pytest.mark.parametrize("chan", list(Channel))
@given(data=st.data())
def test_codec_round_trip(chan, data):
    codec = CODECS[chan]
    f = data.draw(fields(codec))
    value = codec.encode(f)
    assert 0 <= value < (1 << codec.width)
    back = codec.decode(value)
    assert back["valid"] == 1
    assert {k: back[k] for k in f} == f


def test_codec_agrees_with_amaranth_layout():
    # The codec's packing must be the Amaranth layout's own: compare with Layout.const.
    from amaranth.lib import data
    f = dict(valid=1, opcode=H2DRspOpcode.GO_WritePull, rsp_data=0xABC, rsp_pre=2, cqid=0x123, rsvd0=0)
    const = data.Layout.cast(H2DRsp).const(f)
    assert CODECS[Channel.H2D_RSP].encode(f) == const.as_value().value


def test_codec_errors_name_the_problem():
    c = CODECS[Channel.D2H_REQ]
    with pytest.raises(ValueError, match="cqid.*does not fit"):
        c.encode(opcode=D2HReqOpcode.RdOwn, cqid=4096, nt=0, addr=0)
    with pytest.raises(ValueError, match="field 'addr' missing"):
        c.encode(opcode=D2HReqOpcode.RdOwn, cqid=1, nt=0)
    with pytest.raises(ValueError, match="unknown field"):
        c.encode(opcode=D2HReqOpcode.RdOwn, cqid=1, nt=0, addr=0, bogus=1)
    illegal = (0b11111 << 1) | 1      # opcode 11111 is no D2H request
    with pytest.raises(ValueError, match="opcode.*not a D2HReqOpcode"):
        c.decode(illegal)
    assert c.decode(illegal, strict=False)["opcode"] == 0b11111


@given(st.integers(0, (1 << 46) - 1), st.integers(0, 4095))
def test_model_messages_round_trip(addr, uid):
    for m in (Msg(Channel.D2H_REQ, D2HReqOpcode.ItoMWr, uid, addr),
              Msg(Channel.H2D_REQ, H2DReqOpcode.SnpInv, uid, addr)):
        assert decode(m.chan, encode(m)) == m.replace(data=None)
    m = Msg(Channel.H2D_RSP, H2DRspOpcode.GO, uid, 0, rsp_data=GOState.Exclusive.value)
    assert decode(m.chan, encode(m)) == m
    m = Msg(Channel.D2H_DATA, None, uid, 0, data=None, bogus=True)
    assert decode(m.chan, encode(m)) == m
