"""Control flits of the 68B flit (Type = 1): LLCRD, RETRY.Idle/Req/Ack/Frame and INIT.Param, their
LLCTRL / SubType codes and the position of every payload field, with their encoder and checking decoder.

# Ref: docs/sources.md §2.5; CXL 1.1 Tables 41-42, CXL 3.x Tables 4-9 and 4-10 and Figures 4-35 to 4-38
#      (docs/conformance.md).
"""

from typing import NamedTuple

from cxl.flit import SLOT_BITS, FlitError, bits_text, get_bits, mask_bits

__all__ = ["ControlFlit", "CONTROL_KINDS", "INIT_VERSION_CXL2", "control_field_width", "control",
           "encode_control", "decode_control", "is_ack_only_llcrd"]


class ControlFlit(NamedTuple):
    """A control flit: ``kind`` is a key of :data:`CONTROL_KINDS`, ``fields`` its field values."""
    kind: str
    fields: dict


_CTL_FMT = (5, 3)           # control flits put CTL_FMT where a protocol flit has its Slot0 format
_LLCTRL = (32, 4)
_SUBTYPE = (36, 4)
_CTL_FMT_LINK = 0b000       # LLCRD, RETRY, INIT
_CTL_FMT_IDE = 0b001

# kind: (LLCTRL, SubType, {field: ((value bit, flit bit, width), ...)}).  A field may be split: LLCRD's
# Acknowledge[7:0] keeps bit 3 in the header's Ak position (Ak = 8 flits), bits 2:0 in payload 66:64 and
# bits 7:4 in payload 71:68.  Positions: LLCTRL/SubType and the 24 zero bits 63:40 [C: COCO]; LLCRD
# header and Acknowledge split, RETRY.Req/Ack payloads [S: flit-substructures file; COCO disagrees on the
# Acknowledge split by one bit]; INIT.Param: Interconnect Version in payload 3:0 (0010b = CXL 2.0), LLR
# Wrap Value in payload 31:24, payload 23:4 reserved (CXL 1.1 Table 42, CXL 3.x Table 4-10; the payload
# starts at slot 0 byte 8, CXL 3.x Figure 4-35).  Every bit of slot 0 not claimed here must be zero, as must slots 1-3.
CONTROL_KINDS = {
    "LLCRD": (0b0000, 0b0001, {
        "acks": ((0, 64, 3), (3, 2, 1), (4, 68, 4)),
        "rsp_crd": ((0, 20, 4),), "req_crd": ((0, 24, 4),), "data_crd": ((0, 28, 4),)}),
    "RETRY.Idle": (0b0001, 0b0000, {}),
    "RETRY.Req": (0b0001, 0b0001, {
        "eseq": ((0, 64, 8),), "num_retry": ((0, 80, 5),), "num_phy_reinit": ((0, 85, 5),)}),
    "RETRY.Ack": (0b0001, 0b0010, {
        "empty": ((0, 64, 1),), "viral": ((0, 65, 1),), "num_retry": ((0, 67, 5),),
        "wrptr": ((0, 72, 8),), "eseq": ((0, 80, 8),), "num_free_buf": ((0, 88, 8),)}),
    "RETRY.Frame": (0b0001, 0b0011, {}),
    "INIT.Param": (0b1100, 0b1000, {"version": ((0, 64, 4),), "llr_wrap": ((0, 88, 8),)}),
}
INIT_VERSION_CXL2 = 0b0010
_LLCTRL_IDE = 0b0010
_CONTROL_BY_CODE = {(llctrl, sub): kind for kind, (llctrl, sub, _) in CONTROL_KINDS.items()}
_LLCTRL_KNOWN = {llctrl for llctrl, _ in _CONTROL_BY_CODE}


def control_field_width(pieces):
    return max(shift + width for shift, _, width in pieces)


def _claimed(kind):
    mask = mask_bits(0, 1) | mask_bits(*_CTL_FMT) | mask_bits(*_LLCTRL) | mask_bits(*_SUBTYPE)
    for pieces in CONTROL_KINDS[kind][2].values():
        for _, offset, width in pieces:
            mask |= mask_bits(offset, width)
    return mask


_CLAIMED = {kind: _claimed(kind) for kind in CONTROL_KINDS}


def control(kind, **fields):
    """A :class:`ControlFlit` with every field of ``kind`` (left-out fields 0; INIT.Param's version
    defaults to CXL 2.0)."""
    if kind not in CONTROL_KINDS:
        raise ValueError(f"unknown control flit {kind!r}; known: {sorted(CONTROL_KINDS)}")
    spec = CONTROL_KINDS[kind][2]
    unknown = set(fields) - set(spec)
    if unknown:
        raise ValueError(f"{kind}: unknown field(s) {sorted(unknown)}")
    full = {name: int(fields.get(name, INIT_VERSION_CXL2 if (kind, name) == ("INIT.Param", "version") else 0))
            for name in spec}
    for name, v in full.items():
        width = control_field_width(spec[name])
        if not 0 <= v < (1 << width):
            raise ValueError(f"{kind}.{name}: {v} does not fit in {width} bits")
    return ControlFlit(kind, full)


def encode_control(ctl):
    """ControlFlit -> 512-bit payload integer (seal it with :func:`seal`)."""
    ctl = control(ctl.kind, **ctl.fields)
    llctrl, subtype, spec = CONTROL_KINDS[ctl.kind]
    value = 1 | (_CTL_FMT_LINK << _CTL_FMT[0]) | (llctrl << _LLCTRL[0]) | (subtype << _SUBTYPE[0])
    for name, pieces in spec.items():
        for shift, offset, width in pieces:
            value |= get_bits(ctl.fields[name], shift, width) << offset
    return value


def decode_control(payload):
    """512-bit payload of a Type = 1 flit -> ControlFlit, or FlitError naming the bad field."""
    if not payload & 1:
        raise FlitError("Type", "not a control flit (Type = 0)", "control")
    ctl_fmt = get_bits(payload, *_CTL_FMT)
    if ctl_fmt == _CTL_FMT_IDE:
        raise FlitError("CTL_FMT", "IDE control flits (CTL_FMT 001) are not supported", "unsupported")
    if ctl_fmt != _CTL_FMT_LINK:
        raise FlitError("CTL_FMT", f"{ctl_fmt:03b} is reserved", "control")
    llctrl, subtype = get_bits(payload, *_LLCTRL), get_bits(payload, *_SUBTYPE)
    kind = _CONTROL_BY_CODE.get((llctrl, subtype))
    if kind is None:
        if llctrl == _LLCTRL_IDE:
            raise FlitError("LLCTRL", "IDE (0010) is not supported", "unsupported")
        if llctrl not in _LLCTRL_KNOWN:
            raise FlitError("LLCTRL", f"{llctrl:04b} is reserved", "control")
        raise FlitError("SubType", f"{subtype:04b} is reserved for LLCTRL {llctrl:04b}", "control")
    if payload >> SLOT_BITS:
        raise FlitError("Slot1-3", "control flits use slot 0 only; payload bits 511:128 must be zero", "control")
    stray = payload & ~_CLAIMED[kind]
    if stray:
        raise FlitError("reserved", f"{kind}: reserved bit(s) {bits_text(stray)} of slot 0 are set", "control")
    spec = CONTROL_KINDS[kind][2]
    fields = {}
    for name, pieces in spec.items():
        fields[name] = 0
        for shift, offset, width in pieces:
            fields[name] |= get_bits(payload, offset, width) << shift
    return ControlFlit(kind, fields)


def is_ack_only_llcrd(payload):
    """Whether a 512-bit payload is an LLCRD whose credit fields are all 0 (it returns no credits and only
    acknowledges): the link ends acknowledge such a flit only with later traffic, so a sender's ack
    timeout leaves it out (hdl/link/port.py, "Ack policy").  Any other payload, legal or not: False."""
    try:
        ctl = decode_control(payload)
    except FlitError:
        return False
    return ctl.kind == "LLCRD" and not any(v for name, v in ctl.fields.items() if name.endswith("_crd"))
