"""The device top (DCOH + device end of the link) against the golden model, with every message
crossing a whole 68B-flit link (tb/linked_device.py: device end, two wires, host end) -- with and
without bit errors on the wires.  The co-simulation is tests/dcoh_cosim.py's, unchanged: it compares
messages, internal caches, snoop filter and tracker with the model after every step."""

import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

sys.path.insert(0, str(Path(__file__).parent))
from dcoh_cosim import CONFIG, run_cosim          # noqa: E402
from models.config import Config                  # noqa: E402
from tb.linked_device import LinkedDevice         # noqa: E402
from hdl.device import Device                     # noqa: E402
from hdl.link.port import RX_ERROR_KINDS          # noqa: E402
from cxl.messages import H2DReqOpcode             # noqa: E402
from models.flit import control, encode_control, seal   # noqa: E402


def linked(cfg, ber, seed):
    return LinkedDevice(dcoh=dict(caches=cfg.caches, sf_sets=cfg.sf_sets, sf_ways=cfg.sf_ways,
                                  tracker=cfg.max_outstanding, work=8, coalesce_window=128,
                                  coalesce_block=cfg.coalesce_block, coalesce_groups=4, credits=64),
                        link=dict(retry_depth=32), ber=ber, seed=seed)


@pytest.mark.parametrize("ber, seed, steps", [(0.0, 11, 80), (2e-4, 12, 80), (1e-3, 13, 40)])
def test_device_through_the_link_matches_model(ber, seed, steps):
    cfg = Config(**CONFIG)
    dut = linked(cfg, ber, seed)
    out = {}

    async def bench(ctx):
        await run_cosim(ctx, dut, seed, steps, cfg=cfg)
        out["injected"], out["retries"] = ctx.get(dut.injected), ctx.get(dut.retries)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    if ber >= 1e-3:                                   # errors really happened and were retried
        assert out["injected"] > 0 and out["retries"] > 0, out


def test_bad_host_input_counted_at_the_device_top():
    """Flits from the host that break a rule, one kind each (an illegal snoop opcode, a reserved slot
    format, a reserved LLCTRL), and a RETRY.Idle: counted per kind on the device top's ``rx_errors``;
    each rule breaker is answered by the test with a RETRY.Ack, after which the device resumes (no
    link error)."""
    dut = Device(link=dict(retry_depth=32))
    bad_op = next(v for v in range(8) if v not in {m.value for m in H2DReqOpcode})
    as_int = lambda b: int.from_bytes(b, "little")                    # noqa: E731
    flits = {"opcode": as_int(seal((1 | bad_op << 1) << 32)), "format": as_int(seal(7 << 5)),
             "control": as_int(seal(1 | 3 << 32)), "retry_unused": as_int(seal(encode_control(control("RETRY.Idle"))))}
    ack = as_int(seal(encode_control(control("RETRY.Ack", eseq=0))))
    out = {}

    async def bench(ctx):
        ctx.set(dut.tx_flit.ready, 1)
        for kind, flit in flits.items():
            for f in [flit] + [None] * 30 + ([ack] if kind != "retry_unused" else []) + [None] * 10:
                ctx.set(dut.rx_flit.valid, f is not None)
                if f is not None:
                    ctx.set(dut.rx_flit.payload, f)
                await ctx.tick()
        out.update({k: ctx.get(getattr(dut.rx_errors, k)) for k in RX_ERROR_KINDS},
                   link_error=ctx.get(dut.link_error), rule=ctx.get(dut.rule_errors))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for k in RX_ERROR_KINDS:
        assert out[k] == (1 if k in flits else 0), (k, out)
    assert out["rule"] == 3 and out["link_error"] == 0, out


def test_linked_device_error_bit_reports_a_dead_link():
    """With every flit corrupted (BER 0.02: a 528-bit flit survives with probability ~2e-5) one snoop's
    flit is retried until the device end gives up: the linked device's ``error`` bit rises with
    RETRY_LIMIT as the cause, which the system testbench turns into a failure naming it (tb/system_tb.py
    ``rtl_errors``), instead of a watchdog timeout thousands of cycles later."""
    from hdl.link.port import LinkErrorCause
    from models.link import Msg, encode
    from cxl.messages import Channel
    dut = LinkedDevice(ber=0.02, seed=3)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.h2d_req.payload.as_value(), encode(Msg(Channel.H2D_REQ, H2DReqOpcode.SnpInv, 1, 0x40)))
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.d2h_rsp.ready, 1)
        for cycle in range(6000):
            await ctx.tick()
            if ctx.get(dut.h2d_req.ready):
                ctx.set(dut.h2d_req.valid, 0)
            causes = ctx.get(dut.link_error_cause), ctx.get(dut.host_link_error_cause)
            if any(causes) or ctx.get(dut.error):
                seen.update(cycle=cycle, causes=causes, error=ctx.get(dut.error), crc=ctx.get(dut.crc_errors))
                return
    sim.add_testbench(bench)
    sim.run()
    assert seen, "6000 cycles of corrupted flits and no link error"
    assert seen["error"], f"a link stopped (device, host causes {seen['causes']}) but error stayed low"
    assert any(c & LinkErrorCause.RETRY_LIMIT for c in seen["causes"]) and seen["crc"] > 0, seen
