"""The 16-bit CRC of a 68B flit, as one XOR tree per CRC bit over the 512-bit payload.

Combinational: ``crc`` follows ``payload`` in the same cycle (a caller that needs timing closure
registers it).  The polynomial and the XOR masks are defined in :mod:`cxl.crc` (derived from the
polynomial alone); the golden model (``models.flit.crc``) is an independent implementation, and
tests/test_rtl_crc.py checks one against the other.

# Ref: docs/sources.md §2.3 (polynomial 0x1F053, serial form, CRC in flit bits 527:512).
"""

from amaranth.hdl import Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from cxl.crc import CRC_BITS, PAYLOAD_BITS, crc_masks

__all__ = ["FlitCRC"]


class FlitCRC(wiring.Component):
    payload: In(PAYLOAD_BITS)
    crc: Out(CRC_BITS)

    def elaborate(self, platform):
        m = Module()
        for j, mask in enumerate(crc_masks()):
            m.d.comb += self.crc[j].eq((self.payload & Const(mask, PAYLOAD_BITS)).xor())
        return m
