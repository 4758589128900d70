"""The 16-bit CRC of a 68B flit: its polynomial and the XOR masks that compute it in parallel.

The serial definition feeds payload bits 511 down to 0 into a CRC-16 register (initial 0, no
reflection, no final XOR), so payload bit i contributes x^(16+i) mod P to the result; ``crc_masks``
derives, from the polynomial alone, which payload bits each CRC bit is the XOR of.  The RTL
(hdl/link/crc.py) builds its XOR trees from these masks; the golden model (models/flit/crc.py) computes
the CRC independently, and the tests check one against the other.

# Ref: docs/sources.md §2.3 (polynomial 0x1F053, serial form, CRC in flit bits 527:512);
#      CXL 1.1 §4.2.8.7 (16b CRC over the flit).
"""

__all__ = ["CRC_POLY", "CRC_BITS", "PAYLOAD_BITS", "crc_masks"]

CRC_POLY = 0x1F053        # x^16+x^15+x^14+x^13+x^12+x^6+x^4+x+1, docs/sources.md §2.3
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
