"""The 68B flit of CXL.cache (CXL 2.0): sizes, the protocol-flit header, the H/G slot formats, the
per-flit message maxima, and the rules a flit can break (:data:`RULE_REFS`, :class:`FlitError`).

These are definitions, shared by the golden model (``models.flit``: packer, unpacker) and the RTL
(``hdl.link``: packer, unpacker, port), which read them at elaboration; nothing here packs or checks a
stream.  Message widths come from :mod:`cxl.messages` (``CODECS``); nothing here restates one.

Flit (528 bits): payload bits 511:0 are four 16-byte slots, slot ``s`` at bits ``128*s+127 : 128*s``;
the CRC sits in bits 527:512 (:mod:`cxl.crc`).  As bytes (what the RTL and the vectors use), payload bit
``i`` is bit ``i % 8`` of byte ``i // 8``: slot 0 byte 0 first, then the two CRC bytes, low byte first.
On the wire the logical PHY puts the 2-byte protocol ID 5555h in front, 68 bytes in all.

A protocol flit (Type = 0) has the 32-bit header in slot 0 bits 31:0 (:data:`HEADER_FIELDS`), so slot 0
is an H-slot with 96 bits for messages at payload bits 127:32; slots 1-3 are G-slots of 128 bits.
Inside a slot the format's messages are packed least-significant first, in the order the one format
table (``_FORMAT_TABLE``, compiled into :data:`SLOT_FORMATS`) lists them, each at its
``CODECS[chan].width``; the bits above the last message are zero.  An absent message is all zeros (its
Valid bit, bit 0, clear).  The position of every field agrees with the slot figures of the
specification (CXL 1.1 Figures 45-71, CXL 3.x Figures 4-6 to 4-34; docs/conformance.md).

Formats left out: the CXL.mem-only formats (downstream H4 M2S RwD, H5 M2S Req, G4 M2S Req + H2D DataHdr,
G5 M2S RwD + H2D Rsp; upstream H3 S2M DRS + NDR, H4, H5, G4, G5, G6) and H6 (IDE MAC): ``SLOT_FORMATS``
omits them and :func:`slot_format` raises :class:`FlitError` ("not supported"), as it does for the
encodings no format uses ("reserved").  Upstream H0 has room for an S2M NDR (30 bits, CXL.mem): it is
always zero here, because this model has no CXL.mem channel.

# Ref: docs/sources.md §2.1 (528-bit flit, protocol ID 5555h, header bit positions),
#      §2.2 (H/G slot formats both directions, format encodings, maximum messages per flit),
#      §1.1, §1.6 (channels, full-line data, message widths via cxl.messages);
#      CXL 1.1 §4.2.2-4.2.5 and CXL 3.x §4.2.2-4.2.5 (docs/conformance.md).
"""

import enum
from typing import NamedTuple

from cxl.messages import CODECS, LINE_BYTES, Channel

__all__ = [
    "RULE_REFS", "FlitError", "PROTOCOL_ID", "SLOTS", "SLOT_BYTES", "SLOT_BITS", "PAYLOAD_BYTES",
    "PAYLOAD_BITS", "CRC_BYTES", "FLIT_BYTES", "WIRE_BYTES", "HEADER_BITS", "H_SLOT_BITS", "CHUNK_BYTES",
    "CHUNKS_PER_LINE", "S2M_NDR_WIDTH", "Direction", "DATA_CHANNELS", "MAX_PER_FLIT", "ORDERED_BEHIND", "AK_FLITS",
    "ACKS_DUE", "CREDITS_DUE", "MAX_PACK_WAIT", "MAX_CREDIT_BATCH", "check_pack_wait",
    "check_credit_batch", "DEFAULT_PACK_WAIT", "get_bits",
    "mask_bits", "bits_text", "HEADER_FIELDS", "encode_header", "decode_header", "DATA", "S2M_NDR",
    "SlotFormat", "SLOT_FORMATS", "slot_format",
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

# S2M NDR is a CXL.mem message and so not in cxl.messages; upstream H0 reserves room for it.
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

# GO before snoop: per direction, (a channel, the channel none of its messages may overtake).  CXL 3.x
# §3.2.5.2 (also 2.0): a snoop the host sends after a GO to the same address must see the GO, and the
# CXL.cache link layer delivers the two in separate slots so that their order is unambiguous.  An H2D Rsp
# carries no address, so the packers (models.flit.packer, hdl/link/tx.py) put an H2D Req only in a flit
# after every H2D Rsp queued before it.  Nothing is ordered upstream.  Ref: docs/sources.md §1.7.
ORDERED_BEHIND = {Direction.DOWNSTREAM: (Channel.H2D_REQ, Channel.H2D_RSP)}

# Waiting to fill a flit (the packers' ``wait`` knob: models.flit.packer, hdl/link/tx.py); a policy of
# this model, not of the specification.  A hold ends at once when ACKS_DUE acks or CREDITS_DUE credits
# of one class wait.  Both are assumptions.  ACKS_DUE: two Ak's worth (Ak acknowledges AK_FLITS = 8
# flits, docs/sources.md §2.1): the held flit carries one Ak when it goes, so a hold never keeps more
# than one further Ak back (at 8, every eighth flit of a busy link would leave half empty).  CREDITS_DUE:
# half of the largest amount one flit returns (64, docs/sources.md §2.4).  Smaller amounts wait at most
# ``wait`` decisions.
AK_FLITS = 8
ACKS_DUE = 2 * AK_FLITS
CREDITS_DUE = 32
MAX_PACK_WAIT = 255     # an assumption: a bound for the hold counter, far above any useful wait
# Batching credit returns on a quiet link (the packers' ``credit_batch``): at most the largest amount one
# credit field returns (64, docs/sources.md §2.4), so a full batch always fits one LLCRD per class.
MAX_CREDIT_BATCH = 64


def check_pack_wait(value, name="wait"):
    """``value`` if it is a legal packer wait (an integer 0..MAX_PACK_WAIT), else a ValueError naming
    ``name`` (the packers' ``wait``, the link port's ``pack_wait``)."""
    return _check_int(name, value, 0, MAX_PACK_WAIT, "decisions a partly filled flit may be held")


def check_credit_batch(value, name="credit_batch"):
    """``value`` if it is a legal credit batch (an integer 1..MAX_CREDIT_BATCH), else a ValueError naming
    ``name``."""
    return _check_int(name, value, 1, MAX_CREDIT_BATCH, "credits an idle packer gathers before an LLCRD; 1: at once")


def _check_int(name, value, lo, hi, meaning):
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name}={value!r}: must be an integer {lo}..{hi} ({meaning})")
    return value
# The link ports' default wait (``LinkPort(pack_wait=...)``; an assumption, chosen by measurement):
# 3 decisions.  The packers themselves (``Packer``, ``FlitPacker``) default to 0, the eager policy.
# A packer holds only within ``wait`` decisions of its last protocol flit, so a quiet link sends a lone
# message at once and pays nothing for it.  bench/link_bench.py sweeps it (docs/link_layer.md,
# "Waiting to fill a flit"): with 3 and the link port's 8-deep packer queues the RTL loopback reaches
# 0.99 of the optimum on streaming and on snoop storms and 0.97 on the mixed workload (paced or not);
# the golden loop's least wait reaching 0.97 on mixed traffic is 3.
DEFAULT_PACK_WAIT = 3

# ---------------------------------------------------------------- bit fields
def get_bits(value, offset, width):
    return (value >> offset) & ((1 << width) - 1)


def mask_bits(offset, width):
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
    return {name: get_bits(value, offset, width) for name, offset, width in HEADER_FIELDS}


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


def slot_format(direction, kind, code, field):
    """The supported format for a header code, or FlitError naming the slot field."""
    fmt = SLOT_FORMATS.get((direction, kind, code))
    if fmt is not None:
        return fmt
    why = _FORMAT_TABLE[direction].get((kind, code))
    if why is None:
        raise FlitError(field, f"{direction.value} format {kind}{code} ({code:03b}) is reserved", "format")
    raise FlitError(field, f"{direction.value} format {kind}{code}: {why}", "unsupported")


def bits_text(value, limit=6):
    bits = [i for i in range(value.bit_length()) if value >> i & 1]
    text = ", ".join(map(str, bits[:limit]))
    return text + (", ..." if len(bits) > limit else "")
