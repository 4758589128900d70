"""CXL 2.0 68B-flit link layer: the Python reference (golden model) for the Amaranth RTL.

Bit-exact rules for one direction of a CXL.cache link: the 16-bit CRC, the protocol-flit header, the
H/G slot formats that carry CXL.cache messages, data chunks with the rollover and all-data-flit rules,
credit returns and Ak, and the control flits (LLCRD, RETRY.*, INIT.Param).  :class:`Packer` turns
per-channel FIFOs into flits; :class:`Unpacker` checks and decodes them back.  Every message width and
opcode encoding comes from :mod:`hdl.protocol` (``CODECS``); nothing here restates one.

Flit (528 bits): payload bits 511:0 are four 16-byte slots, slot ``s`` at bits ``128*s+127 : 128*s``;
the CRC sits in bits 527:512.  As bytes (what the RTL and the vectors use), payload bit ``i`` is bit
``i % 8`` of byte ``i // 8``: slot 0 byte 0 first, then the two CRC bytes, low byte first.  On the wire
the logical PHY puts the 2-byte protocol ID 0x5555 in front (:func:`frame`), 68 bytes in all.

A protocol flit (Type = 0) has the 32-bit header in slot 0 bits 31:0, so slot 0 is an H-slot with 96
bits for messages at payload bits 127:32; slots 1-3 are G-slots of 128 bits.  Inside a slot the format's
messages are packed least-significant first, in the order the one format table (``_FORMAT_TABLE``,
compiled into :data:`SLOT_FORMATS`) lists them, each at its ``CODECS[chan].width``; the bits above the last message are zero.  (The facts give each format's contents
but not the bit placement; this order matches the open cocotb VIP wherever that VIP is self-consistent.)
An absent message is all zeros (its Valid bit, bit 0, clear).

Formats left out: the CXL.mem-only formats (downstream H4 M2S RwD, H5 M2S Req, G4 M2S Req + H2D DataHdr,
G5 M2S RwD + H2D Rsp; upstream H3 S2M DRS + NDR, H4, H5, G4, G5, G6) and H6 (IDE MAC).  The decoder
rejects them with :class:`FlitError` ("not supported"), and rejects the encodings no format uses
("reserved").  Upstream H0 has room for an S2M NDR (30 bits, CXL.mem): it is always sent as zeros and a
non-zero NDR is rejected, because this model has no CXL.mem channel to deliver it to.

Data: a data header (D2H/H2D DataHdr) announces one 64 B line, sent as four 16-byte chunks (chunk ``k`` =
line bytes ``16k .. 16k+15``) in G0 slots after the header, in header order.  With ``P`` chunks still owed
at the start of a flit: ``P >= 4`` makes it an all-data flit (four chunks and no header: no Type bit,
slot formats, credits or Ak); otherwise it is a header flit whose slots 1..P must be G0.  A chunk never
goes in slot 0 of a header flit.  Sz = 1 exactly when the flit carries a data header (64 B lines);
byte-enable slots (BE = 1) and 32 B transfers are not supported (CXL.cache data is a full line, facts
§1.1).  A control flit may not come while chunks are owed (they must roll over into the next flit).

Packing policy (:class:`Packer`), one flit at a time:

1. ``P >= 4`` chunks owed: all-data flit.
2. Otherwise, if any message or chunk is queued, a protocol flit.  Slot 0: the H-format whose greedy fill
   (each position takes the next message of its channel, within the per-flit maximum of facts §2.2)
   scores highest, where the score is (carries a message of the *priority channel*, number of
   messages); ties go to the lower format code.  The priority channel rotates REQ -> RSP -> DATA after
   every protocol flit, so a busy channel cannot starve the others (a plain message count would always
   pick 4 x DataHdr over DataHdr + 2 x Rsp, and GOs would wait behind a read stream).
   Slots 1-3: G0 whenever a chunk is owed (data first: the rollover rule forces it in the next flit
   anyway, and D2H data must make progress, facts §1.1); otherwise the G-format carrying the most
   messages, ties to the lower code.  An empty slot is H0 / G1 with every message invalid.
   (``Packer.choose_slot0`` / ``Packer.choose_g`` hold this policy; a test swaps in a random legal one.)
3. Otherwise, if credits or acks are waiting, an LLCRD control flit.
4. Otherwise nothing (the link would send idle flits; that is outside this model).

Credits and Ak: every protocol flit returns, per class (req, rsp, data), the largest encodable amount
(0, 1, 2, 4, ..., 64) not above what is waiting, and sets Ak when 8 or more received flits wait to be
acknowledged (Ak acknowledges 8).  An LLCRD returns the same credit amounts and acknowledges up to 255
flits.  The credits a flit carries belong to the channels of the *other* direction (the receiver returns
them).  All-data flits have no header, so they carry neither.

The unpacker is strict (it is the checker for the RTL): reserved or unsupported formats, illegal
opcodes, non-zero padding or reserved bits, broken rollover, per-flit maxima exceeded and bad control
flits all raise :class:`FlitError`, and a rejected flit leaves the unpacker's state as it was.

Decisions where the facts are unconfirmed ([U]/[S]) are listed in docs/link_layer.md.  Not here (RTL half
of the issue and a later link-layer model): the retry buffer and replay, the ack timer, sequence counters,
credit pools, and error injection.

# Ref: docs/sources.md §2.1 (528-bit flit, protocol ID 5555h, header bit positions,
#      Ak = 8 flits [S], Sz [S], all-data flit and rollover [S], G0 never in slot 0 [S]).
# Ref: docs/sources.md §2.2 (H/G slot formats both directions, format encodings, maximum messages per flit).
# Ref: docs/sources.md §2.3 (CRC-16 polynomial 0x1F053, serial form, CRC in bits 527:512).
# Ref: docs/sources.md §2.4 (credit-return fields, exponential 3-bit magnitude + protocol-select bit).
# Ref: docs/sources.md §2.5 (control flits: LLCTRL/SubType values, slot 0 only, RETRY payloads).
# Ref: docs/sources.md §1.1, §1.6 (channels, full-line data, message widths via hdl.protocol).
"""

import argparse
import enum
import json
import math
import random
import sys
from collections import deque
from pathlib import Path
from typing import NamedTuple, Optional

from hdl.link.crc import CRC_POLY
from hdl.protocol import CODECS, LINE_BYTES, Channel

__all__ = [
    "FlitError", "Direction", "FlitMsg", "make_msg", "ControlFlit", "control", "Credits", "RxFlit",
    "Unpacked", "SlotFormat", "SLOT_FORMATS", "DATA", "S2M_NDR", "DATA_CHANNELS", "MAX_PER_FLIT", "HEADER_FIELDS",
    "CONTROL_KINDS", "CREDIT_VALUES", "CreditProtocol", "PROTOCOL_ID",
    "PAYLOAD_BYTES", "FLIT_BYTES", "WIRE_BYTES", "SLOT_BYTES", "CHUNK_BYTES", "CHUNKS_PER_LINE",
    "CRC_POLY", "crc16", "crc16_serial", "seal", "frame", "deframe",
    "encode_header", "decode_header", "encode_credit", "decode_credit", "credit_step",
    "encode_control", "decode_control", "Packer", "Unpacker", "pack", "unpack",
    "msg_to_json", "msg_from_json", "random_msg", "random_mix", "write_vectors",
    "WORKLOADS", "MIXED", "efficiency", "optimum", "main",
]


# Where each rule a flit can break is written down: ``FlitError.rule`` is a key of this table and
# ``FlitError.ref`` its entry.  docs/conformance.md lists the same rules with the code and tests.
RULE_REFS = {
    "length": "CXL 1.1 §4.2.2 (a 528-bit flit: 4 slots of 16 B and a 2 B CRC); CXL 3.x §4.2.2",
    "protocol_id": "CXL 3.x Table 6-2 (Flex Bus.CXL protocol IDs: 5555h = CXL.cache/CXL.mem)",
    "crc": "CXL 1.1 §4.2.8.7 (16b CRC over the flit; polynomial in docs/sources.md §2.3)",
    "reserved": "CXL 1.1 §4.2.2 / §4.2.3.1, CXL 3.x §4.2.2 (RSVD bits are sent as 0; this receiver "
                "checks them, docs/conformance.md)",
    "be_sz": "CXL 1.1 Table 36, CXL 3.x Table 4-3 (Sz and BE); 32 B and byte-enable transfers are not "
             "supported here (docs/conformance.md)",
    "format": "CXL 1.1 Tables 38-40, CXL 3.x Tables 4-6 to 4-8 (slot format encodings and contents)",
    "message": "CXL 1.1 §3.2.4, CXL 3.x §3.2.3-3.2.4 (CXL.cache message fields and opcode encodings)",
    "rollover": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (68B flit packing rules: rollover data chunks)",
    "data_slot": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (the next available slot after a Data Header carries "
                 "its data)",
    "no_data": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (data chunks follow their Data Header)",
    "packing": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (valid messages within a slot are tightly packed)",
    "mdh": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (multi-data-header slots and Data Headers per flit)",
    "max": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (maximum messages of each type per flit)",
    "control": "CXL 1.1 Tables 41-42, CXL 3.x Tables 4-9 and 4-10 (control flits; only slot 0 is "
               "valid, CXL 3.x Figures 4-35 to 4-38)",
    "control_rollover": "CXL 1.1 §4.2.5, CXL 3.x §4.2.5 (control flits cannot be interleaved with "
                        "all-data flits)",
    "unsupported": "left out of this model (docs/conformance.md, rules not implemented)",
    "stream": "CXL 1.1 §4.2.5 (every Data Header's chunks follow it)",
}


class FlitError(ValueError):
    """A flit that breaks a rule.  ``field`` names the offending field (``"CRC"``, ``"Slot2"``,
    ``"LLCTRL"``, ...); the message says what is wrong with it; ``rule`` (a key of
    :data:`RULE_REFS`) and ``ref`` say where the rule is written."""

    def __init__(self, field, message, rule):
        if rule not in RULE_REFS:
            raise ValueError(f"FlitError: unknown rule {rule!r}")
        super().__init__(f"{field}: {message}")
        self.field, self.rule, self.ref = field, rule, RULE_REFS[rule]


# ---------------------------------------------------------------- sizes (facts §2.1)
PROTOCOL_ID = 0x5555                 # CXL.cache/mem protocol ID, prepended by the logical PHY
SLOTS = 4
SLOT_BYTES = 16
SLOT_BITS = 8 * SLOT_BYTES
PAYLOAD_BYTES = SLOTS * SLOT_BYTES    # 64
PAYLOAD_BITS = 8 * PAYLOAD_BYTES      # 512
CRC_BYTES = 2
FLIT_BYTES = PAYLOAD_BYTES + CRC_BYTES  # 66: payload + CRC, the link layer's flit
WIRE_BYTES = FLIT_BYTES + 2             # 68: with the protocol ID
HEADER_BITS = 32
H_SLOT_BITS = SLOT_BITS - HEADER_BITS   # 96
CHUNK_BYTES = SLOT_BYTES
CHUNKS_PER_LINE = LINE_BYTES // CHUNK_BYTES  # 4

# S2M NDR is a CXL.mem message and so not in hdl.protocol; upstream H0 reserves room for it.
# Ref: docs/sources.md §1.6 (S2M NDR, 30 bits).
S2M_NDR_WIDTH = 30


class Direction(enum.Enum):
    """Which way a flit stream goes; it decides which slot-format table applies."""
    UPSTREAM = "upstream"        # device -> host, D2H channels
    DOWNSTREAM = "downstream"    # host -> device, H2D channels

    @property
    def channels(self):
        """The (req, rsp, data) channels this direction carries."""
        if self is Direction.UPSTREAM:
            return (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA)
        return (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA)

    @property
    def data_channel(self):
        return self.channels[2]

    @classmethod
    def of(cls, chan):
        return cls.UPSTREAM if Channel(chan).upstream else cls.DOWNSTREAM


DATA_CHANNELS = (Channel.D2H_DATA, Channel.H2D_DATA)

# Ref: docs/sources.md §2.2 "Maximum messages of each kind per flit" [C: COCO].  Both ends enforce them.
MAX_PER_FLIT = {
    Channel.D2H_REQ: 4, Channel.D2H_RSP: 2, Channel.D2H_DATA: 4,
    Channel.H2D_REQ: 2, Channel.H2D_RSP: 4, Channel.H2D_DATA: 4,
}


# ---------------------------------------------------------------- CRC (facts §2.3)
# The polynomial is defined once, with the RTL (hdl/link/crc.py); this module implements the CRC itself
# independently (serial and table forms), and the tests check the two implementations against each other.
_CRC_LOW = CRC_POLY & 0xFFFF   # x^16 is implicit in a 16-bit shift register


def crc16_serial(payload):
    """The CRC exactly as facts §2.3 defines it: a CRC-16 shift register, polynomial 0x1F053, initial
    value 0, no reflection, no final XOR, fed payload bits 511 down to 0 (payload bit i = bit i%8 of
    byte i//8).  Bit ``j`` of the result goes to flit bit ``512 + j``.  Slow; the definition."""
    if len(payload) != PAYLOAD_BYTES:
        raise ValueError(f"CRC is over {PAYLOAD_BYTES} payload bytes, got {len(payload)}")
    value = int.from_bytes(payload, "little")
    reg = 0
    for i in range(PAYLOAD_BITS - 1, -1, -1):
        feedback = ((reg >> 15) ^ (value >> i)) & 1
        reg = ((reg << 1) & 0xFFFF) ^ (_CRC_LOW if feedback else 0)
    return reg


def _crc_table():
    # Entry b = register after shifting in byte b (MSB first) from zero: the standard byte-wise form
    # of the same serial CRC, built from the serial definition itself.
    table = []
    for b in range(256):
        reg = b << 8
        for _ in range(8):
            reg = ((reg << 1) & 0xFFFF) ^ (_CRC_LOW if reg & 0x8000 else 0)
        table.append(reg)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc16(payload):
    """Table-driven CRC, equal to :func:`crc16_serial`: byte 63 first, each byte MSB first."""
    if len(payload) != PAYLOAD_BYTES:
        raise ValueError(f"CRC is over {PAYLOAD_BYTES} payload bytes, got {len(payload)}")
    reg = 0
    table = _CRC_TABLE
    for i in range(PAYLOAD_BYTES - 1, -1, -1):
        reg = ((reg << 8) & 0xFFFF) ^ table[(reg >> 8) ^ payload[i]]
    return reg


def seal(payload):
    """64 payload bytes (or a 512-bit integer) -> the 66-byte flit with its CRC (low byte first)."""
    if isinstance(payload, int):
        payload = payload.to_bytes(PAYLOAD_BYTES, "little")
    payload = bytes(payload)
    return payload + crc16(payload).to_bytes(CRC_BYTES, "little")


def frame(flit):
    """Prepend the 2-byte protocol ID (0x5555 reads the same in either byte order): 68 wire bytes."""
    if len(flit) != FLIT_BYTES:
        raise FlitError("length", f"a flit is {FLIT_BYTES} bytes, got {len(flit)}", "length")
    return PROTOCOL_ID.to_bytes(2, "little") + bytes(flit)


def deframe(wire):
    """Inverse of :func:`frame`; rejects another protocol ID (CXL.io, NULL, ALMP are not CXL.cache)."""
    if len(wire) != WIRE_BYTES:
        raise FlitError("length", f"a framed flit is {WIRE_BYTES} bytes, got {len(wire)}", "length")
    pid = int.from_bytes(wire[:2], "little")
    if pid != PROTOCOL_ID:
        raise FlitError("ProtocolID", f"{pid:#06x} is not the CXL.cache/mem ID {PROTOCOL_ID:#06x}",
                        "protocol_id")
    return bytes(wire[2:])


# ---------------------------------------------------------------- bit fields
def _get(value, offset, width):
    return (value >> offset) & ((1 << width) - 1)


def _mask(offset, width):
    return ((1 << width) - 1) << offset


# Protocol-flit header, slot 0 bits 31:0.  Ref: docs/sources.md §2.1 [C2].
HEADER_FIELDS = (
    ("type", 0, 1), ("rsvd0", 1, 1), ("ak", 2, 1), ("be", 3, 1), ("sz", 4, 1),
    ("slot0", 5, 3), ("slot1", 8, 3), ("slot2", 11, 3), ("slot3", 14, 3), ("rsvd1", 17, 3),
    ("rsp_crd", 20, 4), ("req_crd", 24, 4), ("data_crd", 28, 4),
)
_HEADER_NAMES = tuple(name for name, _, _ in HEADER_FIELDS)


def encode_header(fields):
    """Header dict -> 32-bit integer; fields left out are 0."""
    unknown = set(fields) - set(_HEADER_NAMES)
    if unknown:
        raise ValueError(f"flit header: unknown field(s) {sorted(unknown)}")
    value = 0
    for name, offset, width in HEADER_FIELDS:
        v = int(fields.get(name, 0))
        if not 0 <= v < (1 << width):
            raise ValueError(f"flit header.{name}: {v} does not fit in {width} bits")
        value |= v << offset
    return value


def decode_header(value):
    return {name: _get(value, offset, width) for name, offset, width in HEADER_FIELDS}


# ---------------------------------------------------------------- credits (facts §2.4)
CREDIT_VALUES = (0, 1, 2, 4, 8, 16, 32, 64)   # index = the 3-bit magnitude code
CREDIT_CLASSES = ("req", "rsp", "data")


class CreditProtocol(enum.IntEnum):
    """Bit 3 of a credit-return field.  Which value means CXL.cache is unconfirmed (facts §2.4 [U]);
    this model takes 0 = CXL.cache, 1 = CXL.mem."""
    CACHE = 0
    MEM = 1


def encode_credit(n, protocol=CreditProtocol.CACHE):
    """Credit amount -> 4-bit field: protocol select in bit 3, exponential magnitude in bits 2:0."""
    if n not in CREDIT_VALUES:
        raise ValueError(f"{n} credits cannot be encoded; one field returns one of {CREDIT_VALUES}")
    return (int(protocol) << 3) | CREDIT_VALUES.index(n)


def decode_credit(code):
    """4-bit field -> (CreditProtocol, amount)."""
    return CreditProtocol(code >> 3), CREDIT_VALUES[code & 0b111]


def credit_step(waiting):
    """The largest amount one field can return out of ``waiting`` credits."""
    return max(v for v in CREDIT_VALUES if v <= waiting)


class Credits(NamedTuple):
    """Credits returned per class.  In an upstream flit they are for the H2D channels, and the other
    way round: a receiver returns credits for what it received."""
    req: int = 0
    rsp: int = 0
    data: int = 0

    def __add__(self, other):
        return Credits(*(a + b for a, b in zip(self, other)))


# ---------------------------------------------------------------- slot formats (facts §2.2)
DATA = "G0-data"      # the G0 format: one 16-byte data chunk
S2M_NDR = "S2M_NDR"   # CXL.mem position in upstream H0: always zero here

_D2H_REQ, _D2H_RSP, _D2H_DATA = Direction.UPSTREAM.channels
_H2D_REQ, _H2D_RSP, _H2D_DATA = Direction.DOWNSTREAM.channels

# THE slot-format table.  Key (kind, 3-bit code); value = the messages the format carries, packed
# least-significant first in this order, or a string: why the format is not supported.  Codes absent
# here are reserved.  Ref: docs/sources.md §2.2 [C2]; encodings H0..H6 = 000..110, G0..G6 = 000..110 [C].
_FORMAT_TABLE = {
    Direction.DOWNSTREAM: {
        ("H", 0): (_H2D_REQ, _H2D_RSP),
        ("H", 1): (_H2D_DATA, _H2D_RSP, _H2D_RSP),
        ("H", 2): (_H2D_REQ, _H2D_DATA),
        ("H", 3): (_H2D_DATA,) * 4,
        ("H", 4): "M2S RwD header (CXL.mem) is not supported",
        ("H", 5): "M2S Req (CXL.mem) is not supported",
        ("H", 6): "MAC (IDE) is not supported",
        ("G", 0): DATA,
        ("G", 1): (_H2D_RSP,) * 4,
        ("G", 2): (_H2D_REQ, _H2D_DATA, _H2D_RSP),
        ("G", 3): (_H2D_DATA,) * 4 + (_H2D_RSP,),
        ("G", 4): "M2S Req + H2D DataHdr (CXL.mem) is not supported",
        ("G", 5): "M2S RwD header + H2D Rsp (CXL.mem) is not supported",
    },
    Direction.UPSTREAM: {
        ("H", 0): (_D2H_DATA, _D2H_RSP, _D2H_RSP, S2M_NDR),
        ("H", 1): (_D2H_REQ, _D2H_DATA),
        ("H", 2): (_D2H_DATA,) * 4 + (_D2H_RSP,),
        ("H", 3): "S2M DRS + S2M NDR (CXL.mem) is not supported",
        ("H", 4): "2 x S2M NDR (CXL.mem) is not supported",
        ("H", 5): "2 x S2M DRS (CXL.mem) is not supported",
        ("H", 6): "MAC (IDE) is not supported",
        ("G", 0): DATA,
        ("G", 1): (_D2H_REQ, _D2H_RSP, _D2H_RSP),
        ("G", 2): (_D2H_REQ, _D2H_DATA, _D2H_RSP),
        ("G", 3): (_D2H_DATA,) * 4,
        ("G", 4): "S2M DRS + 2 x S2M NDR (CXL.mem) is not supported",
        ("G", 5): "2 x S2M NDR (CXL.mem) is not supported",
        ("G", 6): "3 x S2M DRS (CXL.mem) is not supported",
    },
}


class SlotFormat(NamedTuple):
    """A supported slot format.  ``fields`` lists (channel or S2M_NDR, offset in the slot's message
    area, width); for G0 it is empty and ``data`` is True."""
    direction: Direction
    kind: str          # "H" (slot 0, 96 bits) or "G" (slots 1-3, 128 bits)
    code: int
    fields: tuple
    used_bits: int
    data: bool

    @property
    def name(self):
        return f"{self.kind}{self.code}"

    @property
    def mdh(self):
        """A multi-data-header slot: more than one Data Header position (CXL 1.1 / 3.x §4.2.5)."""
        return sum(item in DATA_CHANNELS for item, _, _ in self.fields) > 1


def _build_formats():
    formats = {}
    for direction, table in _FORMAT_TABLE.items():
        for (kind, code), contents in table.items():
            if contents is DATA:
                formats[direction, kind, code] = SlotFormat(direction, kind, code, (), SLOT_BITS, True)
                continue
            if isinstance(contents, str):           # not supported: the string says why
                continue
            capacity = H_SLOT_BITS if kind == "H" else SLOT_BITS
            fields, offset = [], 0
            for item in contents:
                width = S2M_NDR_WIDTH if item == S2M_NDR else CODECS[item].width
                fields.append((item, offset, width))
                offset += width
            # Import-time check that the CODECS widths fit the formats (cannot silently overflow).
            assert offset <= capacity, f"{direction.value} {kind}{code}: {offset} bits > {capacity}"
            formats[direction, kind, code] = SlotFormat(direction, kind, code, tuple(fields), offset, False)
    return formats


SLOT_FORMATS = _build_formats()


def _format(direction, kind, code, field):
    """The supported format for a header code, or FlitError naming the slot field."""
    fmt = SLOT_FORMATS.get((direction, kind, code))
    if fmt is not None:
        return fmt
    why = _FORMAT_TABLE[direction].get((kind, code))
    if why is None:
        raise FlitError(field, f"{direction.value} format {kind}{code} ({code:03b}) is reserved", "format")
    raise FlitError(field, f"{direction.value} format {kind}{code}: {why}", "unsupported")


# ---------------------------------------------------------------- messages
class FlitMsg(NamedTuple):
    """One CXL.cache message: its channel, every field of its layout (enum fields as members), and the
    64-byte line for a data header (None otherwise)."""
    chan: Channel
    fields: dict
    data: Optional[bytes] = None


def make_msg(chan, fields=None, data=None, **kwargs):
    """Build a :class:`FlitMsg` from anything ``CODECS[chan].encode`` accepts; fills defaulted fields
    so that equal messages compare equal."""
    chan = Channel(chan)
    codec = CODECS[chan]
    full = codec.decode(codec.encode(dict(fields or {}, **kwargs)))
    if full["valid"] != 1:
        raise ValueError(f"{chan.name}: a message to send must have valid = 1")
    if chan in DATA_CHANNELS:
        if data is None or len(data) != LINE_BYTES:
            raise ValueError(f"{chan.name}: a data header needs its {LINE_BYTES}-byte line")
        data = bytes(data)
    elif data is not None:
        raise ValueError(f"{chan.name} carries no data")
    return FlitMsg(chan, full, data)


def msg_to_json(msg):
    """JSON form used by the vectors: channel name, fields (enum members by name), data as hex."""
    out = {"channel": msg.chan.name,
           "fields": {k: (v.name if isinstance(v, enum.Enum) else int(v)) for k, v in msg.fields.items()}}
    if msg.data is not None:
        out["data"] = msg.data.hex()
    return out


def msg_from_json(obj):
    chan = Channel[obj["channel"]]
    enums = {name: enum_cls for name, _, _, enum_cls in CODECS[chan].fields if enum_cls is not None}
    fields = {k: (enums[k][v] if k in enums else v) for k, v in obj["fields"].items()}
    data = bytes.fromhex(obj["data"]) if "data" in obj else None
    return make_msg(chan, fields, data)


# ---------------------------------------------------------------- control flits (facts §2.5)
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


def _field_width(pieces):
    return max(shift + width for shift, _, width in pieces)


def _claimed(kind):
    mask = _mask(0, 1) | _mask(*_CTL_FMT) | _mask(*_LLCTRL) | _mask(*_SUBTYPE)
    for pieces in CONTROL_KINDS[kind][2].values():
        for _, offset, width in pieces:
            mask |= _mask(offset, width)
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
        width = _field_width(spec[name])
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
            value |= _get(ctl.fields[name], shift, width) << offset
    return value


def decode_control(payload):
    """512-bit payload of a Type = 1 flit -> ControlFlit, or FlitError naming the bad field."""
    if not payload & 1:
        raise FlitError("Type", "not a control flit (Type = 0)", "control")
    ctl_fmt = _get(payload, *_CTL_FMT)
    if ctl_fmt == _CTL_FMT_IDE:
        raise FlitError("CTL_FMT", "IDE control flits (CTL_FMT 001) are not supported", "unsupported")
    if ctl_fmt != _CTL_FMT_LINK:
        raise FlitError("CTL_FMT", f"{ctl_fmt:03b} is reserved", "control")
    llctrl, subtype = _get(payload, *_LLCTRL), _get(payload, *_SUBTYPE)
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
        raise FlitError("reserved", f"{kind}: reserved bit(s) {_bits(stray)} of slot 0 are set", "control")
    spec = CONTROL_KINDS[kind][2]
    fields = {}
    for name, pieces in spec.items():
        fields[name] = 0
        for shift, offset, width in pieces:
            fields[name] |= _get(payload, offset, width) << shift
    return ControlFlit(kind, fields)


def _bits(value, limit=6):
    bits = [i for i in range(value.bit_length()) if value >> i & 1]
    text = ", ".join(map(str, bits[:limit]))
    return text + (", ..." if len(bits) > limit else "")


# ---------------------------------------------------------------- packer
class Packer:
    """TX side of one direction: per-channel FIFOs in, flits out (policy in the module docstring).

    ``push`` queues a message, ``return_credits``/``acknowledge`` queue link-layer returns, and
    ``next_flit`` builds the next 66-byte flit (None when there is nothing to send).
    """

    def __init__(self, direction):
        self.direction = Direction(direction)
        self.queues = {ch: deque() for ch in self.direction.channels}
        self.chunks = deque()          # 16-byte chunks owed by data headers already packed, in order
        self.credits = dict.fromkeys(CREDIT_CLASSES, 0)
        self.acks = 0
        self.priority = 0              # index into direction.channels; rotates per protocol flit
        self.hdr_slot = None           # while a protocol flit is built: its slot with Data Headers
        mine = sorted((f for (d, _, _), f in SLOT_FORMATS.items() if d is self.direction), key=lambda f: f.code)
        self.h_formats = [f for f in mine if f.kind == "H"]                 # in code order
        self.g_formats = [f for f in mine if f.kind == "G" and not f.data]
        self.g0 = SLOT_FORMATS[self.direction, "G", 0]

    def push(self, msg):
        if Direction.of(msg.chan) is not self.direction:
            raise ValueError(f"{msg.chan.name} does not travel {self.direction.value}")
        self.queues[msg.chan].append(msg)

    def return_credits(self, req=0, rsp=0, data=0):
        for name, n in (("req", req), ("rsp", rsp), ("data", data)):
            if n < 0:
                raise ValueError(f"cannot return {n} {name} credits")
            self.credits[name] += n

    def acknowledge(self, flits):
        """Note ``flits`` more correctly received flits to acknowledge."""
        if flits < 0:
            raise ValueError(f"cannot acknowledge {flits} flits")
        self.acks += flits

    @property
    def busy(self):
        """True while messages or data chunks are waiting."""
        return bool(self.chunks) or any(self.queues.values())

    def next_flit(self):
        if len(self.chunks) >= CHUNKS_PER_LINE:
            return seal(self._all_data())
        if self.busy:
            return seal(self._protocol_flit())
        if self.acks or any(self.credits.values()):
            return seal(encode_control(self._llcrd()))
        return None

    def drain(self):
        """Every flit needed to send all that is queued."""
        flits = []
        while (flit := self.next_flit()) is not None:
            flits.append(flit)
        return flits

    # -- flit builders
    def _all_data(self):
        payload = 0
        for s in range(SLOTS):
            payload |= int.from_bytes(self.chunks.popleft(), "little") << (SLOT_BITS * s)
        return payload

    def _take_credits(self, protocol=CreditProtocol.CACHE):
        codes = {}
        for name in CREDIT_CLASSES:
            n = credit_step(self.credits[name])
            self.credits[name] -= n
            codes[name] = encode_credit(n, protocol)
        return codes

    def _llcrd(self):
        acks = min(self.acks, 255)
        self.acks -= acks
        codes = self._take_credits()
        return control("LLCRD", acks=acks, req_crd=codes["req"], rsp_crd=codes["rsp"],
                       data_crd=codes["data"])

    def _fill(self, fmt, counts):
        """What ``fmt`` would carry now: per position the next queued message of its channel (None if
        that channel is empty or at its per-flit maximum), and how many it takes per channel.  Positions
        are filled in order, so a slot is tightly packed; Data Headers go in only while no earlier slot
        of the flit has one (one slot of a flit carries Data Headers: CXL 1.1 / 3.x §4.2.5)."""
        taken = dict.fromkeys(self.direction.channels, 0)
        placed = []
        data_chan = self.direction.data_channel
        for item, _, _ in fmt.fields:
            if item == S2M_NDR or (item is data_chan and self.hdr_slot is not None):
                placed.append(None)
                continue
            k = taken[item]
            if k < len(self.queues[item]) and counts[item] + k < MAX_PER_FLIT[item]:
                placed.append(self.queues[item][k])
                taken[item] = k + 1
            else:
                placed.append(None)
        return placed, taken

    def legal(self, formats, counts):
        """The formats that may be chosen now: an MDH format only if it would carry 2 or more Data
        Headers (CXL 1.1 / 3.x §4.2.5).  Never empty: H0 and G1 are not MDH formats."""
        data_chan = self.direction.data_channel
        return [f for f in formats if not f.mdh or self._fill(f, counts)[1][data_chan] >= 2]

    def _best(self, formats, counts, priority=None):
        best = None
        for fmt in self.legal(formats, counts):  # in code order: a tie keeps the lower code
            placed, taken = self._fill(fmt, counts)
            n = sum(taken.values())
            score = (priority is not None and taken[priority] > 0, n)
            if best is None or score > best[0]:
                best = (score, fmt)
        return best[1]

    # -- the policy: two hooks, so that a test can swap in another legal policy and check the unpacker
    def choose_slot0(self, counts, priority):
        """The H-format for slot 0: most messages, the priority channel's first."""
        return self._best(self.h_formats, counts, priority)

    def choose_g(self, slot, rollover, counts):
        """The format for G-slot ``slot``; ``rollover`` means a rule forces G0 (a rollover chunk, or the
        first chunk of this flit's Data Header).  Data first."""
        if self.chunks:
            return self.g0
        return self._best(self.g_formats, counts)

    def _commit(self, fmt, placed, taken, counts, slot):
        """Pop what ``fmt`` carries, queue the chunks of its data headers; return the slot bits."""
        if taken[self.direction.data_channel]:
            self.hdr_slot = slot
        bits = 0
        for (item, offset, _), msg in zip(fmt.fields, placed):
            if msg is None:
                continue
            bits |= CODECS[item].encode(msg.fields) << offset
            if msg.data is not None:
                self.chunks.extend(msg.data[i:i + CHUNK_BYTES] for i in range(0, LINE_BYTES, CHUNK_BYTES))
        for ch, n in taken.items():
            for _ in range(n):
                self.queues[ch].popleft()
            counts[ch] += n
        return bits

    def _protocol_flit(self):
        counts = dict.fromkeys(self.direction.channels, 0)
        priority = self.direction.channels[self.priority]
        self.priority = (self.priority + 1) % len(self.direction.channels)
        rollover = len(self.chunks)               # owed at the start: slots 1..rollover must be G0
        self.hdr_slot = None                      # the slot of this flit that carries Data Headers
        header = {"type": 0}
        fmt = self.choose_slot0(counts, priority)
        header["slot0"] = fmt.code
        assert fmt in self.legal([fmt], counts), f"policy chose {fmt.name} for too few Data Headers"
        payload = self._commit(fmt, *self._fill(fmt, counts), counts, 0) << HEADER_BITS
        for s in range(1, SLOTS):
            # Forced G0: a rollover chunk, or the next slot for data after this flit's Data Header.
            forced = s <= rollover or (self.hdr_slot is not None and s == max(self.hdr_slot + 1, rollover + 1))
            fmt = self.choose_g(s, forced, counts)
            header[f"slot{s}"] = fmt.code
            if fmt.data:
                assert self.chunks, "policy chose G0 with no data chunk owed"
                payload |= int.from_bytes(self.chunks.popleft(), "little") << (SLOT_BITS * s)
            else:
                assert not forced, "policy broke the rollover or next-data-slot rule"
                assert fmt in self.legal([fmt], counts), f"policy chose {fmt.name} for too few Data Headers"
                payload |= self._commit(fmt, *self._fill(fmt, counts), counts, s) << (SLOT_BITS * s)
        header["sz"] = int(counts[self.direction.data_channel] > 0)   # data headers are 64 B lines
        if self.acks >= 8:                                          # Ak acknowledges 8 flits
            header["ak"] = 1
            self.acks -= 8
        codes = self._take_credits()
        header.update(req_crd=codes["req"], rsp_crd=codes["rsp"], data_crd=codes["data"])
        return payload | encode_header(header)


# ---------------------------------------------------------------- unpacker
class RxFlit(NamedTuple):
    """What one received flit delivered.  ``messages`` are complete messages in arrival order (a data
    header is delivered once its fourth chunk has arrived); credits are amounts, not codes."""
    kind: str                      # "protocol", "all-data" or "control"
    messages: list
    credits: Credits
    mem_credits: Credits
    acks: int
    control: Optional[ControlFlit]


class Unpacker:
    """RX side of one direction: checks CRC and every rule, decodes back to messages.

    A flit that breaks a rule raises :class:`FlitError` and leaves the unpacker as it was, so the
    caller (the retry logic) can drop it and carry on."""

    def __init__(self, direction):
        self.direction = Direction(direction)
        self.waiting = deque()     # [data header FlitMsg without data, bytearray of chunks so far]

    @property
    def owed(self):
        """Data chunks announced by headers and not yet received."""
        return sum(CHUNKS_PER_LINE - len(buf) // CHUNK_BYTES for _, buf in self.waiting)

    def receive(self, flit):
        flit = bytes(flit)
        if len(flit) != FLIT_BYTES:
            raise FlitError("length", f"a flit is {FLIT_BYTES} bytes, got {len(flit)}", "length")
        payload, crc = flit[:PAYLOAD_BYTES], int.from_bytes(flit[PAYLOAD_BYTES:], "little")
        good = crc16(payload)
        if crc != good:
            raise FlitError("CRC", f"received {crc:#06x}, payload gives {good:#06x}", "crc")
        value = int.from_bytes(payload, "little")
        waiting = deque([hdr, bytearray(buf)] for hdr, buf in self.waiting)   # commit only on success
        owed = self.owed
        out = []
        if owed >= CHUNKS_PER_LINE:
            for s in range(SLOTS):
                self._chunk(waiting, _get(value, SLOT_BITS * s, SLOT_BITS), out, "all-data flit")
            result = RxFlit("all-data", out, Credits(), Credits(), 0, None)
        elif value & 1:
            if owed:
                raise FlitError("Type", f"control flit while {owed} data chunk(s) are owed "
                                        "(they must roll over into this flit)", "control_rollover")
            ctl = decode_control(value)
            cache, mem, acks = Credits(), Credits(), 0
            if ctl.kind == "LLCRD":
                cache, mem = _credits({k: ctl.fields[f"{k}_crd"] for k in CREDIT_CLASSES})
                acks = ctl.fields["acks"]
            result = RxFlit("control", out, cache, mem, acks, ctl)
        else:
            result = self._protocol(value, owed, waiting, out)
        self.waiting = waiting
        return result

    def _chunk(self, waiting, bits, out, where):
        for hdr, buf in waiting:
            if len(buf) < LINE_BYTES:
                buf += bits.to_bytes(CHUNK_BYTES, "little")
                break
        else:
            raise FlitError(where, "G0 data slot but no data header is waiting for data", "no_data")
        while waiting and len(waiting[0][1]) == LINE_BYTES:
            hdr, buf = waiting.popleft()
            out.append(hdr._replace(data=bytes(buf)))

    def _protocol(self, value, owed, waiting, out):
        """Checks in this order (the RTL, hdl/link/rx.py, reports the first failing one the same way):
        header reserved bits, BE; per slot: format, rollover, next data slot, then for G0 a header
        waiting for the chunk, else padding, per message NDR / Valid / encodings / per-flit maximum,
        tight packing and the MDH slot rule; then the Data Headers of the flit, then Sz."""
        header = decode_header(value)
        if header["rsvd0"] or header["rsvd1"]:
            raise FlitError("reserved", "flit header bits 1 and 19:17 must be zero", "reserved")
        if header["be"]:
            raise FlitError("BE", "byte-enable data transfers are not supported (CXL.cache data is a full "
                                  "line)", "be_sz")
        data_chan = self.direction.data_channel
        counts = dict.fromkeys(self.direction.channels, 0)
        hdr_slots = {}                       # slot -> (valid Data Headers in it, MDH format)
        for s in range(SLOTS):
            name = f"Slot{s}"
            fmt = _format(self.direction, "H" if s == 0 else "G", header[f"slot{s}"], name)
            bits = (_get(value, HEADER_BITS, H_SLOT_BITS) if s == 0
                    else _get(value, SLOT_BITS * s, SLOT_BITS))
            if 1 <= s <= owed and not fmt.data:
                raise FlitError(name, f"{owed} data chunk(s) roll over into this flit, so slot {s} must "
                                      f"be G0, not {fmt.name}", "rollover")
            # "If a valid Data Header is packed in a given slot, the next available slot for data
            # transfer ... will be guaranteed to have data associated with the header": for a header
            # in slot h that slot is max(h + 1, owed + 1) (slots 1..owed carry the rollover).
            first = [h for h in hdr_slots if max(h + 1, owed + 1) == s]
            if first and not fmt.data:
                raise FlitError(name, f"slot {s} is the next slot for data after the Data Header in slot "
                                      f"{first[0]}, so it carries that header's first chunk (G0), not "
                                      f"{fmt.name}", "data_slot")
            if fmt.data:
                self._chunk(waiting, bits, out, name)
                continue
            if bits >> fmt.used_bits:
                raise FlitError(name, f"{fmt.name}: padding bit(s) {_bits(bits >> fmt.used_bits)} above "
                                      f"bit {fmt.used_bits - 1} are set", "reserved")
            seen = {}                        # channel -> Valid bits of its positions, in order
            for item, offset, width in fmt.fields:
                v = _get(bits, offset, width)
                if item == S2M_NDR:
                    if v:
                        raise FlitError(name, f"{fmt.name}: S2M NDR (CXL.mem) is not supported; its "
                                              f"{width} bits must be zero", "unsupported")
                    continue
                codec = CODECS[item]
                seen.setdefault(item, []).append(v & 1)
                if not v & 1:           # Valid is bit 0 of every message (hdl.protocol)
                    if v:
                        raise FlitError(name, f"{fmt.name}: invalid {item.name} with non-zero bits",
                                        "reserved")
                    continue
                try:
                    fields = codec.decode(v, strict=True)
                except ValueError as e:
                    raise FlitError(name, f"{fmt.name}: {e}", "message") from None
                counts[item] += 1
                if counts[item] > MAX_PER_FLIT[item]:
                    raise FlitError(name, f"more than {MAX_PER_FLIT[item]} {item.name} messages in one flit",
                                    "max")
                msg = FlitMsg(item, fields)
                if item in DATA_CHANNELS:
                    waiting.append([msg, bytearray()])
                else:
                    out.append(msg)
            for item, valid in seen.items():
                if any(not a and b for a, b in zip(valid, valid[1:])):
                    raise FlitError(name, f"{fmt.name}: {item.name} messages are not tightly packed "
                                          f"(Valid by position: {valid})", "packing")
            n_hdrs = sum(seen.get(data_chan, ()))
            if fmt.mdh and n_hdrs < 2:
                raise FlitError(name, f"{fmt.name} is a multi-data-header (MDH) slot; it may be chosen only "
                                      f"for 2 or more Data Headers, not {n_hdrs}", "mdh")
            if n_hdrs:
                hdr_slots[s] = (n_hdrs, fmt.mdh)
        total = counts[data_chan]
        if total > 1 and not any(mdh and n == total for n, mdh in hdr_slots.values()):
            raise FlitError("DataHeaders", f"{total} valid Data Headers in slots {sorted(hdr_slots)}: a flit "
                                           "without an MDH slot carries at most 1, and a flit with one "
                                           "carries no other", "mdh")
        if header["sz"] != (total > 0):
            raise FlitError("Sz", "must be 1 exactly when the flit carries a data header (64 B lines; "
                                  "32 B transfers are not supported)", "be_sz")
        cache, mem = _credits({k: header[f"{k}_crd"] for k in CREDIT_CLASSES})
        return RxFlit("protocol", out, cache, mem, 8 * header["ak"], None)


def _credits(codes):
    amounts = {CreditProtocol.CACHE: dict.fromkeys(CREDIT_CLASSES, 0),
               CreditProtocol.MEM: dict.fromkeys(CREDIT_CLASSES, 0)}
    for name, code in codes.items():
        protocol, n = decode_credit(code)
        amounts[protocol][name] = n
    return Credits(**amounts[CreditProtocol.CACHE]), Credits(**amounts[CreditProtocol.MEM])


# ---------------------------------------------------------------- whole streams
class Unpacked(NamedTuple):
    messages: dict            # channel -> list of FlitMsg, in arrival order
    credits: Credits
    mem_credits: Credits
    acks: int
    controls: list


def pack(direction, messages, credits=Credits(), acks=0):
    """Pack ``messages`` (FlitMsg, per-channel order = list order) plus credit returns and acks."""
    packer = Packer(direction)
    for msg in messages:
        packer.push(msg)
    packer.return_credits(*credits)
    packer.acknowledge(acks)
    return packer.drain()


def unpack(direction, flits, *, complete=True):
    """Decode a flit stream.  With ``complete``, data still owed at the end is an error."""
    rx = Unpacker(direction)
    messages = {ch: [] for ch in rx.direction.channels}
    credits, mem_credits, acks, controls = Credits(), Credits(), 0, []
    for flit in flits:
        r = rx.receive(flit)
        for msg in r.messages:
            messages[msg.chan].append(msg)
        credits += r.credits
        mem_credits += r.mem_credits
        acks += r.acks
        if r.control is not None:
            controls.append(r.control)
    if complete and rx.owed:
        raise FlitError("stream", f"ends with {rx.owed} data chunk(s) owed", "stream")
    return Unpacked(messages, credits, mem_credits, acks, controls)


# ---------------------------------------------------------------- random mixes and vectors
def random_msg(rng, chan):
    """A random valid message; field ranges come from the codec (reserved fields 0)."""
    fields = {}
    for name, _, width, enum_cls in CODECS[chan].fields:
        if name == "valid" or name.startswith("rsvd"):
            continue
        fields[name] = rng.choice(list(enum_cls)) if enum_cls is not None else rng.getrandbits(width)
    data = rng.randbytes(LINE_BYTES) if chan in DATA_CHANNELS else None
    return make_msg(chan, fields, data)


def random_mix(rng):
    """One random mix: (direction, messages, credits, acks).  Shapes vary so that the vectors cover
    empty mixes (LLCRD only), single-channel bursts (all-data flits, per-flit maxima) and mixtures."""
    direction = rng.choice(list(Direction))
    chans = direction.channels
    shape = rng.randrange(4)
    if shape == 0:                                  # even mixture
        weights = (1, 1, 1)
    elif shape == 1:                                # data heavy: long all-data runs
        weights = (1, 1, 4)
    elif shape == 2:                                # one channel only
        only = rng.choice(chans)
        weights = tuple(int(c is only) for c in chans)
    else:                                           # request/response heavy
        weights = (3, 3, 1)
    n = rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 40)))
    messages = [random_msg(rng, ch) for ch in rng.choices(chans, weights, k=n)]
    credits = Credits(*(rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 300))) for _ in CREDIT_CLASSES))
    acks = rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 600)))
    return direction, messages, credits, acks


def write_vectors(path, count=1000, seed=1):
    """``count`` seeded random mixes, one JSON line each.  Besides the ``messages`` and ``flits`` the
    issue asks for, a line names its ``direction`` (the slot formats depend on it) and the ``credits``
    and ``acks`` handed to the packer before packing (they ride in the headers and in LLCRDs)."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for _ in range(count):
            direction, messages, credits, acks = random_mix(rng)
            flits = pack(direction, messages, credits, acks)
            line = {"direction": direction.value, "credits": credits._asdict(), "acks": acks,
                    "messages": [msg_to_json(m) for m in messages],
                    "flits": [frame(fl).hex() for fl in flits]}
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path


# ---------------------------------------------------------------- efficiency
WORKLOADS = ("streaming_reads", "streaming_writes", "snoop_storm", "mixed")

# The mixed workload, per 4 transactions: 2 reads (D2H Req up; H2D Rsp GO + H2D DataHdr with the line
# down), 1 write-back (D2H Req up; H2D Rsp GO_WritePull down; D2H DataHdr with the line up) and 1 snoop
# (H2D Req down; D2H Rsp up).  An assumption: a read-mostly coherent mix with some write-back and snoop
# traffic, not a measured trace.
MIXED = {Channel.D2H_REQ: 3, Channel.H2D_RSP: 3, Channel.H2D_DATA: 2, Channel.D2H_DATA: 1,
         Channel.H2D_REQ: 1, Channel.D2H_RSP: 1}


def _payload_bytes(msg):
    # Useful bytes of a message: its layout's bits (hdl.protocol widths) plus the line it carries.
    return CODECS[msg.chan].width / 8 + (LINE_BYTES if msg.data is not None else 0)


def _workload(workload, n, rng):
    """(direction, messages) streams of a workload with ``n`` lines or snoops."""
    if n < 1:
        raise ValueError(f"a workload needs at least one line or snoop, got n={n}")
    if workload == "streaming_reads":        # host returns read data: H2D DataHdr + line
        return [(Direction.DOWNSTREAM, [random_msg(rng, Channel.H2D_DATA) for _ in range(n)])]
    if workload == "streaming_writes":       # device writes back: D2H DataHdr + line
        return [(Direction.UPSTREAM, [random_msg(rng, Channel.D2H_DATA) for _ in range(n)])]
    if workload == "snoop_storm":            # snoops down, their (dataless) responses up
        return [(Direction.DOWNSTREAM, [random_msg(rng, Channel.H2D_REQ) for _ in range(n)]),
                (Direction.UPSTREAM, [random_msg(rng, Channel.D2H_RSP) for _ in range(n)])]
    if workload == "mixed":                  # n transactions in the MIXED proportions, interleaved
        out = []
        for direction in (Direction.DOWNSTREAM, Direction.UPSTREAM):
            msgs = []
            for i in range(0, n, 4):
                for chan in direction.channels:
                    msgs += [random_msg(rng, chan) for _ in range(MIXED[chan] * min(4, n - i) // 4)]
            out.append((direction, msgs))
        return out
    raise ValueError(f"unknown workload {workload!r}; known: {WORKLOADS}")


def optimum(workload, n=None):
    """The analytic optimum payload efficiency (payload bytes / 68 wire bytes per flit) of a workload of
    ``n`` lines or snoops (None: the limit as n grows).  For ``mixed`` it is a bound (``"bound": True``):
    the efficiency at the fewest flits that slot capacity and the per-flit maxima allow.

    Streaming: each line needs 4 G0 slots and a data header; at most 4 data headers fit a slot and a
    flit (facts §2.2), so n lines need at least 4n + ceil(n/4) slots, i.e. ceil((4n + ceil(n/4)) / 4)
    flits; the limit is 17 flits per 16 lines.  Snoop storm: at most 2 H2D Req per downstream flit and
    at most 2 D2H Rsp per upstream flit (facts §2.2), so ceil(n/2) flits each way."""
    rng = random.Random(0)
    streams = _workload(workload, 16 if n is None else n, rng)
    payload = sum(_payload_bytes(m) for _, msgs in streams for m in msgs)
    data = sum(LINE_BYTES for _, msgs in streams for m in msgs if m.data is not None)
    if workload == "mixed":
        # No closed form: a lower bound on flits per direction, so an upper bound on efficiency.  A
        # flit has 4 slots; a data chunk fills one G slot; no slot carries more than 128 bits of
        # messages; and no flit carries more than MAX_PER_FLIT of a channel (facts §2.2).
        flits = 0
        for direction, msgs in streams:
            chunks = sum(CHUNKS_PER_LINE for m in msgs if m.data is not None)
            bits = sum(CODECS[m.chan].width for m in msgs)
            per_chan = [sum(m.chan is c for m in msgs) for c in direction.channels]
            flits += max(math.ceil((chunks + math.ceil(bits / SLOT_BITS)) / SLOTS),
                         *(math.ceil(k / MAX_PER_FLIT[c]) for k, c in zip(per_chan, direction.channels)))
        wire = WIRE_BYTES * flits
        return {"efficiency": payload / wire, "data_efficiency": data / wire, "flits": flits, "bound": True}
    if n is None:       # per 16 lines / snoops, the periodic pattern
        flits = 17 if workload != "snoop_storm" else 16
    elif workload == "snoop_storm":
        flits = 2 * math.ceil(n / 2)
    else:
        flits = math.ceil((CHUNKS_PER_LINE * n + math.ceil(n / 4)) / SLOTS)
    wire = WIRE_BYTES * flits
    return {"efficiency": payload / wire, "data_efficiency": data / wire, "flits": flits}


def efficiency(workload, n=1024, seed=0):
    """Measured payload efficiency of :class:`Packer` on a workload, beside its analytic optimum.

    Payload bytes = the bits of every message (at its hdl.protocol width) / 8, plus 64 B per data line;
    wire bytes = 68 per flit (protocol ID and CRC counted), both directions together for the snoop storm.
    ``data_efficiency`` counts only the 64 B lines.  Returns a dict with the measured figures, the
    finite-``n`` optimum and the limit as n grows."""
    rng = random.Random(seed)
    flits, payload, data = 0, 0.0, 0
    for direction, msgs in _workload(workload, n, rng):
        out = pack(direction, msgs)
        got = unpack(direction, out)                          # the measurement is of a correct stream
        for chan in direction.channels:
            assert got.messages[chan] == [m for m in msgs if m.chan is chan]
        flits += len(out)
        payload += sum(_payload_bytes(m) for m in msgs)
        data += sum(LINE_BYTES for m in msgs if m.data is not None)
    wire = WIRE_BYTES * flits
    return {"workload": workload, "n": n, "flits": flits, "efficiency": payload / wire,
            "data_efficiency": data / wire, "optimum": optimum(workload, n),
            "limit": optimum(workload)}


# ---------------------------------------------------------------- command line
def main(argv=None):
    """``python -m models.flit decode|encode ...`` (a flit decoder for people, models/flit_json.py) or
    the vector / efficiency options."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("decode", "encode"):
        return _json_main(argv)
    ap = argparse.ArgumentParser(prog="python -m models.flit", description=__doc__.split("\n")[0],
                                 epilog="Also: python -m models.flit decode|encode --help")
    ap.add_argument("--vectors", type=Path, help="write random-mix test vectors (JSON lines) here")
    ap.add_argument("--count", type=int, default=1000, help="number of mixes (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--efficiency", action="store_true",
                    help="print payload efficiency of each workload beside its optimum")
    args = ap.parse_args(argv)
    if args.vectors is None and not args.efficiency:
        ap.error("nothing to do: give --vectors PATH and/or --efficiency (or decode / encode)")
    if args.vectors is not None:
        write_vectors(args.vectors, args.count, args.seed)
        print(f"wrote {args.count} mixes to {args.vectors}")
    if args.efficiency:
        for w in WORKLOADS:
            e = efficiency(w)
            print(f"{w:17s} n={e['n']}: {e['flits']} flits, efficiency {e['efficiency']:.4f} "
                  f"(optimum {e['optimum']['efficiency']:.4f}, limit {e['limit']['efficiency']:.4f}); "
                  f"data only {e['data_efficiency']:.4f} (optimum {e['optimum']['data_efficiency']:.4f})")
    return 0


def _json_main(argv):
    from models.flit_json import decode_stream, encode_flit, parse_hex
    ap = argparse.ArgumentParser(prog="python -m models.flit")
    sub = ap.add_subparsers(dest="cmd", required=True)
    dec = sub.add_parser("decode", help="68-byte flits (hex, make vectors byte order) -> one JSON object per flit",
                         description="Decode a stream of 68-byte flits (hex; one per argument, or one per line "
                                     "on stdin) with the golden unpacker: kind, header, slots and messages as "
                                     "JSON lines, or the rule a flit breaks with its specification reference. "
                                     "Exit status 1 if any flit is rejected.")
    dec.add_argument("-d", "--direction", required=True, choices=[d.value for d in Direction],
                     help="upstream = D2H flits (device to host), downstream = H2D")
    dec.add_argument("flits", nargs="*", help="flits in hex (default: read lines from stdin)")
    enc = sub.add_parser("encode", help="JSON objects as decode prints them -> 68-byte flits in hex",
                         description="Encode JSON objects (one per line on stdin, or one per argument) as "
                                     "decode prints them back into 68-byte flits, one hex line each.")
    enc.add_argument("objects", nargs="*", help="JSON objects (default: read lines from stdin)")
    args = ap.parse_args(argv)
    lines = args.flits if args.cmd == "decode" else args.objects
    if not lines:
        lines = [ln for ln in sys.stdin.read().splitlines() if ln.strip()]
    try:
        if args.cmd == "decode":
            wire = [parse_hex(t, f"flit {n}") for n, t in enumerate(lines)]
            bad = 0
            for obj in decode_stream(args.direction, wire):
                bad += "error" in obj
                print(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))
            return 1 if bad else 0
        for n, text in enumerate(lines):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"object {n}: not JSON: {e}") from None
            print(encode_flit(obj, f"object {n}").hex())
        return 0
    except (ValueError, TypeError) as e:
        print(f"python -m models.flit {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
