"""The 16-bit CRC of a 68B flit, as one XOR tree per CRC bit over the 512-bit payload.

Combinational: ``crc`` follows ``payload`` in the same cycle (a caller that needs timing closure
registers it).  The XOR masks are derived at elaboration from the polynomial alone: the serial
definition feeds payload bits 511 down to 0 into a CRC-16 register (initial 0, no reflection, no final
XOR), so payload bit i contributes x^(16+i) mod P to the result.  The golden model (``models.flit``)
is an independent implementation; tests/test_rtl_crc.py checks one against the other.

# Ref: docs/sources.md §2.3 (polynomial 0x1F053, serial form, CRC in flit bits 527:512).
"""

from amaranth.hdl import Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CRC_POLY", "PAYLOAD_BITS", "crc_masks", "FlitCRC"]

CRC_POLY = 0x1F053        # x^16+x^15+x^14+x^13+x^12+x^6+x^4+x+1, facts §2.3
PAYLOAD_BITS = 512
CRC_BITS = 16


def crc_masks(poly=CRC_POLY, payload_bits=PAYLOAD_BITS):
    """masks[j]: the payload bits whose XOR is CRC bit j."""
    low = poly & ((1 << CRC_BITS) - 1)
    top = 1 << (CRC_BITS - 1)
    masks = [0] * CRC_BITS
    reg = low                       # register right after a single 1 is fed in: x^16 mod P
    for i in range(payload_bits):   # ... then i zero bits follow it: x^(16+i) mod P
        for j in range(CRC_BITS):
            if (reg >> j) & 1:
                masks[j] |= 1 << i
        reg = ((reg << 1) & ((1 << CRC_BITS) - 1)) ^ (low if reg & top else 0)
    return masks


class FlitCRC(wiring.Component):
    payload: In(PAYLOAD_BITS)
    crc: Out(CRC_BITS)

    def elaborate(self, platform):
        m = Module()
        for j, mask in enumerate(crc_masks()):
            m.d.comb += self.crc[j].eq((self.payload & Const(mask, PAYLOAD_BITS)).xor())
        return m
