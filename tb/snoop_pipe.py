"""A bench for the pipelined DCOH's snoop path (hdl/dcoh/pipe/snoop_pipe.py) against the golden device.

The golden model's device (``models.dcoh.Device``) and the RTL start from the same state: lines held by
the internal caches and the snoop filter (``preload``), no request in flight.  Host snoops go into
``h2d_req``; the internal caches (``tb.cache_bfm.CacheBFM``) take probes and commands, several commands
outstanding, and answer them in order after a delay; the D2H sinks take with a chosen probability.  The
model follows the RTL's commit port (the order of hdl/dcoh/pipe/snoop_pipe.py, "Commit port"), and every
D2H Rsp and D2H Data the RTL sends is compared with the model's, one for one and in order; at the end
the snoop filter, the caches and the work (none left) are compared too.  Runs in amaranth.sim with a
per-cycle testbench: a unit bench of one block (the system benches batch).
"""

import random
from collections import deque

from amaranth.lib import data
from amaranth.sim import Simulator

from cxl.coherence import MESI, DevState
from cxl.messages import Channel, D2HRspOpcode, H2DReqOpcode
from hdl.dcoh.pipe.snoop_pipe import CommitC, SnoopPipe
from hdl.dcoh.snoop_filter import SFState
from models.checker import Checker
from models.config import Config
from models.dcoh import Device
from models.link import Link, Msg
from tb.cache_bfm import CacheBFM, CommandPort

__all__ = ["Mismatch", "SnoopPipeBench", "SnoopShadow", "preload", "SHAPES", "per_cycle", "sf_rows", "sf_view",
           "compare_end_state"]

_SF_STATE = {DevState.S: SFState.S, DevState.E: SFState.E, None: SFState.PLACEHOLDER}


class Mismatch(AssertionError):
    pass


class _Sent(Link):
    """The model device's link, which keeps what it sends (a subclass: the compiled golden model's
    devices take only links, models/link.pxd)."""

    def __init__(self, cfg):
        super().__init__(cfg, False)
        self.rsp, self.data = [], []

    def send(self, msg, now, extra=0):
        (self.data if msg.chan is Channel.D2H_DATA else self.rsp).append(msg)


SHAPES = ("S", "S", "S_dirty", "E", "M", "E_shared", "none")


def preload(rng, cfg, lines, shapes=SHAPES):
    """A model device whose caches and snoop filter hold ``lines``, each in a shape drawn from
    ``shapes``: S copies (the entry S; ``S_dirty``: an M copy was downgraded inside the device), one E
    or M copy (the entry E), S copies under an E entry, or an entry with no copy left.  Returns
    (device, caches)."""
    dev = Device(0, cfg, _Sent(cfg), Checker())
    bfm = CacheBFM(cfg.caches)
    value = 1000
    for line in lines:
        s = dev.sf.set_of(line)
        way = dev.sf.free_way(s)
        if way is None:
            continue
        e = dev.sf.allocate(line, way)
        value += 1
        shape = rng.choice(shapes)
        holders = rng.sample(range(cfg.caches), rng.randint(1, cfg.caches))
        if shape in ("E", "M"):
            holders = holders[:1]
            e.state = DevState.E
            mesi = MESI.E if shape == "E" else MESI.M
        elif shape == "E_shared":
            e.state, mesi = DevState.E, MESI.S
        else:
            e.state, mesi = DevState.S, MESI.S
            e.dirty = shape == "S_dirty"
        if shape == "none":
            holders = []
        for k in holders:
            e.presence |= 1 << k
            dev.caches[k][line] = [mesi, value]
            bfm.caches[k][line] = [mesi, value]
    return dev, bfm


def sf_rows(dut, sf):
    """The snoop filter's storage as the model's filter holds it: one row constant per set."""
    layout = dut.sf.row_layout
    rows = []
    for s in range(sf.sets):
        ways = []
        for w in range(sf.ways):
            line = sf.tags[s][w]
            if line is None:
                ways.append({"valid": 0})
                continue
            e = sf.entries[line]
            ways.append({"valid": 1, "tag": line >> dut.sf.set_bits,
                         "entry": {"state": _SF_STATE[e.state], "dirty": int(e.dirty), "presence": e.presence}})
        rows.append(layout.const({"ways": ways, "plru": sf.plru[s]}).as_value().value)
    return rows


def sf_view(dut, rows):
    """The valid ways of each set (way, tag, entry) and its pseudo-LRU bits, from row values (a freed
    way keeps its old tag and entry bits in the RTL: only ``valid`` is cleared)."""
    layout = dut.sf.row_layout
    view = []
    for row in rows:
        r = data.Const(layout, row if isinstance(row, int) else row.as_value().value)
        ways = tuple((w, int(r.ways[w].tag), SFState(r.ways[w].entry.state), int(r.ways[w].entry.dirty),
                      int(r.ways[w].entry.presence)) for w in range(dut.sf_ways) if r.ways[w].valid)
        view.append((ways, int(r.plru)))
    return view


def compare_end_state(ctx, holder, bfm, dev, mismatch):
    """At the end of a run: the caches (``bfm`` against the model device ``dev``) and the snoop filter
    (``holder.sf``'s storage against the model's, valid ways and pseudo-LRU); ``mismatch(what)`` raises."""
    for k, (rtl, model) in enumerate(zip(bfm.caches, dev.caches)):
        got = {l: tuple(v) for l, v in rtl.items()}
        want = {l: tuple(v) for l, v in model.items()}
        if got != want:
            diff = {l: (got.get(l), want.get(l)) for l in set(got) | set(want) if got.get(l) != want.get(l)}
            mismatch(f"cache {k} differs (line: RTL, model): {diff}")
    got = sf_view(holder, [ctx.get(holder.sf.storage[s]) for s in range(dev.sf.sets)])
    want = sf_view(holder, sf_rows(holder, dev.sf))
    if got != want:
        mismatch(f"snoop filter (valid ways, pseudo-LRU): RTL {got}, model {want}")


class SnoopShadow:
    """The golden device ``dev`` following a snoop path's commit ports (hdl/dcoh/pipe/snoop_pipe.py,
    "Commit port"), in parts that a bench calls in its cycle's commit order: :meth:`probe_taken`,
    :meth:`snoop_c`, :meth:`lane`, :meth:`probe_added`.  ``snoops`` maps a line to the host's snoop to it
    that is being answered; ``mismatch(what, cycle)`` raises."""

    def __init__(self, dev, coalesce_block, snoops, mismatch):
        self.dev, self.block, self.snoops, self.mismatch = dev, coalesce_block, snoops, mismatch
        self.probed = set()         # lines whose probe the caches took, not yet answered

    def probe_taken(self, ctx, dut, cyc):
        if ctx.get(dut.probe.valid) and ctx.get(dut.probe.ready):
            p = ctx.get(dut.probe.p)
            base = int(p.block) * self.block
            only = {base + i for i in range(self.block) if (int(p.lines) >> i) & 1}
            self.probed.update(self.dev.close_probe(int(p.block), only))

    def snoop_c(self, ctx, dut, cyc):
        if CommitC(ctx.get(dut.commit_c)) is CommitC.ANSWER:
            self.dev.on_snoop(self.snoops[int(ctx.get(dut.commit_c_line))], cyc)

    def lane(self, ctx, dut, cyc):
        if ctx.get(dut.commit_lane):
            line = int(ctx.get(dut.commit_lane_line))
            if ctx.get(dut.commit_lane_probed):
                if line not in self.probed:
                    self.mismatch(f"line {line:#x} answered after a probe the caches have not taken", cyc)
                self.probed.discard(line)
                self.dev.finish_probe([line], cyc)
            else:
                self.dev.on_snoop(self.snoops[line], cyc)

    def probe_added(self, ctx, dut, cyc):
        # (a back-invalidation's probe: the model added it as it started the work)
        if ctx.get(dut.commit_probe) and not ctx.get(dut.commit_probe_evict):
            self.dev.on_snoop(self.snoops[int(ctx.get(dut.commit_probe_line))], cyc)


def per_cycle(rsp_cycles):
    """Responses per cycle over the middle half of a run (its start and drain left out)."""
    n = len(rsp_cycles)
    lo, hi = n // 4, 3 * n // 4
    return (hi - lo) / max(rsp_cycles[hi] - rsp_cycles[lo], 1)


class SnoopPipeBench:
    """One run: ``snoops`` (a list of (opcode, line)) sent as fast as the window takes them.

    ``p_sink``: the probability a D2H sink, the probe port or the command port takes in a cycle;
    ``cmd_delay``: the most cycles a command waits for its answer (0: in the next cycle).
    Returns a dict: cycles, the cycle of each response, the messages compared, errors."""

    def __init__(self, *, seed=1, caches=2, sf_sets=16, sf_ways=4, work=8, window=8, cmd_depth=4,
                 coalesce_window=4, coalesce_block=4, coalesce_groups=4, lines=None, n_lines=40,
                 shapes=SHAPES):
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = Config(devices=1, caches=caches, sf_sets=sf_sets, sf_ways=sf_ways,
                          coalesce_window=coalesce_window, coalesce_block=coalesce_block)
        self.dut = SnoopPipe(caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, work=work, window=window,
                             cmd_depth=cmd_depth, coalesce_window=coalesce_window,
                             coalesce_block=coalesce_block, coalesce_groups=coalesce_groups)
        if lines is None:
            lines = self.rng.sample(range(4 * sf_sets * sf_ways), min(n_lines, 4 * sf_sets * sf_ways))
        self.dev, self.bfm = preload(self.rng, self.cfg, lines, shapes)
        self.dut.sf.storage.init = sf_rows(self.dut, self.dev.sf)
        self.held_lines = sorted(self.dev.sf.entries)

    def random_snoops(self, n, miss_share=0.2, ops=tuple(H2DReqOpcode)):
        """``n`` snoops: opcodes drawn from ``ops``, to held lines and (``miss_share``) to lines the
        device lacks."""
        ops = list(ops)
        out = []
        for _ in range(n):
            if self.rng.random() < miss_share:
                line = (1 << 20) + self.rng.randrange(1 << 10)
            else:
                line = self.rng.choice(self.held_lines)
            out.append((self.rng.choice(ops), line))
        return out

    def run(self, snoops, *, p_sink=1.0, cmd_delay=0, max_cycles=None, check=True):
        dut, dev, bfm, rng = self.dut, self.dev, self.bfm, self.rng
        max_cycles = max_cycles or 40 * len(snoops) + 200
        out = {"rsp_cycles": [], "cycles": 0, "first_take": None}
        sent = dev.link
        rtl_rsp, rtl_data = [], []
        pending = deque(snoops)
        outstanding = {}            # line -> the snoop's Msg (one snoop per line at a time, as CXL asks)
        by_uqid = {}
        answers = CommandPort(bfm, rng, cmd_delay)

        def mismatch(what, cyc):
            raise Mismatch(f"seed {self.seed}, cycle {cyc}: {what}\n  RTL rsp {[(m.op.name, m.uid) for m in rtl_rsp[-5:]]}\n"
                           f"  model rsp {[(m.op.name, m.uid) for m in sent.rsp[-5:]]}")

        def compare(cyc):
            for name, got, exp in (("D2H Rsp", rtl_rsp, sent.rsp), ("D2H Data", rtl_data, sent.data)):
                for i in range(min(len(got), len(exp))):
                    g, e = got[i], exp[i]
                    if (g.op, g.uid, g.data if name == "D2H Data" else None) != \
                            (e.op, e.uid, e.data if name == "D2H Data" else None):
                        mismatch(f"{name} #{i}: RTL {g.op} uqid {g.uid} data {g.data}, model {e.op} uqid "
                                 f"{e.uid} data {e.data}", cyc)
                if len(got) > len(exp):
                    mismatch(f"{name}: the RTL sent {len(got)}, the model {len(exp)}", cyc)

        shadow = SnoopShadow(dev, self.cfg.coalesce_block, outstanding, mismatch)

        async def bench(ctx):
            uqid = 0
            for cyc in range(max_cycles):
                # ---- inputs of this cycle
                offer = None
                if pending and pending[0][1] not in outstanding:
                    op, line = pending[0]
                    offer = Msg(Channel.H2D_REQ, op, uqid % 4096, line)
                    ctx.set(dut.h2d_req.valid, 1)
                    ctx.set(dut.h2d_req.p, {"valid": 1, "opcode": op, "addr": line, "uqid": offer.uid})
                else:
                    ctx.set(dut.h2d_req.valid, 0)
                for port in (dut.d2h_rsp, dut.d2h_data, dut.probe, dut.cmd):
                    ctx.set(port.ready, rng.random() < p_sink)
                answers.drive(ctx, dut.cmd_rsp, cyc)
                # ---- what happens in it (read before the edge)
                if offer is not None and ctx.get(dut.h2d_req.ready):
                    pending.popleft()
                    outstanding[offer.line] = offer
                    by_uqid[offer.uid] = offer
                    uqid += 1
                    if out["first_take"] is None:
                        out["first_take"] = cyc
                answers.sample(ctx, dut.cmd, dut.cmd_rsp, cyc)
                # the shadow, in the commit port's order
                for part in (shadow.probe_taken, shadow.snoop_c, shadow.lane, shadow.probe_added):
                    part(ctx, dut, cyc)
                if ctx.get(dut.d2h_rsp.valid) and ctx.get(dut.d2h_rsp.ready):
                    r = ctx.get(dut.d2h_rsp.p)
                    msg = by_uqid.pop(int(r.uqid))
                    rtl_rsp.append(Msg(Channel.D2H_RSP, D2HRspOpcode(r.opcode), int(r.uqid), msg.line))
                    del outstanding[msg.line]
                    out["rsp_cycles"].append(cyc)
                if ctx.get(dut.d2h_data.valid) and ctx.get(dut.d2h_data.ready):
                    d = ctx.get(dut.d2h_data.p)
                    rtl_data.append(Msg(Channel.D2H_DATA, None, int(d.hdr.uqid), None, data=int(d.data)))
                if check:
                    compare(cyc)
                await ctx.tick()
                if not pending and not outstanding and not answers and len(rtl_data) == len(sent.data):
                    out["cycles"] = cyc + 1
                    break
            else:
                raise Mismatch(f"seed {self.seed}: not finished in {max_cycles} cycles: {len(pending)} snoops not taken, "
                               f"{len(outstanding)} unanswered ({sorted(hex(l) for l in outstanding)[:8]})")
            # ---- the end state
            out["errors"] = ctx.get(dut.protocol_errors)
            if check:
                compare(out["cycles"])
                if len(rtl_rsp) != len(sent.rsp) or len(rtl_data) != len(sent.data):
                    mismatch(f"counts: RTL {len(rtl_rsp)} rsp / {len(rtl_data)} data, model "
                             f"{len(sent.rsp)} / {len(sent.data)}", out["cycles"])
                if dev.work:
                    mismatch(f"the model still has work on {sorted(dev.work)}", out["cycles"])
                compare_end_state(ctx, dut, bfm, dev, lambda what: mismatch(what, out["cycles"]))

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
        out["rtl_rsp"], out["rtl_data"] = rtl_rsp, rtl_data
        return out
