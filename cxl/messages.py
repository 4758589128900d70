"""CXL.cache message formats: the one definition used by the RTL, the golden model and the VIP.

Every field width and opcode encoding of the six CXL.cache channels lives here and nowhere else.
The layouts are Amaranth ``lib.data`` structs (usable directly as RTL signal shapes); the opcodes are
``lib.enum`` enums with explicit shapes.  :class:`MessageCodec` packs and unpacks the same layouts to
and from plain Python integers, for the golden model, the test vectors and the cocotb VIP; it reads
the field offsets from the Amaranth layout, so it cannot disagree with the RTL.

Fields are listed least-significant first: ``valid`` is bit 0 of every message.

# Ref: docs/sources.md §1.2 (D2H Req opcodes), §1.3 (H2D Rsp opcodes, GO state,
#      RSP_PRE), §1.4 (H2D Req opcodes), §1.5 (D2H Rsp opcodes), §1.6 (68B-flit field widths, CXL 2.0).
"""

from amaranth.lib import data, enum

__all__ = [
    "D2HReqOpcode", "D2HRspOpcode", "H2DReqOpcode", "H2DRspOpcode", "GO_OPCODES", "GOState", "RspPre",
    "D2HReq", "D2HRsp", "D2HDataHdr", "H2DReq", "H2DRsp", "H2DDataHdr",
    "Channel", "CHANNEL_LAYOUTS", "MessageCodec", "CODECS",
    "ADDR_WIDTH", "ID_WIDTH", "LINE_BYTES", "MAX_IDS",
]

# Ref: docs/sources.md §1.6: Addr is HPA[51:6] (46 bits, 64 B lines); CQID and UQID are 12 bits.
ADDR_WIDTH = 46
ID_WIDTH = 12
MAX_IDS = 1 << ID_WIDTH
LINE_BYTES = 64


class D2HReqOpcode(enum.Enum, shape=5):
    """D2H request opcodes. Ref: docs/sources.md §1.2 [C2]."""
    RdCurr = 0b00001
    RdOwn = 0b00010
    RdShared = 0b00011
    RdAny = 0b00100
    RdOwnNoData = 0b00101
    ItoMWr = 0b00110
    WrCur = 0b00111
    CLFlush = 0b01000
    CleanEvict = 0b01001
    DirtyEvict = 0b01010
    CleanEvictNoData = 0b01011
    WOWrInv = 0b01100
    WOWrInvF = 0b01101
    WrInv = 0b01110
    CacheFlushed = 0b10000

    __hash__ = object.__hash__      # identity, as cxl.coherence.MESI: the golden model hashes these often


class D2HRspOpcode(enum.Enum, shape=5):
    """D2H (snoop) response opcodes. Ref: docs/sources.md §1.5 [C2]."""
    RspSHitSE = 0b00001
    RspIHitI = 0b00100
    RspIHitSE = 0b00101
    RspVHitV = 0b00110
    RspSFwdM = 0b00111
    RspIFwdM = 0b01111
    RspVFwdV = 0b10110

    __hash__ = object.__hash__      # identity, as cxl.coherence.MESI: the golden model hashes these often


class H2DReqOpcode(enum.Enum, shape=3):
    """H2D request (snoop) opcodes. Ref: docs/sources.md §1.4 [C2]."""
    SnpData = 0b001
    SnpInv = 0b010
    SnpCur = 0b011

    __hash__ = object.__hash__      # identity, as cxl.coherence.MESI: the golden model hashes these often


class H2DRspOpcode(enum.Enum, shape=4):
    """H2D response opcodes. Ref: docs/sources.md §1.3 [C2]; Fast_GO (1100) is [U] (reserved after CXL 1.1)."""
    WritePull = 0b0001
    GO = 0b0100
    GO_WritePull = 0b0101
    ExtCmp = 0b0110
    GO_WritePull_Drop = 0b1000
    Fast_GO = 0b1100
    Fast_GO_WritePull = 0b1101
    GO_ERR_WritePull = 0b1111

    __hash__ = object.__hash__      # identity, as cxl.coherence.MESI: the golden model hashes these often


# The H2D Rsp opcodes that carry a GO (global observation, the grant that completes a request), by the
# specification's names.  CXL 3.x §3.2.5.2's "no GO to a line while a snoop to it is pending"
# (docs/sources.md §1.7) is about every one of them (formal/dcoh_one_response_harness.py assumes it so).
GO_OPCODES = frozenset({H2DRspOpcode.GO, H2DRspOpcode.GO_WritePull, H2DRspOpcode.GO_WritePull_Drop,
                        H2DRspOpcode.Fast_GO, H2DRspOpcode.Fast_GO_WritePull, H2DRspOpcode.GO_ERR_WritePull})


class GOState(enum.Enum, shape=4):
    """Cache state granted by a GO, carried in RspData[3:0]. Ref: docs/sources.md §1.3 [C2]."""
    Shared = 0b0001
    Exclusive = 0b0010
    Invalid = 0b0011
    Error = 0b0100
    Modified = 0b0110

    __hash__ = object.__hash__      # identity, as cxl.coherence.MESI: the golden model hashes these often


class RspPre(enum.Enum, shape=2):
    """RSP_PRE field of H2D Rsp. Ref: docs/sources.md §1.3 [C]. 0b11 is reserved."""
    LocalMiss = 0b00
    HostHit = 0b01
    RemoteMiss = 0b10


class D2HReq(data.Struct):
    """D2H Req, 79 bits. Ref: docs/sources.md §1.6."""
    valid: 1
    opcode: D2HReqOpcode
    cqid: ID_WIDTH
    nt: 1
    rsvd0: 7
    addr: ADDR_WIDTH
    rsvd1: 7


class D2HRsp(data.Struct):
    """D2H Rsp, 20 bits. Ref: docs/sources.md §1.6."""
    valid: 1
    opcode: D2HRspOpcode
    uqid: ID_WIDTH
    rsvd0: 2


class D2HDataHdr(data.Struct):
    """D2H Data header, 17 bits (the 64 B line follows in data chunks). Ref: docs/sources.md §1.6."""
    valid: 1
    uqid: ID_WIDTH
    chunk_valid: 1
    bogus: 1
    poison: 1
    rsvd0: 1


class H2DReq(data.Struct):
    """H2D Req (snoop), 64 bits. Ref: docs/sources.md §1.6."""
    valid: 1
    opcode: H2DReqOpcode
    addr: ADDR_WIDTH
    uqid: ID_WIDTH
    rsvd0: 2


class H2DRsp(data.Struct):
    """H2D Rsp, 32 bits.  ``rsp_data`` holds a :class:`GOState` in bits 3:0 for GO, or the host's
    UQID (write-buffer tag) for the WritePull family.  Ref: docs/sources.md §1.6, §1.3."""
    valid: 1
    opcode: H2DRspOpcode
    rsp_data: ID_WIDTH
    rsp_pre: RspPre
    cqid: ID_WIDTH
    rsvd0: 1


class H2DDataHdr(data.Struct):
    """H2D Data header, 24 bits. Ref: docs/sources.md §1.6."""
    valid: 1
    cqid: ID_WIDTH
    chunk_valid: 1
    poison: 1
    go_err: 1
    rsvd0: 8


class Channel(enum.IntEnum):
    """The six CXL.cache channels (Ref: docs/sources.md §1.1).  Not a wire encoding: a name for each."""
    D2H_REQ = 0
    D2H_RSP = 1
    D2H_DATA = 2
    H2D_REQ = 3
    H2D_RSP = 4
    H2D_DATA = 5

    @property
    def upstream(self):
        """True for device-to-host channels."""
        return self <= Channel.D2H_DATA


CHANNEL_LAYOUTS = {
    Channel.D2H_REQ: D2HReq,
    Channel.D2H_RSP: D2HRsp,
    Channel.D2H_DATA: D2HDataHdr,
    Channel.H2D_REQ: H2DReq,
    Channel.H2D_RSP: H2DRsp,
    Channel.H2D_DATA: H2DDataHdr,
}


class MessageCodec:
    """Packs a message (a mapping of field name to value) into the integer the RTL carries, and back.

    Field offsets and widths come from the Amaranth layout; enum fields accept and return enum members.
    ``valid`` defaults to 1 and reserved fields (``rsvd*``) to 0; any other field left out is an error,
    as is a value that does not fit its field or an encoding that is not a member of its enum.
    """

    def __init__(self, struct):
        self.struct = struct
        self.layout = data.Layout.cast(struct)
        self.width = self.layout.size
        self.fields = []
        for name, field in self.layout:
            shape = field.shape
            enum_cls = shape if isinstance(shape, type) and issubclass(shape, enum.Enum) else None
            self.fields.append((name, field.offset, field.width, enum_cls))
        self.names = [name for name, *_ in self.fields]
        self.payload_names = [n for n in self.names if n != "valid" and not n.startswith("rsvd")]
        # what decode() walks: each field's offset, mask and, for an enum, its members by encoding (a dict
        # lookup: calling the enum class costs several times more, and testbenches decode every message)
        self._unpack = [(name, offset, (1 << width) - 1, {m.value: m for m in enum_cls} if enum_cls else None,
                         enum_cls) for name, offset, width, enum_cls in self.fields]

    def __repr__(self):
        return f"MessageCodec({self.struct.__name__}, {self.width} bits)"

    def encode(self, fields=None, **kwargs):
        fields = dict(fields or {}, **kwargs)
        unknown = set(fields) - set(self.names)
        if unknown:
            raise ValueError(f"{self.struct.__name__}: unknown field(s) {sorted(unknown)}")
        value = 0
        for name, offset, width, enum_cls in self.fields:
            if name in fields:
                v = fields[name]
            elif name == "valid":
                v = 1
            elif name.startswith("rsvd"):
                v = 0
            else:
                raise ValueError(f"{self.struct.__name__}: field {name!r} missing")
            if enum_cls is not None:
                v = enum_cls(v).value  # raises ValueError naming the bad encoding
            v = int(v)
            if not 0 <= v < (1 << width):
                raise ValueError(f"{self.struct.__name__}.{name}: {v} does not fit in {width} bits")
            value |= v << offset
        return value

    def decode(self, value, *, strict=True):
        """Unpack an integer.  With ``strict``, an encoding outside an enum raises ValueError naming
        the field (an illegal opcode from a peer); otherwise the raw integer is returned for it."""
        value = int(value)
        if not 0 <= value < (1 << self.width):
            raise ValueError(f"{self.struct.__name__}: {value:#x} is wider than {self.width} bits")
        out = {}
        for name, offset, mask, members, enum_cls in self._unpack:
            v = (value >> offset) & mask
            if members is not None:
                member = members.get(v)
                if member is not None:
                    v = member
                elif strict:
                    raise ValueError(f"{self.struct.__name__}.{name}: {v:#0{mask.bit_length() + 2}b} is not a "
                                     f"{enum_cls.__name__} encoding")
            out[name] = v
        return out


CODECS = {channel: MessageCodec(struct) for channel, struct in CHANNEL_LAYOUTS.items()}
