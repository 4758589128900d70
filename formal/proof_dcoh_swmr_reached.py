"""Reachability witness (mode cover) for dcoh_swmr_unbounded: in its harness (two abstract MESI caches,
host free, the invariants of formal/dcoh_invariants.py asserted), each situation SWMR is about happens
within ``DEPTH`` steps.  PASS means SBY found a trace for every Cover:

* a cache gets E or M through the host (a request completed by GO and data, installed by ``cpu_rsp``);
* a store filled inside the device takes the line from a peer (the INV to the peer's copy taken);
* a load filled inside the device downgrades a peer's E or M copy (the TO_S taken);
* a snoop's answer takes a copy away (a command to the copies in its answer);
* a back-invalidation's eviction takes a copy away.
"""

from amaranth.hdl import Cat, Cover

from hdl.dcoh.dcoh import CacheState as CS, CmdOp
from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_swmr_harness import ADDR_WIDTH, DCOHSWMR

DEPTH = 14


class Reached(DCOHSWMR):
    def __init__(self):
        super().__init__(invariants=True)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        dut = self.dut
        c = dut.debug
        st = lambda *names: Cat(*(c.engine.ongoing(n) for n in names)).any()     # noqa: E731
        cmd = dut.cmd.valid & dut.cmd.ready
        work = c.wk[c.cur_w]
        rsp = dut.cpu_rsp.valid & dut.cpu_rsp.ready
        rw = (dut.cpu_rsp.p.state == CS.E) | (dut.cpu_rsp.p.state == CS.M)
        rw_copy = Cat(*((dut.cmd.p.line == l) & dut.cmd.p.caches[k] &
                        ((self.st[k][l] == CS.E) | (self.st[k][l] == CS.M))
                        for k in range(2) for l in range(2))).any()
        m.d.comb += [
            Cover(rsp & rw & ~st("S_REPLY"), "a cache gets E or M through the host"),
            Cover(cmd & st("S_SFILL"), "a store filled inside the device takes the line from a peer"),
            Cover(cmd & st("S_LFILL") & rw_copy, "a load filled inside the device downgrades a peer's E/M copy"),
            Cover(cmd & (dut.cmd.p.op == CmdOp.INV) & (st("ANSWER") | (st("W_GO") & work.snoop)),
                  "a snoop's answer takes a copy away"),
            Cover(cmd & st("W_GO") & ~work.snoop, "a back-invalidation's eviction takes a copy away"),
        ]
        return m


PROOF = Proof(
    name="dcoh_swmr_reached",
    mode="cover", depth=DEPTH,
    harness=Reached,
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"WITNESS for dcoh_swmr_unbounded (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH}), "
                "two abstract caches, the invariants asserted): E/M through the host, a store's and a load's fill "
                "inside the device from a peer, a snoop's answer and a back-invalidation taking a copy",
    quick=False,
)
