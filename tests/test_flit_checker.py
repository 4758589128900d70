"""tb/flit_checker.py: the flit monitor's process, fed flits one by one (``take``) or whole stamped records
with the flits as fields (``take_record``, the batched testbench's way): the same flits give the same
coverage either way, and a broken flit is found in a record too, named with its cycle, device and wire."""

import pytest

from cxl.messages import Channel, D2HRspOpcode, H2DReqOpcode
from models.flit import Direction, Packer, make_msg
from tb.flit_checker import FlitChecker, FlitRuleBroken

# a record as the batched testbench stamps it: some other fields, then each wire's valid bit and flit
UP_VALID, UP_OFF, DOWN_VALID, DOWN_OFF = 1 << 3, 10, 1 << 4, 600
FIELDS = [("up", UP_VALID, UP_OFF, (1 << 528) - 1), ("down", DOWN_VALID, DOWN_OFF, (1 << 528) - 1)]


def _flits():
    """Valid flit sequences of both wires: snoops down, their responses up."""
    down, up = Packer(Direction.DOWNSTREAM), Packer(Direction.UPSTREAM)
    for i in range(12):
        down.push(make_msg(Channel.H2D_REQ, opcode=H2DReqOpcode.SnpData, addr=i << 4, uqid=i))
        up.push(make_msg(Channel.D2H_RSP, opcode=D2HRspOpcode.RspIHitI, uqid=i))
    word = lambda f: int.from_bytes(f, "little")
    return [word(f) for f in up.drain()], [word(f) for f in down.drain()]


def _records(up, down, break_down_at=None):
    """One record per cycle: the flits of both wires side by side while both have one, then one wire."""
    recs = []
    for t in range(max(len(up), len(down))):
        v = 0b101                                # other fields of the record
        if t < len(up):
            v |= UP_VALID | up[t] << UP_OFF
        if t < len(down):
            d = down[t] ^ (1 << 512 if t == break_down_at else 0)     # a CRC bit flipped
            v |= DOWN_VALID | d << DOWN_OFF
        recs.append((100 + t, v))
    return recs


def test_records_give_the_same_coverage_as_flits():
    up, down = _flits()
    one = FlitChecker(batch=5)
    for t in range(max(len(up), len(down))):
        for wire, flits in (("up", up), ("down", down)):
            if t < len(flits):
                one.take(100 + t, 2, wire, flits[t])
    whole = FlitChecker(batch=5, record_fields=FIELDS)
    for t, v in _records(up, down):
        whole.take_record(t, 2, v)
    by_flit, by_record = one.close(), whole.close()
    assert by_flit and by_record == by_flit
    assert sum(n for k, n in by_record.items() if k.startswith("upstream")) >= len(up)


def test_a_broken_flit_in_a_record_is_named():
    up, down = _flits()
    checker = FlitChecker(batch=4, record_fields=FIELDS)
    for t, v in _records(up, down, break_down_at=1):
        checker.take_record(t, 3, v)
    with pytest.raises(FlitRuleBroken) as e:
        checker.close()
    assert (e.value.cycle, e.value.device, e.value.wire) == (101, 3, "down")


def test_bad_record_fields_are_named():
    with pytest.raises(ValueError, match="record field"):
        FlitChecker(record_fields=[("sideways", 1, 0, 1)])
    with pytest.raises(ValueError, match="record field"):
        FlitChecker(record_fields=[("up", 0b11, 0, 1)])
    checker = FlitChecker()
    with pytest.raises(RuntimeError, match="without record_fields"):
        checker.take_record(0, 0, 1)
    checker.kill()
