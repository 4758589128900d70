"""cocotb tests of the VIP on the six-channel loopback: every message sent on each channel comes out
identical and in order, with idle cycles on the sources and backpressure on the sinks."""

import itertools
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from cxl.messages import CODECS, Channel
from tb.loopback import port_name
from tb.seed import env_seed
from tb.vip import ChannelMonitor, ChannelSink, ChannelSource

SEED = env_seed(1)


def random_message(rng, channel):
    fields = {}
    for name, _, width, enum_cls in CODECS[channel].fields:
        if name == "valid" or name.startswith("rsvd"):
            continue
        fields[name] = rng.choice(list(enum_cls)) if enum_cls else rng.randrange(1 << width)
    return fields


async def setup(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def run_traffic(dut, pause, backpressure, count=40):
    rng = random.Random(SEED)
    await setup(dut)
    ends = {}
    for c in Channel:
        src = ChannelSource(dut, port_name(c, "in"), dut.clk, c, pause=pause() if pause else None)
        snk = ChannelSink(dut, port_name(c, "out"), dut.clk, c, backpressure=backpressure() if backpressure else None)
        mon = ChannelMonitor(dut, port_name(c, "in"), dut.clk, c)
        ends[c] = (src, snk, mon)
    sent = {c: [] for c in Channel}
    for _ in range(count):
        for c in Channel:
            m = random_message(rng, c)
            sent[c].append(m)
            ends[c][0].send(m)
    for c in Channel:
        got = [await ends[c][1].recv() for _ in range(count)]
        want = [dict(m, valid=1, **{n: 0 for n in CODECS[c].names if n.startswith("rsvd")}) for m in sent[c]]
        assert got == want, f"seed {SEED}: {c.name}: first difference at " \
                            f"{next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
        assert ends[c][2].seen == want, f"seed {SEED}: {c.name} monitor disagrees"
        assert ends[c][0].sent == count


@cocotb.test()
async def test_streaming(dut):
    await run_traffic(dut, None, None)


@cocotb.test()
async def test_pauses_and_backpressure(dut):
    await run_traffic(dut, lambda: itertools.cycle([0, 1, 1, 0, 1]), lambda: itertools.cycle([1, 0, 0, 1]))
