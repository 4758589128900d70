"""The flit CRC detects every single-bit error anywhere in the 528-bit flit (payload + CRC).

Same harness as proof_crc_detects_1_2_bit_errors.py with ``max_bits=1`` and no window; payload
``p = 0`` (FlitCRC is XOR-only, so this covers every payload: see that module's docstring).
Combinational: ``mode bmc`` depth 1 is complete.
"""

from formal.common import Proof
from formal.proof_crc_detects_1_2_bit_errors import CRCDetects1And2BitErrors

PROOF = Proof(
    name="crc_detects_1_bit_errors",
    mode="bmc", depth=1,
    harness=lambda: CRCDetects1And2BitErrors(max_bits=1),
    description="FlitCRC, payload p = 0: every single-bit error in the 528-bit flit fails the CRC check",
    quick=False,
)
