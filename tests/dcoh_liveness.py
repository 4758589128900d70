"""Liveness run of the RTL DCOH on its own ports: a random host and random internal caches, no golden model.

Where the DCOH's finite structures (work table, coalescer groups) are smaller than what the traffic needs,
the RTL holds a snoop or retries an access that the unbounded golden model would take at once, so the
message-for-message co-simulation (tests/dcoh_cosim.py) cannot be used.  This run checks what must hold
whatever the sizes:

* every snoop the DCOH takes from ``h2d_req`` gets exactly one D2H response (its UQID, once), within
  ``snoop_bound`` cycles of being taken (:func:`snoop_bound` says why that bound);
* every internal-cache access finishes (``cpu_rsp``) and every D2H request gets its host answer;
* no protocol error is counted (the host below follows the rules);
* after the traffic stops, everything drains and the DCOH goes idle.

The host answers every D2H request by ``cxl.coherence.HOST_TABLE`` (GO and data in random order and
after a random delay) and sends snoops of its own to random lines, keeping the rules a CXL host keeps:
one snoop pending per line until its response and data are in (CXL 3.0 §3.2.5.5, docs/sources.md §1.1),
no GO to a line while a snoop to it is pending (§3.2.5.2), and no snoop to a line while an H2D Rsp to it
is still waiting to be taken (a snoop may not pass a GO, docs/sources.md §1.1).  The internal caches
are ``tb.cache_bfm.CacheBFM``; a cache hit is taken only while the DCOH is idle (as in
tb/system_tb.py).  The caches take probe messages either freely (after a random delay) or by the rule
of tb/system_tb.py (``probe_rule="one_at_a_time"``: after taking one, the next only once the engine has
dispatched the work and the rescan after it; the serializing DCOH only).

The DUT is either DCOH: ``make_dut(pipelined=True)`` gives the pipelined one (hdl/dcoh/pipe/dcoh_top.py),
whose commit ports stand in for ``dispatch`` in the coverage (``stats["commits"]``) and whose ``freed``
port returns a CQID to the host.

``python tests/dcoh_liveness.py --seeds 20 --work 1 --groups 1 [--pipelined]`` runs seeds from the command
line; a failure prints its seed.
"""

import random
from collections import deque

from hdl.dcoh.dcoh import DCOH, CacheState, CmdOp, CpuKind, Dispatch
from hdl.dcoh.pipe.dcoh_top import PipelinedDCOH
from hdl.dcoh.pipe.response_path import ResponseCommit
from hdl.dcoh.pipe.snoop_pipe import CommitC
from cxl.coherence import HOST_TABLE
from cxl.messages import D2HReqOpcode as Req, D2HRspOpcode as Rsp, GOState, H2DReqOpcode as Snp, \
    H2DRspOpcode as HRsp
from models.dcoh import CpuOp, cache_hit
from tb.cache_bfm import CacheBFM

__all__ = ["LivenessFailure", "run_liveness", "snoop_bound", "KINDS"]

KINDS = ("load", "load", "store", "store", "evict", "rdcurr", "itomwr", "wrinv", "clflush")
_WITH_DATA = {Rsp.RspSFwdM, Rsp.RspIFwdM, Rsp.RspVFwdV}     # snoop responses followed by D2H Data
_PULL_UQID = 2048                                            # write-pull UQIDs: 2048 + CQID (snoops below)
_SNOOP_UQIDS = 2048


class LivenessFailure(AssertionError):
    pass


def snoop_bound(dut, host_delay, probe_delay, cmd_delay):
    """Cycles within which a taken snoop must be answered.

    A snoop waits only for work the DCOH already has: the held snoop ahead of it, the accesses and
    requests in the tracker (at most ``tracker``), the lines in the work table (at most ``work``), each
    internal cache's one access (``caches``), and its own probe.  Each of these is one engine event or a
    short run of them, and each waits at most for a host answer (``2 * host_delay`` cycles: the host
    sends its first message within ``host_delay`` of the request and its second within ``host_delay``
    after that), a coalescer window plus the caches' delay in taking the message
    (``coalesce_window + probe_delay + 2``), and a few commands to the caches (each answered within
    ``cmd_delay``).  The engine's longest event is about 20 FSM cycles plus those waits, and a rescan
    walks at most ``caches`` accesses (twice when it made progress).  So, with a factor of 2 for the
    rescans between events, the bound is
    ``2 * (tracker + work + caches + 2) * (2 * host_delay + coalesce_window + probe_delay + 4 * cmd_delay + 40)``.
    It is a bound for a working engine, loose by design: a lost or starved snoop exceeds any bound."""
    per_event = 2 * host_delay + dut.coalesce_window + probe_delay + 4 * cmd_delay + 40
    return 2 * (dut.tracker + dut.work + dut.caches + 2) * per_event


def make_dut(*, caches=2, sf_sets=2, sf_ways=2, tracker=4, work=8, window=4, block=2, groups=4, pipelined=False):
    """``window``: the coalescing window; ``pipelined``: the pipelined DCOH."""
    return (PipelinedDCOH if pipelined else DCOH)(
        caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, tracker=tracker, work=work, coalesce_window=window,
        coalesce_block=block, coalesce_groups=groups, credits=64)


def _commits(ctx, dut):
    """The pipelined DCOH's commits of this cycle, by kind (the coverage of its liveness runs)."""
    kinds = []
    c = ctx.get(dut.commit_c)
    if c != CommitC.NONE:
        kinds.append(f"snoop_c_{c.name.lower()}")
    if ctx.get(dut.commit_lane):
        kinds.append("snoop_lane_probed" if ctx.get(dut.commit_lane_probed) else "snoop_lane")
    if ctx.get(dut.commit_probe):
        kinds.append("probe_evict" if ctx.get(dut.commit_probe_evict) else "snoop_probe")
    if ctx.get(dut.commit):
        kinds.append("access")
    if ctx.get(dut.commit_bi):
        kinds.append("back_invalidation")
    r = ctx.get(dut.rsp_commit)
    if r != ResponseCommit.NONE:
        kinds.append(f"response_{r.name.lower()}")
    if ctx.get(dut.freed_valid):
        kinds.append("completion")
    return kinds


async def run_liveness(ctx, dut, seed, *, cycles=3000, lines=6, host_delay=12, probe_delay=3, cmd_delay=0,
                       snoop_rate=0.08, cpu_rate=0.2, probe_rule="free", drain=20000, stats=None, script=None,
                       rdany_grant=None):
    """Drive ``cycles`` cycles of random traffic, then drain; raise :class:`LivenessFailure` naming the seed
    and the cycle on the first violation.  ``stats`` (a dict) gets the snoop count and latencies, and the
    same for the *quiet* snoops, those during whose wait no H2D Rsp or Data was delivered (the snoops the
    answer bound of formal/dcoh_one_response_harness.py is about).

    ``script`` (directed runs, usually with both rates 0): {cycle: [action, ...]}, an action being
    ("cpu", cache, kind, line, variant), ("snoop", opcode, line) or ("hold_probes", cycles: the caches take
    no probe message for that long, which they may always do).  ``rdany_grant`` ("S" or "E") fixes the
    host's grant for RdAny (else random)."""
    rng = random.Random(seed)
    pipelined = isinstance(dut, PipelinedDCOH)
    if pipelined and probe_rule != "free":
        raise ValueError(f"probe_rule={probe_rule!r}: the pipelined DCOH has no dispatch to pace probes by")
    bound = snoop_bound(dut, host_delay, probe_delay, cmd_delay)
    K = dut.caches
    bfm = CacheBFM(K)
    now = 0

    def fail(what):
        raise LivenessFailure(f"seed {seed} cycle {now}: {what}")

    for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp):
        ctx.set(s.ready, 1)

    # host state
    h2d = {"req": deque(), "rsp": deque(), "data": deque()}      # (release cycle, payload, line)
    sched = []                                                  # (cycle, channel, payload, line)
    reqs = {}                                                   # CQID -> (opcode, line, cycle)
    snoops = {}                                                 # UQID -> (line, cycle taken or None)
    snoop_line = {}                                             # line -> UQID of its pending snoop
    snoop_data = {}                                             # UQID -> line: response in, data still due
    latencies = []
    quiet = set()                                               # UQIDs with no H2D Rsp/Data delivered since taken
    quiet_latencies = []
    seen = {}                                                   # dispatch (or commit) kind -> count (coverage)
    next_uqid = [0]
    value = [1000]
    cpu_offer = deque()                                         # misses waiting for the cpu_req port
    cpu_cur = [None]
    cmd_rsp = [None, 0]                                         # (dirty, excl, data), cycles to wait
    probe = {"phase": None, "wait": 0}
    returns = {"req": 0, "rsp": 0, "data": 0}

    def rsp_pending_for(line):
        return any(l == line for _, _, l in h2d["rsp"]) or any(c == "rsp" and l == line for _, c, _, l in sched)

    def answer(opcode, cqid, line):
        """Schedule the host's answer to a D2H request (HOST_TABLE)."""
        t = now + 1 + rng.randrange(host_delay)
        go = lambda state: {"opcode": HRsp.GO, "rsp_data": state.value, "cqid": cqid}
        pull = lambda op: {"opcode": op, "rsp_data": _PULL_UQID + cqid, "cqid": cqid}
        data = {"hdr.cqid": cqid, "data": rng.getrandbits(64)}
        assert opcode in HOST_TABLE, opcode
        if opcode in (Req.RdShared, Req.RdAny, Req.RdOwn):
            grant = GOState.Shared if opcode is Req.RdShared else GOState.Exclusive
            if opcode is Req.RdAny and (rdany_grant == "S" or rdany_grant is None and rng.random() < 0.5):
                grant = GOState.Shared
            order = [("rsp", go(grant)), ("data", data)]
            rng.shuffle(order)
            for i, (c, p) in enumerate(order):
                sched.append((t + i * rng.randrange(host_delay), c, p, line))
        elif opcode is Req.RdOwnNoData:
            sched.append((t, "rsp", go(GOState.Exclusive), line))
        elif opcode is Req.RdCurr:
            sched.append((t, "data", data, line))
        elif opcode in (Req.ItoMWr, Req.DirtyEvict):
            sched.append((t, "rsp", pull(HRsp.GO_WritePull), line))
        elif opcode is Req.CleanEvict:
            sched.append((t, "rsp", pull(rng.choice([HRsp.GO_WritePull, HRsp.GO_WritePull_Drop])), line))
        elif opcode is Req.WrInv:
            sched.append((t, "rsp", pull(HRsp.WritePull), line))
            sched.append((t + 1 + rng.randrange(host_delay), "rsp", go(GOState.Invalid), line))
        else:                                                   # CLFlush, CleanEvictNoData
            sched.append((t, "rsp", go(GOState.Invalid), line))

    def offer(chan, stream_):
        q = h2d[chan]
        if q:
            _, payload, _ = q[0]
            ctx.set(stream_.valid, 1)
            msg = stream_.p.hdr if hasattr(stream_.p, "hdr") else stream_.p
            ctx.set(msg.valid, 1)
            for name, v in payload.items():
                target = stream_.p
                for part in name.split("."):
                    target = getattr(target, part)
                ctx.set(target, v)
        else:
            ctx.set(stream_.valid, 0)

    ports = (("req", dut.h2d_req), ("rsp", dut.h2d_rsp), ("data", dut.h2d_data))
    total = cycles + drain
    traffic = True
    while now < total:
        if now == cycles:
            traffic = False
        # ---- the host releases what is due (a GO waits while a snoop to its line is pending)
        keep = []
        for item in sched:
            t, chan, payload, line = item
            if t <= now and not (chan == "rsp" and line in snoop_line):
                h2d[chan].append((t, payload, line))
            else:
                keep.append(item)
        sched[:] = keep
        # ---- the host's own snoops
        def snoop(opcode, line):
            if line in snoop_line or rsp_pending_for(line):
                return False
            uqid = next_uqid[0]
            next_uqid[0] = (uqid + 1) % _SNOOP_UQIDS
            if uqid in snoops:
                return False
            snoops[uqid] = (line, None)
            snoop_line[line] = uqid
            h2d["req"].append((now, {"opcode": opcode, "addr": line, "uqid": uqid}, line))
            return True
        if traffic and rng.random() < snoop_rate and len(snoops) < _SNOOP_UQIDS // 2:
            snoop(rng.choice(list(Snp)), rng.randrange(lines))
        for action in (script or {}).get(now, ()):
            if action[0] == "snoop":
                if not snoop(*action[1:]):
                    fail(f"scripted {action}: the host rules do not allow it now")
            elif action[0] == "cpu":
                _, k, kind, line, variant = action
                value[0] += 1
                op = CpuOp(kind, k, line, value[0], variant)
                if not bfm.access(op):
                    cpu_offer.append(op)
            else:
                probe["wait"] = action[1]
        for chan, s in ports:
            offer(chan, s)
        # ---- internal caches: new accesses (a hit only while the DCOH is idle)
        idle = ctx.get(dut.idle) and cmd_rsp[0] is None
        if traffic:
            for k in range(K):
                if bfm.busy[k] is None and rng.random() < cpu_rate and not any(o.k == k for o in cpu_offer):
                    value[0] += 1
                    op = CpuOp(rng.choice(KINDS), k, rng.randrange(lines), value[0], rng.randrange(2))
                    if cache_hit(bfm.caches[k], op) and not idle:
                        continue
                    if not bfm.access(op):
                        cpu_offer.append(op)
        if cpu_cur[0] is None and cpu_offer:
            cpu_cur[0] = cpu_offer.popleft()
        if cpu_cur[0] is not None:
            op = cpu_cur[0]
            ctx.set(dut.cpu_req.valid, 1)
            for name, v in (("kind", CpuKind[op.kind.upper()]), ("cache", op.k), ("line", op.line),
                            ("variant", op.variant), ("data", op.value)):
                ctx.set(getattr(dut.cpu_req.p, name), v)
        else:
            ctx.set(dut.cpu_req.valid, 0)
        # ---- cache answers to commands (after cmd_delay cycles), probes; a command is taken while no
        # answer is owed (as tb/rtl_caches.py: the pipelined DCOH may offer the next one meanwhile)
        ctx.set(dut.cmd.ready, cmd_rsp[0] is None)
        if cmd_rsp[0] is not None and cmd_rsp[1] <= 0:
            ctx.set(dut.cmd_rsp.valid, 1)
            d, e, v = cmd_rsp[0]
            ctx.set(dut.cmd_rsp.p.dirty, d)
            ctx.set(dut.cmd_rsp.p.excl, e)
            ctx.set(dut.cmd_rsp.p.data, v)
        else:
            ctx.set(dut.cmd_rsp.valid, 0)
        probe_ready = probe["phase"] is None and probe["wait"] <= 0
        ctx.set(dut.probe.ready, probe_ready)
        # credits: one returned a cycle after each message left
        ctx.set(dut.crd_req, returns["req"])
        ctx.set(dut.crd_rsp, returns["rsp"])
        ctx.set(dut.crd_data, returns["data"])
        returns = {"req": 0, "rsp": 0, "data": 0}

        # ---- sample the handshakes of this cycle
        for chan, s in ports:
            if ctx.get(s.valid) and ctx.get(s.ready):
                _, payload, line = h2d[chan].popleft()
                if chan == "req":
                    snoops[payload["uqid"]] = (line, now)
                    quiet.add(payload["uqid"])
                else:
                    quiet.clear()                               # every waiting snoop saw a host message
        if ctx.get(dut.d2h_req.valid):
            p = ctx.get(dut.d2h_req.p)
            cqid, op, line = int(p.cqid), Req(p.opcode), int(p.addr)
            if cqid in reqs:
                fail(f"D2H {op.name} on CQID {cqid}, which {reqs[cqid][0].name} still uses")
            reqs[cqid] = (op, line, now)
            answer(op, cqid, line)
            returns["req"] = 1
        if ctx.get(dut.d2h_rsp.valid):
            p = ctx.get(dut.d2h_rsp.p)
            uqid, op = int(p.uqid), Rsp(p.opcode)
            if uqid not in snoops or snoops[uqid][1] is None:
                fail(f"{op.name} for UQID {uqid}: no snoop with it is waiting (answered twice or never sent)")
            line, t0 = snoops.pop(uqid)
            latencies.append(now - t0)
            if uqid in quiet:
                quiet.discard(uqid)
                quiet_latencies.append(now - t0)
            if now - t0 > bound:
                fail(f"snoop UQID {uqid} to line {line:#x} answered after {now - t0} cycles (bound {bound})")
            if op in _WITH_DATA:
                snoop_data[uqid] = line
            else:
                del snoop_line[line]
            returns["rsp"] = 1
        if ctx.get(dut.d2h_data.valid):
            uqid = int(ctx.get(dut.d2h_data.p.hdr.uqid))
            if uqid in snoop_data:
                del snoop_line[snoop_data.pop(uqid)]
            elif uqid >= _PULL_UQID and uqid - _PULL_UQID in reqs:
                pass
            else:
                fail(f"D2H Data for UQID {uqid}, which nobody asked for")
            returns["data"] = 1
        if cpu_cur[0] is not None and ctx.get(dut.cpu_req.ready):
            cpu_cur[0] = None
        new_cmd = None
        if ctx.get(dut.cmd.valid) and ctx.get(dut.cmd.ready):
            c = ctx.get(dut.cmd.p)
            new_cmd = bfm.command(int(c.line), int(c.caches), CmdOp(c.op).name)
        cmd_taken = ctx.get(dut.cmd_rsp.valid) and ctx.get(dut.cmd_rsp.ready)
        if ctx.get(dut.cpu_rsp.valid):
            c = ctx.get(dut.cpu_rsp.p)
            try:
                bfm.install(int(c.cache), int(c.line), CacheState(c.state).name, int(c.data))
            except RuntimeError as e:
                fail(str(e))
        if ctx.get(dut.probe.valid) and probe_ready:
            probe["phase"] = "acked" if probe_rule == "one_at_a_time" else None
            probe["wait"] = rng.randrange(probe_delay + 1)
        freed = None
        if pipelined:
            for kind in _commits(ctx, dut):
                seen[kind] = seen.get(kind, 0) + 1
            if ctx.get(dut.freed_valid):
                freed = ctx.get(dut.freed_cqid)
        else:
            code = ctx.get(dut.dispatch)
            # the SCAN that ended a run of work (``scan_before``) comes before this cycle's ``code``
            for step in ([Dispatch.SCAN] if ctx.get(dut.scan_before) else []) + [code]:
                seen[step.name] = seen.get(step.name, 0) + 1
                if step == Dispatch.WORK and probe["phase"] == "acked":
                    probe["phase"] = "working"
                elif step == Dispatch.SCAN and probe["phase"] == "working":
                    probe["phase"] = None
        if ctx.get(dut.protocol_errors):
            fail(f"the DCOH counted a protocol error ({ctx.get(dut.last_error)})")

        await ctx.tick()
        now += 1
        probe["wait"] -= 1
        if cmd_taken:
            cmd_rsp[0] = None
        if new_cmd is not None:
            cmd_rsp[0], cmd_rsp[1] = new_cmd, rng.randrange(cmd_delay + 1)
        elif cmd_rsp[0] is not None:
            cmd_rsp[1] -= 1
        if pipelined:               # the CQID is the host's again once the DCOH frees it
            reqs.pop(freed, None)
        else:
            retire_cqids(ctx, dut, reqs)
        for uqid, (line, t0) in snoops.items():
            if t0 is not None and now - t0 > bound:
                fail(f"snoop UQID {uqid} to line {line:#x}, taken at cycle {t0}, unanswered after {bound} "
                     f"cycles (the bound)")

        if not traffic and not snoops and not any(bfm.busy) and not cpu_offer and cpu_cur[0] is None \
                and not sched and not any(h2d.values()) and not reqs and cmd_rsp[0] is None \
                and ctx.get(dut.idle) and not ctx.get(dut.probe.valid):
            break
    else:
        waiting = {u: l for u, (l, t) in snoops.items()}
        fail(f"did not drain in {drain} cycles: snoops {waiting} unanswered, caches waiting {bfm.busy}, "
             f"requests {reqs}")
    if stats is not None:
        stats.update(snoops=len(latencies), max_latency=max(latencies, default=0), bound=bound, cycles=now,
                     quiet_snoops=len(quiet_latencies), max_quiet_latency=max(quiet_latencies, default=0),
                     **{"commits" if pipelined else "dispatch": {c: n for c, n in seen.items() if c != "NONE"}})
    return latencies


def retire_cqids(ctx, dut, reqs):
    """A CQID is the host's again once the DCOH's tracker entry is free (the request completed)."""
    trk = ctx.get(dut.trk)
    for cqid in [c for c in reqs if c < dut.tracker and not trk[c].valid]:
        del reqs[cqid]


def main(argv=None):
    import argparse
    import sys
    import time
    from amaranth.sim import Simulator
    ap = argparse.ArgumentParser(description="Liveness runs of the RTL DCOH (random host and caches).")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--cycles", type=int, default=3000)
    for name, default in (("caches", 2), ("sf-sets", 2), ("sf-ways", 2), ("tracker", 4), ("work", 8),
                          ("window", 4), ("block", 2), ("groups", 4), ("lines", 6)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--probe-rule", choices=("free", "one_at_a_time"), default="free")
    ap.add_argument("--pipelined", action="store_true", help="the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py)")
    args = ap.parse_args(argv)
    failures = 0
    for seed in range(args.first, args.first + args.seeds):
        dut = make_dut(caches=args.caches, sf_sets=args.sf_sets, sf_ways=args.sf_ways, tracker=args.tracker,
                       work=args.work, window=args.window, block=args.block, groups=args.groups,
                       pipelined=args.pipelined)
        stats = {}

        async def bench(ctx):
            await run_liveness(ctx, dut, seed, cycles=args.cycles, lines=args.lines,
                               probe_rule=args.probe_rule, stats=stats)
        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        t0 = time.monotonic()
        try:
            sim.run()
            print(f"seed {seed}: ok, {stats['snoops']} snoops, max latency {stats['max_latency']} "
                  f"(bound {stats['bound']}), {stats.get('dispatch', stats.get('commits'))}, "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
        except LivenessFailure as e:
            failures += 1
            print(f"seed {seed}: FAIL {e}", flush=True)
    print(f"{failures} failure(s) in {args.seeds} seeds")
    return 1 if failures else 0


if __name__ == "__main__":
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
