"""Shared amaranth.sim helper for the RTL block tests."""

from amaranth.sim import Simulator


def run_clocked(dut, bench, period=1e-8):
    """Simulate ``dut`` with a clock on its sync domain and one async testbench."""
    sim = Simulator(dut)
    sim.add_clock(period)
    sim.add_testbench(bench)
    sim.run()
