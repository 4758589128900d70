"""A bench for the pipelined DCOH's engine (hdl/dcoh/pipe/engine.py) against the golden device.

The golden model's device (``models.dcoh.Device``) and the RTL start from the same lines in the caches and the
snoop filter (``tb.snoop_pipe.preload``). Each internal cache (``tb.cache_bfm.CacheBFM``) makes random
accesses; what it cannot finish itself goes to ``cpu_req``. The bench plays the host: each D2H Req is compared
with the model's request of that CQID and answered by a random path through the response table, and
(``snoop_rate``) host snoops go to random lines, those with requests in flight among them, under the host's
rules: one snoop to a line at a time, and no H2D Rsp to a request while a snoop to its line is unanswered; it
may offer a snoop in the same cycle as a GO to its line, which must then be taken first (an H2D Rsp offered in
a snoop's cycle is ahead of it in CXL's order: the bench checks that the engine takes no snoop while such an
H2D Rsp waits). The model follows the commit ports in the engine's order (hdl/dcoh/pipe/engine.py): a probe
message taken, snoop C, the completions (``defer_complete``), request C (an access taken with ``Device.take``
is tried there, ``_try_issue``, which must succeed), the snoop answer lane, a probe added, response C. Every
D2H Rsp is compared in order, every D2H Data by its UQID (the two sources of D2H Data share the channel in the
engine's order, the host matches them by UQID), every ``cpu_rsp``, and at the end the snoop filter and the
caches. With ``lines_per_set`` above the ways, or ``uncached_held``, accesses back-invalidate lines
(``commit_bi``).

``top=True`` runs the DCOH top (hdl/dcoh/pipe/dcoh_top.py) instead of the bare engine: the bench returns
each D2H credit 1 to ``credit_delay`` + 1 cycles after the message that spent it, compares every D2H Req
with a copy of the model's ``TxArbiter`` fed by the engine's pushes (the QoS order), and DevLoad with the
model's CQIDs in use every cycle.
"""

import random
from collections import deque

from amaranth.sim import Simulator

from cxl.messages import Channel, D2HReqOpcode, D2HRspOpcode, H2DReqOpcode
from hdl.dcoh.encodings import CacheState
from hdl.dcoh.pipe.dcoh_top import PipelinedDCOH
from hdl.dcoh.pipe.engine import Engine
from hdl.dcoh.pipe.response_path import ResponseCommit
from hdl.dcoh.pipe.snoop_work import WorkState
from models.config import Config
from models.dcoh import CpuOp, TxArbiter, cache_hit, devload_level
from models.link import Msg
from tb.cache_bfm import CommandPort
from tb.engine_shadow import ShadowDisagrees, shadow_commit, shadow_hit
from tb.response_path import UncheckedValues, host_events, host_message, offer_host
from tb.snoop_pipe import Mismatch, SnoopShadow, compare_end_state, preload, sf_rows

__all__ = ["EngineBench", "SLOW_PORTS", "SNOOPS"]

#: run parameters: the ports take or offer in about half the cycles, commands and the host answer late
SLOW_PORTS = dict(p_sink=0.4, p_in=0.5, cmd_delay=3, host_delay=10)
#: run parameters: the host snoops in about a third of the cycles
SNOOPS = dict(snoop_rate=0.35)

#: the engine's outputs the bench takes from (``p_sink``, ``stall``)
SINKS = ("d2h_data", "cpu_rsp", "cmd", "d2h_req", "d2h_rsp", "probe")

CACHED = ("load", "load", "load", "store", "store", "store", "evict", "evict")
UNCACHED = ("rdcurr", "itomwr", "wrinv", "clflush")


class EngineBench:
    """One run of ``accesses`` random accesses.  ``p_access``: the probability an idle cache starts an
    access in a cycle; ``p_in`` / ``p_sink`` / ``cmd_delay`` as in tb/response_path.py; ``snoop_rate``:
    the probability the host offers a snoop in a cycle.  ``work``, ``window``, ``cmd_depth``,
    ``coalesce_*``: the engine's snoop side."""

    def __init__(self, *, seed=1, caches=4, tracker=16, sf_sets=16, sf_ways=4, lines_per_set=None,
                 uncached_share=0.15, uncached_held=0.0, preload_share=0.5, work=8, window=8, cmd_depth=4,
                 coalesce_window=4, coalesce_block=4, coalesce_groups=4, top=False, credits=8, credit_delay=0,
                 starvation_bound=4):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.cfg = Config(devices=1, caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, max_outstanding=tracker,
                          coalesce_window=coalesce_window, coalesce_block=coalesce_block)
        per_set = lines_per_set or sf_ways
        # the cached lines: ``per_set`` in each set (more than its ways: misses back-invalidate a victim);
        # ``preload_share`` of them preloaded.  Uncached accesses go to lines no cache holds, or
        # (``uncached_held`` of them) to the cached lines (the device back-invalidates its own copies)
        self.lines = [s + sf_sets * i for s in range(sf_sets) for i in range(per_set)]
        self.uncached_lines = [(1 << 20) + i for i in range(8)]
        self.uncached_share, self.uncached_held = uncached_share, uncached_held
        self.dev, bfm = preload(rng, self.cfg, rng.sample(self.lines, int(len(self.lines) * preload_share)),
                                shapes=("S", "S", "S_dirty", "E", "M", "E_shared"))
        self.dev.checker = UncheckedValues()
        self.dev.defer_complete = True
        self.dev.defer_service = True       # the model tries an access only where the RTL commits it
        self.bfm = bfm
        bfm.strict = True
        params = dict(caches=caches, tracker=tracker, sf_sets=sf_sets, sf_ways=sf_ways, work=work, window=window,
                      cmd_depth=cmd_depth, coalesce_window=coalesce_window, coalesce_block=coalesce_block,
                      coalesce_groups=coalesce_groups, starvation_bound=starvation_bound)
        self.top, self.credit_delay = top, credit_delay
        self.dut = PipelinedDCOH(**params, credits=credits) if top else Engine(**params)
        self.engine = self.dut.engine if top else self.dut
        self.arbiter = TxArbiter(starvation_bound)      # the model's order of D2H Req, fed by the engine's pushes
        self.dut.sf.storage.init = sf_rows(self.dut, self.dev.sf)

    def _access(self, k):
        rng = self.rng
        if rng.random() < self.uncached_share:
            lines = self.lines if rng.random() < self.uncached_held else self.uncached_lines
            return CpuOp(rng.choice(UNCACHED), k, rng.choice(lines), rng.getrandbits(64), rng.randrange(2))
        kind = rng.choice(CACHED)
        if kind == "evict":
            held = sorted(self.bfm.caches[k])
            if not held:
                kind = "load"
            else:
                return CpuOp("evict", k, rng.choice(held), 0, rng.randrange(2))
        return CpuOp(kind, k, rng.choice(self.lines), rng.getrandbits(64), rng.randrange(2))

    def _snoop(self):
        """A snoop's (opcode, line): to a line with a request in flight (the model's, a third of the
        time when there is one), a cached line, a line of the uncached accesses, or a miss."""
        rng = self.rng
        r = rng.random()
        busy = sorted(self.dev.by_line)
        if busy and r < 0.35:
            line = rng.choice(busy)
        else:
            line = rng.choice(self.lines) if r < 0.85 else rng.choice(self.uncached_lines) if r < 0.93 else \
                (1 << 21) + rng.randrange(64)
        return rng.choice(list(H2DReqOpcode)), line

    def run(self, accesses=200, *, p_access=0.5, p_in=1.0, p_sink=1.0, cmd_delay=0, host_delay=4,
            max_cycles=None, script=None, snoop_rate=0.0, snoop_script=None, host_plan=None, stall=None):
        """``script``: instead of random accesses, a list of (cycle, CpuOp), each made at that cycle or
        as soon after as its cache is idle, each cache's in their order (``accesses`` is then its length).
        ``snoop_script``: instead of random snoops, a list of (cycle, opcode, line), each offered from that
        cycle on, in order.  ``host_plan(txn)``: the host's answer to a request (a model ``Txn``) as a
        list of (cycles after its D2H Req, response-table event), or None for a random one.  ``stall``:
        {sink: cycles} in which that sink (one of :data:`SINKS`) is not ready whatever ``p_sink`` draws."""
        dut, dev, bfm, rng = self.dut, self.dev, self.bfm, self.rng
        K = self.cfg.caches
        max_cycles = max_cycles or 60 * accesses + 500
        stall = stall or {}
        if set(stall) - set(SINKS):
            raise ValueError(f"stall: no sink named {sorted(set(stall) - set(SINKS))}; the sinks are {SINKS}")
        out = {"cycles": 0, "accesses": 0, "hits": 0, "commits": 0, "requests": 0, "rsp_events": 0,
               "event_cycles": [], "commit_cycles": {}, "log": [], "snoops": 0, "snoop_data": 0,
               "snoops_on_requests": 0, "back_invalidations": 0, "rsp_cycles": [],
               "arbitrations": 0}
        to_send = deque()               # accesses the caches could not finish, in order
        chans = {"rsp": deque(), "data": deque()}
        taken = deque()
        answers = CommandPort(bfm, rng, cmd_delay)
        expected = {}                   # cache -> (line, state, data or None): the cpu_rsp it must get
        sent = dev.link
        data_seen = 0                   # the model's D2H Data moved into ``data_owed``
        data_owed = {}                  # UQID -> the model's D2H Data with it, not yet matched, in order
        rtl_rsp = []
        uqid = iter(range(1 << 30))
        snoop_out = {}                  # line -> the host's snoop to it, taken and not yet answered
        snoop_by_uqid = {}
        snoop_uqids = set()
        started = 0
        held_hit = [None] * K           # a cache's hit waiting for a snoop to its line to be answered
        if snoop_script is not None:
            snoop_script = deque(snoop_script)
        if script is not None:
            accesses = len(script)
            script = {k: deque(item for item in script if item[1].k == k) for k in range(K)}

        def mismatch(what, cyc):
            raise Mismatch(f"seed {self.seed}, cycle {cyc}: {what}")

        def compare_data(d, cyc):
            nonlocal data_seen
            for msg in sent.data[data_seen:]:
                data_owed.setdefault(msg.uid, deque()).append(msg)
            data_seen = len(sent.data)
            got = (int(d.hdr.uqid), bool(d.hdr.bogus), int(d.data))
            owed = data_owed.get(got[0])
            if not owed:
                mismatch(f"D2H Data with UQID {got[0]}, which the model has not sent", cyc)
            exp = owed.popleft()
            out["snoop_data"] += got[0] in snoop_uqids
            want = (exp.uid, exp.bogus, 0 if exp.bogus or exp.data is None else exp.data)
            if got != want:
                mismatch(f"D2H Data: RTL (uqid, bogus, data) {got}, model {want}", cyc)

        def expect(k, line, cyc):
            c = dev.caches[k].get(line)
            state = "I" if c is None else c[0].name
            if k in expected:
                mismatch(f"cache {k} owed two answers", cyc)
            expected[k] = (line, state, c[1] if c is not None and state == "S" else None)

        shadow = SnoopShadow(dev, self.cfg.coalesce_block, snoop_out, mismatch)
        eng, arbiter, top = self.engine, self.arbiter, self.top
        credits_due = {name: deque() for name in ("d2h_req", "d2h_rsp", "d2h_data")}   # cycles of returns
        in_use = []                     # the model's CQIDs in use after each cycle

        def return_credits(ctx, cyc):
            for name, due in credits_due.items():
                n = 0
                while due and due[0] <= cyc and n < 64:
                    due.popleft()
                    n += 1
                ctx.set(getattr(dut, "crd_" + name[4:]), n)

        def spend_credit(name, cyc):
            if top:
                credits_due[name].append(cyc + 1 + rng.randint(0, self.credit_delay))

        async def bench(ctx):
            nonlocal started
            for cyc in range(max_cycles):
                # ---- the caches' new accesses (a hit finishes at once, in the cache and the model)
                for k in range(K):
                    if held_hit[k] is not None:
                        op, held_hit[k] = held_hit[k], None
                    elif script is not None:
                        mine = script[k]
                        if not mine or mine[0][0] > cyc or bfm.busy[k] is not None:
                            continue
                        op = mine.popleft()[1]
                        started += 1
                    elif started >= accesses or bfm.busy[k] is not None or rng.random() >= p_access:
                        continue
                    else:
                        op = self._access(k)
                        started += 1
                    # A hit to a line with a host snoop unanswered waits: the snoop may have read the line
                    # with a command that leaves the cache its copy (KEEP), whose answer is the snoop's data,
                    # while the model reads the line where the snoop commits, a few cycles later.
                    if op.line in snoop_out and cache_hit(bfm.caches[k], op):
                        held_hit[k] = op
                        continue
                    out["accesses"] += 1
                    if bfm.access(op):
                        out["hits"] += 1
                        try:
                            shadow_hit(dev, op, cyc)
                        except ShadowDisagrees as e:
                            mismatch(str(e), cyc)
                    else:
                        to_send.append(op)
                # ---- inputs of this cycle
                if to_send:
                    op = to_send[0]
                    ctx.set(dut.cpu_req.valid, 1)
                    ctx.set(dut.cpu_req.p, {"kind": ["load", "store", "evict", "rdcurr", "itomwr", "wrinv",
                                                     "clflush"].index(op.kind), "cache": op.k, "line": op.line,
                                            "variant": op.variant, "data": op.value})
                else:
                    ctx.set(dut.cpu_req.valid, 0)
                offers = {}
                for chan, port in (("rsp", dut.h2d_rsp), ("data", dut.h2d_data)):
                    q = chans[chan]
                    # (no H2D Rsp to a request while a snoop to its line is unanswered: the host's rule)
                    if q and q[0][0] <= cyc and rng.random() < p_in and \
                            (chan == "data" or q[0][1].line not in snoop_out):
                        msg = offers[chan] = q[0][1]
                        offer_host(ctx, port, msg)
                    else:
                        ctx.set(port.valid, 0)
                snoop = None
                if snoop_script is not None:
                    want = snoop_script[0][1:] if snoop_script and snoop_script[0][0] <= cyc else None
                else:       # (while the caches still make accesses: then the run drains)
                    want = self._snoop() if started < accesses and rng.random() < snoop_rate else None
                if want is not None:
                    op, line = want
                    if line not in snoop_out:
                        snoop = Msg(Channel.H2D_REQ, op, next(uqid) % 4096, line)
                        ctx.set(dut.h2d_req.valid, 1)
                        ctx.set(dut.h2d_req.p, {"valid": 1, "opcode": op, "addr": line, "uqid": snoop.uid})
                if snoop is None:
                    ctx.set(dut.h2d_req.valid, 0)
                for name in SINKS:
                    # (the draw is made in every cycle: a stall leaves the run's other draws as they were)
                    ctx.set(getattr(dut, name).ready, rng.random() < p_sink and cyc not in stall.get(name, ()))
                answers.drive(ctx, dut.cmd_rsp, cyc)
                if top:
                    return_credits(ctx, cyc)
                    # DevLoad: from the count of CQIDs in use registered a cycle after the tracker's
                    if cyc >= 2:
                        want = devload_level(in_use[cyc - 2], self.cfg.max_outstanding, self.cfg.devload_thresholds)
                        if ctx.get(dut.devload) != want:
                            mismatch(f"DevLoad {ctx.get(dut.devload)}, the model's {in_use[cyc - 2]} CQIDs in use "
                                     f"give {want}", cyc)
                # ---- what happens in it (read before the edge), in the commit ports' order
                if to_send and ctx.get(dut.cpu_req.ready):
                    op = to_send.popleft()
                    out["log"].append((cyc, "cpu_req", op.k))
                    if not dev.take(op, cyc):
                        mismatch(f"the model's cache {op.k} already has an access", cyc)
                for chan, port in (("rsp", dut.h2d_rsp), ("data", dut.h2d_data)):
                    if chan in offers and ctx.get(port.ready):
                        chans[chan].popleft()
                        taken.append(offers[chan])
                        out["log"].append((cyc, "h2d", offers[chan].uid))
                if snoop is not None and ctx.get(dut.h2d_req.ready):
                    # CXL's order (docs/sources.md §1.1): an H2D Rsp offered in a snoop's cycle is ahead of
                    # it (the link hands a flit's messages over at one edge, a GO before the snoop behind
                    # it), so the engine takes no snoop while an H2D Rsp waits at its port
                    if "rsp" in offers and not ctx.get(dut.h2d_rsp.ready):
                        mismatch(f"the engine took a snoop to line {snoop.line:#x} before the H2D Rsp offered "
                                 f"with it ({offers['rsp']!r})", cyc)
                    if snoop_script:
                        snoop_script.popleft()
                    snoop_out[snoop.line] = snoop_by_uqid[snoop.uid] = snoop
                    snoop_uqids.add(snoop.uid)
                    out["snoops"] += 1
                    if snoop.line in dev.by_line:
                        out["snoops_on_requests"] += 1
                    out["log"].append((cyc, "h2d_req", snoop.uid))
                # the shadow, in the engine's commit order
                shadow.probe_taken(ctx, dut, cyc)
                shadow.snoop_c(ctx, dut, cyc)
                if ctx.get(dut.freed_valid):
                    cqid = int(ctx.get(dut.freed_cqid))
                    t = dev.txns.get(cqid)
                    if t is None:
                        mismatch(f"the RTL completed CQID {cqid}, which the model has not started", cyc)
                    dev.complete(cqid, cyc)
                    if t.cpu is not None:
                        expect(t.cpu.k, t.line, cyc)
                        if t.data is not None and expected[t.cpu.k][1] in ("S", "E", "M"):
                            expected[t.cpu.k] = (t.line, expected[t.cpu.k][1], t.data)
                if ctx.get(dut.commit) or ctx.get(dut.commit_bi):
                    k = int(ctx.get(dut.commit_cache))
                    bi = bool(ctx.get(dut.commit_bi))
                    try:
                        op = shadow_commit(dev, k, cyc, back_invalidation=bi)
                    except ShadowDisagrees as e:
                        mismatch(str(e), cyc)
                    if bi:
                        out["back_invalidations"] += 1
                        out["log"].append((cyc, "bi", k))
                    else:
                        out["commits"] += 1
                        out["commit_cycles"].setdefault(k, []).append(cyc)
                        out["event_cycles"].append(cyc)
                        if dev.ops[k] is None:          # finished inside the device
                            expect(k, op.line, cyc)
                shadow.lane(ctx, dut, cyc)
                shadow.probe_added(ctx, dut, cyc)
                kind = ResponseCommit(ctx.get(dut.rsp_commit))
                if kind is not ResponseCommit.NONE:
                    msg = taken.popleft()
                    if kind is ResponseCommit.DROP:
                        mismatch(f"a legal message dropped: {msg!r}", cyc)
                    (dev.on_h2d_data if msg.chan is Channel.H2D_DATA else dev.on_h2d_rsp)(msg, cyc)
                    out["rsp_events"] += 1
                    out["event_cycles"].append(cyc)
                if ctx.get(dut.d2h_req.valid) and ctx.get(dut.d2h_req.ready):
                    r = ctx.get(dut.d2h_req.p)
                    cqid, opcode, line = int(r.cqid), D2HReqOpcode(r.opcode), int(r.addr)
                    t = dev.txns.get(cqid)
                    if t is None or (t.op, t.line) != (opcode, line):
                        mismatch(f"D2H Req {opcode.name} CQID {cqid} line {line:#x}; the model's request "
                                 f"there: {t!r}", cyc)
                    out["requests"] += 1
                    out["log"].append((cyc, "d2h_req", cqid))
                    spend_credit("d2h_req", cyc)
                    out["arbitrations"] += sum(1 for q in arbiter.queues if q) > 1
                    first = arbiter.pop() if len(arbiter) else None
                    if first is None or first.cqid != cqid:
                        mismatch(f"D2H Req CQID {cqid} sent; the arbiter's order gives "
                                 f"{None if first is None else first.cqid} (its queues {arbiter.key()})", cyc)
                    plan = host_plan(t) if host_plan is not None else None
                    if plan is None:
                        when, plan = cyc + 1 + rng.randint(0, host_delay), []
                        for e in host_events(rng, t.state):
                            plan.append((when - cyc, e))
                            when += rng.randint(0, 2)
                    for delay, e in plan:
                        msg = host_message(t, e, rng, uqid)
                        chan = "data" if msg.chan is Channel.H2D_DATA else "rsp"
                        chans[chan].append((cyc + delay, msg))
                push = eng.req_path.d2h_push
                if ctx.get(push.valid):
                    t = dev.txns.get(int(ctx.get(push.p.cqid)))
                    if t is None:
                        mismatch(f"a D2H Req queued for CQID {int(ctx.get(push.p.cqid))}, not the model's", cyc)
                    arbiter.push(t)
                in_use.append(self.cfg.max_outstanding - len(dev.free_cqids))
                answers.sample(ctx, dut.cmd, dut.cmd_rsp, cyc)
                if ctx.get(dut.d2h_data.valid) and ctx.get(dut.d2h_data.ready):
                    compare_data(ctx.get(dut.d2h_data.p), cyc)
                    spend_credit("d2h_data", cyc)
                if ctx.get(dut.d2h_rsp.valid) and ctx.get(dut.d2h_rsp.ready):
                    r = ctx.get(dut.d2h_rsp.p)
                    model_rsp = sent.rsp          # (the model device sends no D2H Req here: no transmit)
                    i = len(rtl_rsp)
                    got = (D2HRspOpcode(r.opcode), int(r.uqid))
                    rtl_rsp.append(got)
                    if i >= len(model_rsp) or got != (model_rsp[i].op, model_rsp[i].uid):
                        mismatch(f"D2H Rsp #{i}: RTL {got}, model "
                                 f"{(model_rsp[i].op, model_rsp[i].uid) if i < len(model_rsp) else None}", cyc)
                    spend_credit("d2h_rsp", cyc)
                    msg = snoop_by_uqid.pop(got[1])
                    del snoop_out[msg.line]
                    out["rsp_cycles"].append(cyc)
                if ctx.get(dut.cpu_rsp.valid) and ctx.get(dut.cpu_rsp.ready):
                    r = ctx.get(dut.cpu_rsp.p)
                    k, line, state = int(r.cache), int(r.line), CacheState(r.state).name
                    if k not in expected:
                        mismatch(f"cpu_rsp to cache {k} (line {line:#x}, {state}) with nothing owed", cyc)
                    e_line, e_state, e_data = expected.pop(k)
                    if (line, state) != (e_line, e_state) or (e_data is not None and int(r.data) != e_data):
                        mismatch(f"cpu_rsp to cache {k}: RTL {(line, state, int(r.data))}, model "
                                 f"{(e_line, e_state, e_data)}", cyc)
                    bfm.install(k, line, state, int(r.data))
                    out["log"].append((cyc, "cpu_rsp", k))
                await ctx.tick()
                if started >= accesses and not to_send and not any(held_hit) and not chans["rsp"] and \
                        not chans["data"] and \
                        not taken and not answers and not expected and ctx.get(dut.idle) and \
                        all(b is None for b in bfm.busy) and not snoop_out and \
                        not any(data_owed.values()) and data_seen == len(sent.data):
                    out["cycles"] = cyc + 1
                    break
            else:
                raise Mismatch(f"seed {self.seed}: not finished in {max_cycles} cycles: {len(to_send)} accesses "
                               f"not taken, waiting in the model {dev.queue}, requests {sorted(dev.txns)}, "
                               f"caches waiting {[b for b in bfm.busy if b is not None]}, snoops unanswered "
                               f"{sorted(hex(l) for l in snoop_out)}; the engine's snoop window "
                               f"{'held' if ctx.get(eng.snoop.window.held) else 'issuing'}, its work entries "
                               f"{[WorkState(ctx.get(s)).name for s in eng.snoop.work_block.states]}")
            cyc = out["cycles"]
            if dev.queue or dev.txns or any(op is not None for op in dev.ops):
                mismatch(f"the model still has work: waiting {dev.queue}, requests {sorted(dev.txns)}", cyc)
            if dev.work:
                mismatch(f"the model still has work on {sorted(dev.work)}", cyc)
            if len(sent.rsp) != len(rtl_rsp):
                mismatch(f"D2H Rsp: RTL {len(rtl_rsp)}, model more", cyc)
            compare_end_state(ctx, dut, bfm, dev, lambda what: mismatch(what, cyc))
            if len(arbiter):
                mismatch(f"D2H Req queued and never sent: {arbiter.key()}", cyc)
            out["errors"] = ctx.get(eng.protocol_errors) + ctx.get(eng.snoop_errors)

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
        return out
