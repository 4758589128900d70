"""Credit-return encodings of the 68B flit: the 4-bit ReqCrd / RspCrd / DataCrd fields of a protocol
flit header and of an LLCRD (bit 3 = protocol, 0 = CXL.cache; bits 2:0 = exponential amount).

# Ref: docs/sources.md §2.4; CXL 1.1 Table 37, CXL 3.x Tables 4-4 and 4-5 (docs/conformance.md).
"""

import enum
from typing import NamedTuple

__all__ = ["CREDIT_VALUES", "CREDIT_CLASSES", "CreditProtocol", "encode_credit", "decode_credit",
           "credit_step", "Credits"]


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
