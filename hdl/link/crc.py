"""The 16-bit CRC of a 68B flit, as one XOR tree per CRC bit over the 512-bit payload.

Combinational: ``crc`` follows ``payload`` in the same cycle (a caller that needs timing closure
registers it).  The polynomial and the XOR masks are defined in :mod:`cxl.crc` (derived from the
polynomial alone); the golden model (``models.flit.crc``) is an independent implementation, and
tests/test_rtl_crc.py checks one against the other.

``FlitCRC(parts=P)`` with P > 1 gives the CRC in two halves for a caller that pipelines it: the CRC is
linear in the payload (no initial value, no final XOR), so the CRC of the payload is the XOR of the
CRCs of its P disjoint bit ranges, each with the other bits zero.  ``partials`` holds those P CRCs
(each XOR tree covers 512 / P payload bits instead of 512), a caller registers them, and
``FlitCRC.combine`` XORs the registered partials (P bits per CRC bit: one LUT4 for P = 4).

# Ref: docs/sources.md §2.3 (polynomial 0x1F053, serial form, CRC in flit bits 527:512).
"""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from cxl.crc import CRC_BITS, PAYLOAD_BITS, crc_masks

__all__ = ["FlitCRC"]


class FlitCRC(wiring.Component):
    """``parts`` = 1: ``crc``, the flit's CRC.  ``parts`` > 1 (a divisor of 512): ``partials``, the
    CRC of each of ``parts`` consecutive payload ranges (range p: bits p * 512 / parts and up), whose
    XOR (``combine``) is the flit's CRC."""

    def __init__(self, parts=1):
        if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1 or PAYLOAD_BITS % parts:
            raise ValueError(f"parts={parts!r}: must be a positive integer dividing {PAYLOAD_BITS}")
        self.parts = parts
        out = {"crc": Out(CRC_BITS)} if parts == 1 else {"partials": Out(data.ArrayLayout(CRC_BITS, parts))}
        super().__init__({"payload": In(PAYLOAD_BITS), **out})

    @staticmethod
    def combine(m, partials, name="crc"):
        """A Signal equal to the XOR of ``partials`` (an ``ArrayLayout(CRC_BITS, P)`` view): the CRC."""
        crc = Signal(CRC_BITS, name=name)
        acc = Const(0, CRC_BITS)
        for p in range(len(partials)):
            acc = acc ^ partials[p]
        m.d.comb += crc.eq(acc)
        return crc

    def elaborate(self, platform):
        m = Module()
        width = PAYLOAD_BITS // self.parts
        for j, mask in enumerate(crc_masks()):
            if self.parts == 1:
                m.d.comb += self.crc[j].eq((self.payload & Const(mask, PAYLOAD_BITS)).xor())
                continue
            for p in range(self.parts):
                piece = (mask >> (p * width)) & ((1 << width) - 1)
                bits = self.payload[p * width:(p + 1) * width]
                m.d.comb += self.partials[p][j].eq((bits & Const(piece, width)).xor())
        return m
