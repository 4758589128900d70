"""One amaranth.sim simulator reused for many runs (elaboration is the slow part of a big design).

Subclass :class:`ReusedSimulator`, pass the design to ``__init__`` and write ``async def _bench(self,
ctx)``: it reads ``self.job`` (None on the first, empty run the simulator makes when it is set up) and
stores what it measured in ``self.result``.  ``run(job)`` resets the simulator between jobs.
"""

from amaranth.sim import Simulator

__all__ = ["ReusedSimulator"]


class ReusedSimulator:
    def __init__(self, dut, period=1e-8):
        self.dut = dut
        self.sim = Simulator(dut)
        self.sim.add_clock(period)
        self.sim.add_testbench(self._bench)
        self.job, self.result, self.fresh = None, None, True

    def run(self, job):
        self.job, self.result = job, None
        if not self.fresh:
            self.sim.reset()
        self.fresh = False
        self.sim.run()
        return self.result

    async def _bench(self, ctx):
        raise NotImplementedError
