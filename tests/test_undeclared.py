"""Any (state, event) pair the model does not declare raises an error naming both; a peer that breaks
the protocol gets an error naming the message."""

import pytest

from cxl.messages import Channel, D2HReqOpcode as Req, GOState, H2DRspOpcode as HRsp, D2HRspOpcode as Rsp
from models.dcoh import ProtocolError
from models.link import Msg
from cxl.coherence import UndeclaredTransition, SNOOP_TABLE, DevState
from cxl.messages import H2DReqOpcode
from scenario import Scenario


def test_every_state_answers_every_snoop():
    assert {(s, n) for s in DevState for n in H2DReqOpcode} == set(SNOOP_TABLE)


def test_device_rejects_undeclared_response():
    s = Scenario()
    s.cpu(0, 0, "store", 0x10, value=1)           # RdOwn pending in IM_AD
    s.deliver(0, Channel.D2H_REQ, Req.RdOwn)
    bad = Msg(Channel.H2D_RSP, HRsp.GO, 0, 0x10, rsp_data=GOState.Shared.value)   # GO-S to a RdOwn
    with pytest.raises(UndeclaredTransition, match="state IM_AD on event GO-S"):
        s.dev(0).on_h2d_rsp(bad, 0)


def test_device_rejects_unknown_cqid():
    s = Scenario()
    with pytest.raises(ProtocolError, match="CQID 7, which is not in use"):
        s.dev(0).on_h2d_data(Msg(Channel.H2D_DATA, None, 7, 0x10, data=0), 0)


@pytest.mark.parametrize("op", [Req.WrCur, Req.WOWrInv, Req.WOWrInvF, Req.CacheFlushed])
def test_host_rejects_unserved_opcodes(op):
    s = Scenario()
    with pytest.raises(UndeclaredTransition, match=f"event {op.name}"):
        s.sys.host.on_d2h_req(0, Msg(Channel.D2H_REQ, op, 0, 0x10), 0)


def test_host_rejects_illegal_snoop_answer():
    s = Scenario()
    s.cpu(0, 0, "load", 0x10)
    s.drain()
    s.cpu(1, 0, "store", 0x10, value=2)
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)        # SnpInv to dev0 now in flight
    snoop = s.sys.links[0].flight[False][-1][1]
    with pytest.raises(ProtocolError, match="answered SnpInv .* with RspSHitSE"):
        s.sys.host.on_d2h_rsp(0, Msg(Channel.D2H_RSP, Rsp.RspSHitSE, snoop.uid, 0x10), 0)
