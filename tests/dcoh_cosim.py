"""Co-simulation of the RTL DCOH against the golden model's device, inside the model's whole system.

The model's untimed system (host, links, N devices) runs as usual; device 0 is *shadowed* by the RTL:
every access device 0's caches make and every message the host delivers to device 0 is applied to the
model's device and to the RTL (through an internal-cache BFM following the model's MESI rules), the RTL
runs until it is idle, and then

* the D2H messages device 0 sent in that step must equal the RTL's (as multisets: opcode, CQID/UQID,
  address, data, bogus), and
* the RTL's internal caches, snoop-filter contents (tags, state, dirty, presence, pseudo-LRU bits) and
  tracker states must equal the model's.

A move of the model that opens a coalescer group on device 0 is followed at once by its flush, because
the RTL flushes by itself ``coalesce_window`` cycles later and the comparison is made at quiescence.

The pipelined DCOH (``make_dut(..., pipelined=True)``) runs under the same comparisons, with two rules of
its own: a step ends when it has been quiet for ``QUIET_CYCLES`` (``rtl_quiet``), and the model flushes a
group when the RTL offers its probe message (the engine's work waits for the probe, so the engine is not
quiet before; docs/dcoh_pipeline.md, "In the co-simulation").
"""

import random

from amaranth.hdl import Value
from amaranth.lib import data

from hdl.dcoh.dcoh import DCOH, CacheState, CmdOp, CpuKind, STATE_CODE
from hdl.dcoh.pipe.dcoh_top import COMMIT_STROBES, PipelinedDCOH
from hdl.dcoh.pipe.snoop_work import WorkState
from hdl.dcoh.snoop_filter import SFState
from cxl.messages import Channel, D2HReqOpcode, D2HRspOpcode
from models.config import Config
from models.dcoh import CpuOp
from models.link import Link
from tb.cache_bfm import CacheBFM
from cxl.coherence import DevState
from models.system import System

__all__ = ["CONFIG", "EDGES", "make_dut", "run_cosim", "simulate", "CosimMismatch"]

CONFIG = dict(devices=2, caches=2, sf_sets=2, sf_ways=2, max_outstanding=4, credits=64,
              coalesce_window=2, coalesce_block=2, clean_evict_pull=0)
#: sizes at the edges, name: (``Config`` overrides of :data:`CONFIG`, lines in play): a tracker smaller
#: than the lines, one-set 4- and 8-way snoop filters (every set overflows, the pseudo-LRU's inner nodes
#: choose victims), a work table of one entry (finite in the model too: ``Config.work_entries``)
EDGES = {
    "tracker2-8lines": (dict(max_outstanding=2), 8),
    "sf1x4-8lines": (dict(sf_sets=1, sf_ways=4, caches=3), 8),
    "sf1x8-12lines": (dict(sf_sets=1, sf_ways=8, caches=3), 12),
    "work1-8lines": (dict(work_entries=1), 8),
    "work1-tracker2-8lines": (dict(work_entries=1, max_outstanding=2), 8),
}
IDLE_LIMIT = 3000          # cycles the RTL may take to go idle after one event
QUIET_CYCLES = 16          # the pipelined DCOH: cycles without a commit that end a step (see rtl_quiet)


class CosimMismatch(AssertionError):
    pass


_SF_STATE = {None: SFState.PLACEHOLDER, DevState.S: SFState.S, DevState.E: SFState.E}


def make_dut(cfg, window=128, pipelined=False):
    """The RTL for a model configuration (``pipelined``: the pipelined DCOH).  For the serializing DCOH the
    coalescer window is long (``window`` cycles) because the model's untimed groups stay open until a move
    flushes them; the harness flushes a group before half the window has passed.  The pipelined DCOH's
    groups close when its window does (the model follows), so a short window only makes the run faster."""
    return (PipelinedDCOH if pipelined else DCOH)(
        caches=cfg.caches, sf_sets=cfg.sf_sets, sf_ways=cfg.sf_ways, tracker=cfg.max_outstanding,
        work=cfg.work_entries or 8, coalesce_window=window, coalesce_block=cfg.coalesce_block,
        coalesce_groups=4, starvation_bound=cfg.starvation_bound, credits=64)


def _rtl_sf(ctx, dut):
    """The RTL snoop filter as {line: (state, dirty, presence, way)} and its pseudo-LRU bits per set."""
    entries, plru = {}, []
    sf = dut.sf
    set_bits = sf.set_bits
    for s in range(sf.sets):
        row = data.Const(sf.row_layout, ctx.get(sf.storage[s]))
        plru.append(int(row.plru))
        for w in range(sf.ways):
            way = row.ways[w]
            if way.valid:
                line = (int(way.tag) << set_bits) | s
                entries[line] = (SFState(way.entry.state), int(way.entry.dirty), int(way.entry.presence), w)
    return entries, plru


KINDS = ("load", "load", "store", "store", "evict", "rdcurr", "itomwr", "wrinv", "clflush")


class UpstreamSpy(Link):
    """A model link that also appends every message its device sends to ``sent`` (a subclass: the
    compiled golden model's links take no replaced methods, models/link.pxd)."""

    def __init__(self, cfg, timed, sent):
        super().__init__(cfg, timed)
        self.sent = sent

    def send(self, msg, now, extra=0):
        if msg.chan.upstream:
            self.sent.append(msg)
        return super().send(msg, now, extra)


async def run_cosim(ctx, dut, seed, steps=0, *, cfg=None, trace=None, lines=6, log=None):
    """Drive ``steps`` random moves (or the moves of ``trace``: ("cpu", d, k, kind, line, value,
    variant) / ("deliver", d, upstream, index) / ("flush", d, block) / ("host", kind, line, value));
    raise CosimMismatch on the first difference.  The model's device 0 coalescer groups are flushed by moves, and the RTL's
    caches take the matching probe message only then."""
    rng = random.Random(seed)
    cfg = cfg or Config(**CONFIG)
    core = getattr(dut, "dcoh", dut)          # the DCOH itself (a LinkedDevice wraps one)
    pipelined = isinstance(core, PipelinedDCOH)
    sysm = System(cfg, timed=False)
    dev = sysm.devices[0]
    bfm = CacheBFM(cfg.caches)
    sent = []                       # D2H messages device 0 sent in the model this step
    sysm.replace_link(0, UpstreamSpy(cfg, False, sent))
    value = [100]

    for d in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd):
        ctx.set(d.ready, 1)

    async def rtl_until_idle(step):
        """Tick until the RTL is idle with nothing left to emit; collect what it emitted."""
        out = []
        pending_rsp = None
        idle_run = 0
        last_ret = {"req": 0, "rsp": 0, "data": 0}
        for _ in range(IDLE_LIMIT):
            if pending_rsp is not None:
                ctx.set(dut.cmd_rsp.valid, 1)
                ctx.set(dut.cmd_rsp.p.dirty, pending_rsp[0])
                ctx.set(dut.cmd_rsp.p.excl, pending_rsp[1])
                ctx.set(dut.cmd_rsp.p.data, pending_rsp[2])
            else:
                ctx.set(dut.cmd_rsp.valid, 0)
            rsp_taken = ctx.get(dut.cmd_rsp.valid) and ctx.get(dut.cmd_rsp.ready)
            ret = {"req": 0, "rsp": 0, "data": 0}
            if ctx.get(dut.d2h_req.valid):
                p = ctx.get(dut.d2h_req.p)
                out.append(("req", D2HReqOpcode(p.opcode), int(p.cqid), int(p.addr)))
                ret["req"] = 1
            if ctx.get(dut.d2h_rsp.valid):
                p = ctx.get(dut.d2h_rsp.p)
                out.append(("rsp", D2HRspOpcode(p.opcode), int(p.uqid)))
                ret["rsp"] = 1
            if ctx.get(dut.d2h_data.valid):
                p = ctx.get(dut.d2h_data.p)
                bogus = int(p.hdr.bogus)
                out.append(("data", int(p.hdr.uqid), None if bogus else int(p.data), bogus))
                ret["data"] = 1
            new_cmd = None
            if pipelined:
                # the pipelined engine offers its next command while an answer is owed: the caches take
                # one at a time.  And it flushes a coalescer group by itself when its window closes: the
                # model flushes the same group then (a work entry waiting for the probe keeps the engine
                # from idle, so no group stays open across moves, as the serializing DCOH's do)
                ctx.set(dut.cmd.ready, pending_rsp is None)
                ctx.set(dut.probe.ready, 0)
                if ctx.get(dut.probe.valid):
                    block = int(ctx.get(dut.probe.p.block))
                    if block not in dev.coal.groups:
                        raise CosimMismatch(f"seed {seed} step {step}: the RTL offers a probe message for block "
                                            f"{block:#x}, the model has no group open for it")
                    dev.flush(block, 0)
                    sysm.settle()
                    opened.pop(block, None)
                    ctx.set(dut.probe.ready, 1)
            if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
                c = ctx.get(dut.cmd.p)
                new_cmd = bfm.command(int(c.line), int(c.caches), CmdOp(c.op).name)
            if ctx.get(dut.cpu_rsp.valid):
                c = ctx.get(dut.cpu_rsp.p)
                bfm.install(int(c.cache), int(c.line), CacheState(c.state).name, int(c.data))
            # the link returns each credit one cycle after the message left (the counter's rule);
            # a LinkedDevice has the link itself in between, with its own credits
            if hasattr(dut, "crd_req"):
                ctx.set(dut.crd_req, last_ret["req"])
                ctx.set(dut.crd_rsp, last_ret["rsp"])
                ctx.set(dut.crd_data, last_ret["data"])
                last_ret = ret
            idle = rtl_quiet() and not any(ctx.get(s) for s in (
                dut.d2h_req.valid, dut.d2h_rsp.valid, dut.d2h_data.valid, dut.cpu_rsp.valid, dut.cmd.valid,
                dut.cpu_req.valid, dut.h2d_req.valid, dut.h2d_rsp.valid, dut.h2d_data.valid)) \
                and pending_rsp is None
            await ctx.tick()
            clock[0] += 1
            if rsp_taken:
                pending_rsp = None
            if new_cmd is not None:
                pending_rsp = new_cmd
            idle_run = idle_run + 1 if idle and not any(last_ret.values()) else 0
            if idle_run >= (QUIET_CYCLES if pipelined else 2):
                if hasattr(dut, "crd_req"):
                    for s in (dut.crd_req, dut.crd_rsp, dut.crd_data):
                        ctx.set(s, 0)
                return out
        raise CosimMismatch(f"seed {seed} step {step}: the RTL did not go idle in {IDLE_LIMIT} cycles"
                            f"{busy_parts()}")

    def rtl_quiet():
        """The RTL can do nothing more without a message or an answer from outside.  The serializing DCOH
        says so (``idle``).  The pipelined DCOH's ``idle`` also waits for the accesses parked behind a
        request on their line, which only the host's answer wakes: there, no snoop or response work, no
        request waiting to leave, and no commit (the request path's accesses go round without one for at
        most a few cycles; QUIET_CYCLES of them in a row end the step)."""
        if not pipelined:
            return ctx.get(dut.idle)
        e = core.engine
        return ctx.get(e.rsp_path.idle) and ctx.get(e.snoop.idle) and ctx.get(e.transmit.empty) and \
            not any(ctx.get(Value.cast(getattr(core, name))) for name in COMMIT_STROBES)

    def busy_parts():
        """For the pipelined DCOH: which of the engine's parts is busy, and its work entries' states."""
        if not pipelined:
            return ""
        e = core.engine
        busy = [name for name, sig in (("request path", e.req_path.idle), ("response path", e.rsp_path.idle),
                                       ("snoop path", e.snoop.idle)) if not ctx.get(sig)]
        work = [WorkState(ctx.get(st)).name for st in e.snoop.work_block.states]
        return f" (busy: {', '.join(busy) or 'none of the paths'}; work entries {work})"

    async def drive(stream_, payload, step):
        ctx.set(stream_.valid, 1)
        msg = stream_.p.hdr if hasattr(stream_.p, "hdr") else stream_.p
        if hasattr(msg, "valid"):
            ctx.set(msg.valid, 1)                  # a CXL message's own Valid bit (a link drops 0)
        for name, v in payload.items():
            target = stream_.p
            for part in name.split("."):
                target = getattr(target, part)
            ctx.set(target, v)
        for _ in range(IDLE_LIMIT):
            ready = ctx.get(stream_.ready)
            await ctx.tick()
            clock[0] += 1
            if ready:
                ctx.set(stream_.valid, 0)
                return
        raise CosimMismatch(f"seed {seed} step {step}: the RTL never took {payload}")

    def model_out():
        out = []
        for msg in sent:
            if msg.chan is Channel.D2H_REQ:
                out.append(("req", msg.op, msg.uid, msg.line))
            elif msg.chan is Channel.D2H_RSP:
                out.append(("rsp", msg.op, msg.uid))
            else:
                out.append(("data", msg.uid, None if msg.bogus else msg.data, int(msg.bogus)))
        sent.clear()
        return out

    def compare(step, what, rtl_out):
        want = model_out()
        key = lambda t: repr(t)
        if sorted(want, key=key) != sorted(rtl_out, key=key):
            raise CosimMismatch(f"seed {seed} step {step} ({what}): model sent {want}, RTL sent {rtl_out}")
        for k in range(cfg.caches):
            if bfm.caches[k] != dev.caches[k]:
                raise CosimMismatch(f"seed {seed} step {step} ({what}): cache {k}: model {dev.caches[k]}, "
                                    f"RTL {bfm.caches[k]}")
        rtl_sf, rtl_plru = _rtl_sf(ctx, core.engine if isinstance(core, PipelinedDCOH) else core)
        model_sf = {line: (_SF_STATE[e.state], int(e.dirty), e.presence, e.way)
                    for line, e in dev.sf.entries.items()}
        if rtl_sf != model_sf or rtl_plru != dev.sf.plru:
            raise CosimMismatch(f"seed {seed} step {step} ({what}): snoop filter: model {model_sf} plru "
                                f"{dev.sf.plru}, RTL {rtl_sf} plru {rtl_plru}")
        if isinstance(core, PipelinedDCOH):
            in_use, states = ctx.get(core.engine.cqids_in_use), ctx.get(core.engine.rsp_path.states)
            rtl_t = {i: int(states[i]) for i in range(cfg.max_outstanding) if in_use >> i & 1}
        else:
            trk = ctx.get(core.trk)
            rtl_t = {i: int(trk[i].state) for i in range(cfg.max_outstanding) if trk[i].valid}
        model_t = {c: STATE_CODE[t.state] for c, t in dev.txns.items()}
        if rtl_t != model_t:
            raise CosimMismatch(f"seed {seed} step {step} ({what}): tracker: model {model_t}, RTL {rtl_t}")

    def describe(msg):
        return f"{msg.chan.name} {getattr(msg.op, 'name', '')} uid {msg.uid} line {msg.line:#x}"

    opened = {}                     # dev0 coalescer block -> RTL cycle its group opened at
    clock = [0]

    async def flush_dev0(block, step):
        """The model flushes ``block``; the RTL's caches take the coalescer's message for it."""
        dev.flush(block, 0)
        sysm.settle()
        opened.pop(block, None)
        for _ in range(IDLE_LIMIT):
            if ctx.get(dut.probe.valid):
                got = int(ctx.get(dut.probe.p.block))
                if got != block:
                    raise CosimMismatch(f"seed {seed} step {step}: the model flushes block {block:#x}, the RTL "
                                        f"offers block {got:#x}")
                ctx.set(dut.probe.ready, 1)
                await ctx.tick()
                clock[0] += 1
                ctx.set(dut.probe.ready, 0)
                return
            await ctx.tick()
            clock[0] += 1
        raise CosimMismatch(f"seed {seed} step {step}: no probe message from the RTL for block {block:#x}")

    async def cpu(d, k, kind, line, val, variant, step):
        op = CpuOp(kind, k, line, val, variant)
        if d != 0:
            sysm.devices[d].accept(op, 0)
            sysm.settle()
            return None
        hit = bfm.access(op)                      # a hit is the cache's own business
        assert dev.accept(op, 0)
        sysm.settle()
        if not hit:
            await drive(dut.cpu_req, {"kind": CpuKind[kind.upper()], "cache": k, "line": line,
                                      "variant": variant, "data": val}, step)
        return repr(op)

    async def deliver(move, step):
        if move[1] == 0 and not move[2]:
            msg = sysm.links[0].flight[False][move[3]][1]
            sysm.apply_move(move)
            if msg.chan is Channel.H2D_REQ:
                await drive(dut.h2d_req, {"opcode": msg.op, "addr": msg.line, "uqid": msg.uid}, step)
            elif msg.chan is Channel.H2D_RSP:
                await drive(dut.h2d_rsp, {"opcode": msg.op, "rsp_data": msg.rsp_data, "cqid": msg.uid}, step)
            else:
                await drive(dut.h2d_data, {"hdr.cqid": msg.uid, "data": msg.data}, step)
            return describe(msg)
        sysm.apply_move(move)
        return None

    def random_moves():
        for step in range(steps):
            moves = [mv for mv in sysm.protocol_moves() if mv[0] != "flush" or mv[1] != 0]
            if dev.coal.groups:                    # dev0 flushes its oldest group first, as the RTL does
                moves.append(("flush", 0, next(iter(dev.coal.groups))))
            idle_caches = [(d, k) for d in range(cfg.devices) for k in range(cfg.caches)
                           if sysm.devices[d].ops[k] is None]
            if idle_caches and (not moves or rng.random() < 0.35):
                d, k = rng.choice(idle_caches)
                value[0] += 1
                yield ("cpu", d, k, rng.choice(KINDS), rng.randrange(lines), value[0], rng.randrange(2))
            elif moves:
                yield rng.choice(moves)
            else:
                return

    for step, move in enumerate(trace if trace is not None else random_moves()):
        # the RTL's coalescer window must not close before the model flushes: flush old groups first
        for block, t0 in list(opened.items()):
            if clock[0] - t0 > dut.coalesce_window // 2 and block in dev.coal.groups:
                await flush_dev0(block, step)
                compare(step, f"flush {block:#x} (window)", await rtl_until_idle(step))
        if move[0] == "cpu":
            what = await cpu(*move[1:], step)
        elif move[0] == "deliver":
            what = await deliver(move, step)
        elif move[0] == "host":                   # the host's own access: its snoops go out as messages
            sysm.host.host_access(*move[1:4], sysm.now)
            sysm.settle()
            what = f"host {move[1]} {move[2]:#x}"
        elif move[1] == 0:
            if move[2] not in dev.coal.groups:
                continue                           # a trace's flush of a group already flushed
            await flush_dev0(move[2], step)
            what = f"flush {move[2]:#x}"
        else:
            sysm.apply_move(move)
            what = None
        rtl_out = await rtl_until_idle(step)
        for block in dev.coal.groups:
            opened.setdefault(block, clock[0])
        if what is not None or sent or rtl_out:
            compare(step, what or "other", rtl_out)
            if log is not None:
                log.append(what)
        sysm.check_all()
    # finish: flush what is left so that the last probes are compared too
    for block in list(dev.coal.groups):
        await flush_dev0(block, steps)
        compare(steps, f"final flush {block:#x}", await rtl_until_idle(steps))
    return sysm


def simulate(cfg, seed, steps=0, *, trace=None, lines=6, window=128, pipelined=False, model_cfg=None):
    """One co-simulation of a new RTL for ``cfg`` (:func:`make_dut`) in Amaranth's simulator; returns the
    model's system at the end (raises :class:`CosimMismatch`).  ``model_cfg``: the golden model's
    configuration where it is not ``cfg`` (a test that shows a model limit is what keeps the two
    together runs the model without it)."""
    from amaranth.sim import Simulator
    dut = make_dut(cfg, window, pipelined)
    out = {}

    async def bench(ctx):
        out["sys"] = await run_cosim(ctx, dut, seed, steps, cfg=model_cfg or cfg, trace=trace, lines=lines)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out["sys"]


def main(argv=None):
    """Long co-simulation runs: ``python tests/dcoh_cosim.py --seeds 60 --steps 500 [--linked --ber 1e-4]``.
    Prints one line per seed; a failure prints its seed (rerun it with --first SEED --seeds 1)."""
    import argparse
    import sys
    import time
    from amaranth.sim import Simulator
    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--linked", action="store_true", help="the device top behind a whole flit link")
    ap.add_argument("--ber", type=float, default=0.0, help="bit error rate on the link wires (--linked)")
    args = ap.parse_args(argv)
    cfg = Config(**CONFIG)
    failures = 0
    for seed in range(args.first, args.first + args.seeds):
        if args.linked:
            from tb.linked_device import LinkedDevice
            dut = LinkedDevice(dcoh=dict(caches=cfg.caches, sf_sets=cfg.sf_sets, sf_ways=cfg.sf_ways,
                                         tracker=cfg.max_outstanding, work=8, coalesce_window=128,
                                         coalesce_block=cfg.coalesce_block, coalesce_groups=4, credits=64),
                               link=dict(retry_depth=64), ber=args.ber, seed=seed)
        else:
            dut = make_dut(cfg)
        log = []

        async def bench(ctx):
            await run_cosim(ctx, dut, seed, args.steps, cfg=cfg, log=log)
        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        t0 = time.monotonic()
        try:
            sim.run()
            print(f"seed {seed}: ok, {len(log)} steps touched device 0, {time.monotonic() - t0:.1f} s", flush=True)
        except CosimMismatch as e:
            failures += 1
            print(f"seed {seed}: FAIL {e}", flush=True)
    print(f"{failures} failure(s) in {args.seeds} seeds")
    return 1 if failures else 0


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
