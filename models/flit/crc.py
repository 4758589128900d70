"""The 16-bit CRC of a 68B flit, computed by the golden model, and the flit's framing.

The polynomial is defined once (:mod:`cxl.crc`, with the XOR masks the RTL uses); this module computes
the CRC independently (serial and table forms), and the tests check the implementations against each
other.  :func:`seal` appends the CRC; :func:`frame` / :func:`deframe` add and remove the 2-byte
protocol ID of the wire.

# Ref: docs/sources.md §2.3 (CRC-16 polynomial 0x1F053, serial form, CRC in bits 527:512).
"""

from cxl.crc import CRC_POLY
from cxl.flit import CRC_BYTES, FLIT_BYTES, PAYLOAD_BITS, PAYLOAD_BYTES, PROTOCOL_ID, WIRE_BYTES, FlitError

__all__ = ["crc16_serial", "crc16", "seal", "frame", "deframe"]

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
