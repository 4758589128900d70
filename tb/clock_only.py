"""cocotb on the system toplevel with no testbench work: the speed limit of tb/system_tb.py.

Each cycle does what the system testbench's loop does before any checking -- wait for the rising
edge, wait for ReadOnly, read the ``mon`` vector -- and nothing else.  The inputs are driven once,
before reset, to the idle values the system testbench gives them (its ``SystemBench`` makes them).
Its cycles/s is the ceiling for the scoreboarded testbench on the same simulator and build: the
simulator's evaluation plus cocotb's per-cycle trigger cost.  Used by bench/system_speed.py.

Settings (environment): ``SIM_PARAMS`` (the build's parameter file), ``SIM_CYCLES`` (default 20000),
``SIM_OUT`` (a JSON file for the result).
"""

import json
import os
import time

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tb.system_tb import SystemBench


@cocotb.test()
async def clock_only(dut):
    cycles = int(os.environ.get("SIM_CYCLES", "20000"))
    with open(os.environ["SIM_PARAMS"]) as f:
        params = json.load(f)
    await SystemBench(dut, params, seed=1, transactions=0).start()     # idle inputs, clock, reset
    mon = dut.mon
    ones = 0
    t0 = time.perf_counter()
    for _ in range(cycles):
        await RisingEdge(dut.clk)
        await ReadOnly()
        ones += int(mon.value).bit_count()      # used, so the read cannot be skipped
    wall = time.perf_counter() - t0
    out = os.environ.get("SIM_OUT")
    result = {"cycles": cycles, "wall_s": round(wall, 3), "cycles_per_s": round(cycles / wall),
              "mon_ones": ones}
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
    cocotb.log.info(f"clock only: {cycles} cycles in {wall:.2f} s, {cycles / wall:.0f} cycles/s")
