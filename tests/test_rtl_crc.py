"""The RTL flit CRC against the golden model's (an independent implementation of facts §2.3)."""

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.sim import Simulator
from hypothesis import given, strategies as st

from cxl.crc import crc_masks
from hdl.link.crc import FlitCRC
from models.flit import crc16


def test_masks_agree_with_model_on_unit_vectors():
    masks = crc_masks()
    for i in range(512):
        want = crc16((1 << i).to_bytes(64, "little"))
        got = sum(((masks[j] >> i) & 1) << j for j in range(16))
        assert got == want, f"payload bit {i}"


@given(st.lists(st.integers(0, (1 << 512) - 1), min_size=1, max_size=200))
def test_rtl_crc_matches_model(payloads):
    dut = FlitCRC()

    async def bench(ctx):
        for p in payloads:
            ctx.set(dut.payload, p)
            assert ctx.get(dut.crc) == crc16(p.to_bytes(64, "little"))
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def test_converts_to_verilog():
    assert "module flit_crc" in verilog.convert(FlitCRC(), name="flit_crc")


@given(st.sampled_from([2, 4, 8]), st.lists(st.integers(0, (1 << 512) - 1), min_size=1, max_size=50))
def test_rtl_crc_in_parts_combines_to_the_model(parts, payloads):
    """The pipelined form: the XOR of the partial CRCs is the flit's CRC."""
    dut = FlitCRC(parts)
    top = Module()
    top.submodules.crc = dut
    crc = FlitCRC.combine(top, dut.partials)

    async def bench(ctx):
        for p in payloads:
            ctx.set(dut.payload, p)
            assert ctx.get(crc) == crc16(p.to_bytes(64, "little"))
    sim = Simulator(top)
    sim.add_testbench(bench)
    sim.run()


def test_bad_parts():
    for parts in (0, 3, 2.0, True):
        with pytest.raises(ValueError, match="parts"):
            FlitCRC(parts)
