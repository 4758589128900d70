"""The harness of the SWMR proofs (proof_dcoh_swmr_unbounded.py, its broken variant and its witness): SWMR
at the DCOH boundary, the DCOH never lets its two internal caches hold conflicting copies of a line.
DCOH (hdl/dcoh/dcoh.py) with caches=2, sf_sets=1, sf_ways=2, tracker=2, work=1, coalesce_window=0,
coalesce_block=1, coalesce_groups=1, credits=2, addr_width=1 (two lines).

The two internal caches are modelled in the harness, for both lines, as a MESI state each
(``st[k][line]``), changed only as the RTL testbench's cache BFM (tests/dcoh_cosim.py) changes it:
  * ``cpu_rsp`` (handshake): cache ``cache`` installs ``state`` for ``line`` (I: nothing changes);
  * ``cmd`` (handshake): for every cache in ``caches``: INV -> I, TO_S -> E/M become S, KEEP -> no
    change; the answer (``dirty``: one was M, ``excl``: one was E/M, data 0) is computed from the
    states before the command and presented on ``cmd_rsp`` from the next cycle until taken, its
    ``valid`` free (any delay);
  * a silent E -> M (a store hit): any cycle, for a line in E of a cache with no access outstanding and
    no ``cmd``/``cpu_rsp`` to it in that cycle (free choice).
The caches send ``cpu_req`` only for accesses that are not local hits (models.dcoh.cache_hit) and at
most one at a time per cache (until its ``cpu_rsp``).  Assumes on a valid ``cpu_req``: the cache has
no access outstanding; ``kind`` is one of cxl.device.ACCESS_KINDS; load and rdcurr only when the line is I;
store when I or S; evict when held (S/E/M); itomwr, wrinv, clflush in any state (never hits).
Cache index, line and variant are free; the data is 0.
Host side entirely free every cycle (``AnySeq``): snoops (any opcode, address, UQID, any number in
flight), H2D Rsp (any opcode, GO state, CQID) and H2D Data (any CQID), in any order and at any time;
a GO-E for a CQID the device did not request is one of them, and the DCOH must drop it.  The
``ready``s of the D2H channels, ``probe``, ``cmd`` and ``cpu_rsp`` are free; each D2H credit is
returned one cycle after its message.  Line data inputs are 0.  Reset stays low.

Property (Asserts, every cycle, each line): never two caches with write permission (E/M), never a
cache with E/M together with another holding S -- i.e. if one cache holds E or M, the other holds I.
Also: the DCOH never issues a ``cmd`` while the previous one is unanswered.  Plus the block's own
Asserts.  The host is free, so this is the device-internal invariant (the DCOH, whatever the host
does, never lets its own caches conflict); it says nothing about copies in other devices.
With ``invariants``, the invariants of formal/dcoh_invariants.py are asserted too (k-induction:
proof_dcoh_swmr_unbounded.py).  ``break_inv_of=k`` makes cache k ignore INV commands (a broken
environment: a bounded check of the harness without invariants FAILs at step 26).
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Elaboratable, Module, Signal

from hdl.dcoh.dcoh import DCOH, CacheState as CS, CmdOp, CpuKind
from formal.common import no_reset
from formal.dcoh_env import drive_dcoh_inputs, return_credits, small_dcoh
from formal.dcoh_invariants import ObservedSnoopFilter, add_cache_invariants, add_invariants

ADDR_WIDTH = 1
CACHES = 2


class DCOHSWMR(Elaboratable):
    def __init__(self, addr_width=ADDR_WIDTH, break_inv_of=None, invariants=False, dcoh_cls=DCOH):
        self.addr_width = addr_width
        self.break_inv_of = break_inv_of   # a cache index: ignore INV commands to it (used to see a FAIL)
        # also Assert the invariants of formal/dcoh_invariants.py: the DCOH's (without the snoop holders:
        # this host keeps no snoop rule) and the caches' against it (proof_dcoh_swmr_unbounded.py)
        self.invariants = invariants
        self.dcoh_cls = dcoh_cls           # a DCOH subclass (a broken variant)

    def elaborate(self, platform):
        m = Module()
        AW = self.addr_width
        LINES = 2 ** AW
        dut = small_dcoh(m, platform, addr_width=AW, dcoh_cls=self.dcoh_cls,
                         snoop_filter_cls=ObservedSnoopFilter if self.invariants else None)
        drive_dcoh_inputs(m, dut, skip=("cmd_rsp.valid", "cmd_rsp.payload", "crd_req", "crd_rsp",
                                        "crd_data"))
        no_reset(m)
        return_credits(m, dut)

        st = [[Signal(CS, name=f"st{k}_{l}") for l in range(LINES)] for k in range(CACHES)]
        busy = [Signal(name=f"busy{k}") for k in range(CACHES)]
        # the caches' states and bookkeeping stay on the harness for subclasses (dcoh_swmr_reached's covers)
        self.dut, self.st, self.busy = dut, st, busy

        def state_of(k, line):
            """st[k][line] for a line given as a signal."""
            v = Signal(CS, name=f"st{k}_sel")
            with m.Switch(line):
                for l in range(LINES):
                    with m.Case(l):
                        m.d.comb += v.eq(st[k][l])
            return v

        # ---- cpu_req: only misses/upgrades/evictions/uncached accesses, one per cache -------------
        req = dut.cpu_req
        k_req = req.p.cache
        cur = Signal(CS)
        busy_req = Signal()
        for k in range(CACHES):
            with m.If(k_req == k):
                m.d.comb += [cur.eq(state_of(k, req.p.line)), busy_req.eq(busy[k])]
        kind = req.p.kind
        legal = (((kind == CpuKind.LOAD) | (kind == CpuKind.RDCURR)) & (cur == CS.I)) | \
                ((kind == CpuKind.STORE) & ((cur == CS.I) | (cur == CS.S))) | \
                ((kind == CpuKind.EVICT) & (cur != CS.I)) | \
                (kind == CpuKind.ITOMWR) | (kind == CpuKind.WRINV) | (kind == CpuKind.CLFLUSH)
        m.d.comb += Assume(~req.valid | (~busy_req & legal & (k_req < CACHES)))
        for k in range(CACHES):
            with m.If(req.valid & req.ready & (k_req == k)):
                m.d.sync += busy[k].eq(1)

        # ---- cmd / cmd_rsp: apply to the named caches, answer from the states before -----------
        cmd = dut.cmd
        cmd_taken = cmd.valid & cmd.ready
        cmd_pending = Signal()
        rsp_dirty, rsp_excl = Signal(), Signal()
        self.cmd_pending, self.rsp_dirty, self.rsp_excl = cmd_pending, rsp_dirty, rsp_excl
        m.d.comb += [dut.cmd_rsp.valid.eq(cmd_pending & AnySeq(1)),
                     dut.cmd_rsp.p.dirty.eq(rsp_dirty), dut.cmd_rsp.p.excl.eq(rsp_excl),
                     dut.cmd_rsp.p.data.eq(0)]
        with m.If(dut.cmd_rsp.valid & dut.cmd_rsp.ready):
            m.d.sync += cmd_pending.eq(0)
        m.d.comb += Assert(~(cmd.valid & cmd_pending), "harness: cmd while the previous one is unanswered")
        dirty_bits, excl_bits = [], []
        for k in range(CACHES):
            s = state_of(k, cmd.p.line)
            named = cmd.p.caches[k]
            dirty_bits.append(named & (s == CS.M))
            excl_bits.append(named & ((s == CS.M) | (s == CS.E)))
        with m.If(cmd_taken):
            m.d.sync += [cmd_pending.eq(1), rsp_dirty.eq(dirty_bits[0] | dirty_bits[1]),
                         rsp_excl.eq(excl_bits[0] | excl_bits[1])]

        # ---- state updates: silent E->M, then cmd, then cpu_rsp (each cycle, per cache and line) ----
        rsp = dut.cpu_rsp
        rsp_taken = rsp.valid & rsp.ready
        for k in range(CACHES):
            with m.If(rsp_taken & (rsp.p.cache == k)):
                m.d.sync += busy[k].eq(0)
            for l in range(LINES):
                s = st[k][l]
                cmd_here = cmd_taken & cmd.p.caches[k] & (cmd.p.line == l)
                rsp_here = rsp_taken & (rsp.p.cache == k) & (rsp.p.line == l) & (rsp.p.state != CS.I)
                with m.If(rsp_here):
                    m.d.sync += s.eq(rsp.p.state)
                with m.Elif(cmd_here):
                    with m.Switch(cmd.p.op):
                        with m.Case(CmdOp.INV):
                            if k != self.break_inv_of:
                                m.d.sync += s.eq(CS.I)
                        with m.Case(CmdOp.TO_S):
                            with m.If((s == CS.E) | (s == CS.M)):
                                m.d.sync += s.eq(CS.S)
                with m.Elif(AnySeq(1) & (s == CS.E) & ~busy[k] & ~(rsp_taken & (rsp.p.cache == k))):
                    m.d.sync += s.eq(CS.M)                 # silent store hit

        # ---- SWMR over the internal caches, per line -------------------------------------------
        for l in range(LINES):
            for a in range(CACHES):
                for b in range(CACHES):
                    if a == b:
                        continue
                    rw_a = (st[a][l] == CS.E) | (st[a][l] == CS.M)
                    m.d.comb += Assert(~(rw_a & (st[b][l] != CS.I)),
                                       f"harness: SWMR: line {l}: cache {a} has E/M while cache {b} holds a copy")
        if self.invariants:
            add_invariants(m, dut)
            add_cache_invariants(m, dut, st, cmd_pending, rsp_excl)
        return m

