"""The 68B-flit CRC-16 (cxl/crc.py, models/flit/crc.py): its definition, an independent library, and error detection.

Ref: docs/sources.md §2.3: polynomial 0x1F053, initial value 0, no reflection, no final XOR, fed payload bits
511 down to 0; the result sits in flit bits 527:512.

Coverage argument for the error-detection tests.  With initial value 0 and no final XOR the CRC is linear
over GF(2): crc(a ^ b) = crc(a) ^ crc(b) (checked below).  An error pattern e over the 528 flit bits
therefore goes undetected exactly when the XOR of the *syndromes* of its bits is zero, where the syndrome
of payload bit i is crc(payload with only bit i set) and that of CRC bit j is 1 << j.  So:
  - every 1-bit error is detected  <=>  no syndrome is zero;
  - every 2-bit error is detected  <=>  all 528 syndromes are distinct (this covers all 139,128 pairs);
  - every error confined to a window of 16 bits (so every burst of length <= 16 in that bit order) is
    detected  <=>  the 16 syndromes of each window are linearly independent (rank 16).
These are checked exhaustively, in milliseconds.  The real receive path (Unpacker.receive, which must
raise FlitError("CRC")) is also run on all 528 1-bit errors and on a few thousand random 2-bit errors and
bursts, so the syndrome argument is tied to the code that checks flits.

"Burst" needs a bit order.  In the order the CRC consumes the codeword (payload bit 511 first, ..., bit 0,
then CRC bit 15 ... 0) every burst of up to 16 bits is detected, as the theory for a degree-16 polynomial
with a non-zero x^0 term says.  In flit-bit-index order (bit 0 .. 527) that holds too except across the
payload/CRC seam (bit 511 next to 512, i.e. codeword degree 527 next to degree 0): there the shortest
undetected burst is 15 bits, flit bits 498..512.  The test pins that, so a change of CRC placement shows.
"""

import random

import pytest
from crc import Calculator, Configuration

from models.flit import (CRC_POLY, FLIT_BYTES, PAYLOAD_BYTES, Direction, FlitError, Packer, Unpacker, crc16,
                         crc16_serial, make_msg, seal)
from cxl.messages import Channel, H2DReqOpcode

FLIT_BITS = 8 * FLIT_BYTES          # 528
PAYLOAD_BITS = 8 * PAYLOAD_BYTES    # 512


def payloads(n, seed=1):
    rng = random.Random(seed)
    out = [bytes(64), b"\xff" * 64, bytes([1]) + bytes(63), bytes(63) + bytes([0x80])]
    out += [rng.randbytes(64) for _ in range(n)]
    return out


def test_polynomial_is_the_facts_one():
    # x^16+x^15+x^14+x^13+x^12+x^6+x^4+x+1
    assert CRC_POLY == sum(1 << k for k in (16, 15, 14, 13, 12, 6, 4, 1, 0)) == 0x1F053


def test_table_driven_equals_serial_definition():
    for p in payloads(300):
        assert crc16(p) == crc16_serial(p)


def test_agrees_with_independent_crc_library():
    # The `crc` package (pure Python, PyPI) as a plain CRC-16: width 16, poly 0x1F053 (x^16 implicit),
    # init 0, no reflection, no final XOR.  Fed byte 63 first, each byte MSB first (the library's
    # non-reflected order), which is payload bit 511 down to 0.
    lib = Calculator(Configuration(width=16, polynomial=CRC_POLY & 0xFFFF, init_value=0, final_xor_value=0,
                                   reverse_input=False, reverse_output=False))
    for p in payloads(300, seed=2):
        assert crc16(p) == lib.checksum(bytes(reversed(p)))


def test_crc_bytes_sit_in_flit_bits_527_512_low_byte_first():
    p = random.Random(3).randbytes(64)
    flit = seal(p)
    assert flit[:64] == p and int.from_bytes(flit, "little") >> PAYLOAD_BITS == crc16(p)
    assert flit[64] == crc16(p) & 0xFF and flit[65] == crc16(p) >> 8


def test_linearity():
    rng = random.Random(4)
    for _ in range(200):
        a, b = rng.randbytes(64), rng.randbytes(64)
        assert crc16(bytes(x ^ y for x, y in zip(a, b))) == crc16(a) ^ crc16(b)


def _syndromes():
    """Syndrome of each flit bit 0..527 (see the module docstring)."""
    out = []
    for i in range(PAYLOAD_BITS):
        p = bytearray(PAYLOAD_BYTES)
        p[i // 8] = 1 << (i % 8)
        out.append(crc16(bytes(p)))
    return out + [1 << j for j in range(16)]


SYN = _syndromes()


def _rank(vectors):
    rows, rank = list(vectors), 0
    for bit in range(15, -1, -1):
        pivot = next((v for v in rows if v >> bit & 1), None)
        if pivot is None:
            continue
        rows.remove(pivot)
        rows = [v ^ pivot if v >> bit & 1 else v for v in rows]
        rank += 1
    return rank


def test_every_1_bit_and_2_bit_error_detected_exhaustively():
    assert 0 not in SYN                      # all 528 single-bit errors
    assert len(set(SYN)) == FLIT_BITS        # all 528*527/2 = 139,128 two-bit errors


def test_every_burst_up_to_16_detected_in_codeword_order():
    order = [SYN[i] for i in range(PAYLOAD_BITS - 1, -1, -1)] + [SYN[PAYLOAD_BITS + j] for j in range(15, -1, -1)]
    assert all(_rank(order[s:s + 16]) == 16 for s in range(FLIT_BITS - 15))


def test_bursts_in_flit_index_order():
    # Up to 14 bits anywhere; the seam between payload bit 511 and CRC bit 0 first fails at 15.
    assert all(_rank(SYN[s:s + 14]) == 14 for s in range(FLIT_BITS - 13))
    undetected = []
    for length in (15, 16):
        for start in range(FLIT_BITS - length + 1):
            inner = SYN[start + 1:start + length - 1]
            span = {0}
            for v in inner:
                span |= {x ^ v for x in span}
            if SYN[start] ^ SYN[start + length - 1] in span:
                undetected.append((start, length))
    assert undetected and min(undetected, key=lambda x: x[1]) == (498, 15)
    assert all(start < PAYLOAD_BITS <= start + length - 1 for start, length in undetected)   # all at the seam


@pytest.fixture(scope="module")
def good_flit():
    # A real protocol flit: a snoop and its data-less neighbours, from the packer.
    tx = Packer(Direction.DOWNSTREAM)
    tx.push(make_msg(Channel.H2D_REQ, opcode=H2DReqOpcode.SnpInv, addr=0x123456789, uqid=0x5A5))
    return tx.next_flit()


def _flip(flit, bits):
    v = int.from_bytes(flit, "little")
    for b in bits:
        v ^= 1 << b
    return v.to_bytes(FLIT_BYTES, "little")


def _rejected(flit):
    with pytest.raises(FlitError) as e:
        Unpacker(Direction.DOWNSTREAM).receive(flit)
    return e.value.field == "CRC"


def test_receive_path_rejects_every_1_bit_error(good_flit):
    Unpacker(Direction.DOWNSTREAM).receive(good_flit)      # sanity: the clean flit passes
    assert all(_rejected(_flip(good_flit, [b])) for b in range(FLIT_BITS))


def test_receive_path_rejects_sampled_2_bit_errors_and_bursts(good_flit):
    rng = random.Random(5)
    for _ in range(3000):
        a, b = rng.sample(range(FLIT_BITS), 2)
        assert _rejected(_flip(good_flit, [a, b]))
    # bursts of length 2..16 in codeword order, at sampled starts, random inner bits
    order = list(range(PAYLOAD_BITS - 1, -1, -1)) + list(range(FLIT_BITS - 1, PAYLOAD_BITS - 1, -1))
    for _ in range(3000):
        length = rng.randint(2, 16)
        start = rng.randrange(FLIT_BITS - length + 1)
        bits = [order[start], order[start + length - 1]]
        bits += [order[k] for k in range(start + 1, start + length - 1) if rng.random() < 0.5]
        assert _rejected(_flip(good_flit, bits))
