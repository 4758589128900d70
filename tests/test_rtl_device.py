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
