"""DCOH RTL figures, measured in amaranth.sim (cycles, not wall time):

* ``snoop_miss_per_cycle``: snoops answered per cycle on the snoop-filter-miss path, streaming 256
  snoops to lines the device does not hold (target 1);
* ``snoop_miss_latency``: cycles from a snoop's handshake on ``h2d_req`` to its RspIHitI being valid on
  ``d2h_rsp`` (target <= 2);
* ``snoop_hit_per_cycle``: snoops answered per cycle when they hit the snoop filter and need no probe
  of the internal caches (SnpData to lines held in S: RspSHitSE; target >= 0.99), and
  ``snoop_hit_latency``, the largest snoop handshake -> response valid in the window;
* ``snoop_hit_probe_per_cycle`` / ``snoop_hit_probe_latency``: the same for snoops that probe the
  internal caches (SnpInv to lines held in S: probe, invalidate, RspIHitSE), the caches taking each
  probe and command at once and answering a command in the next cycle (target >= 0.99);
* ``request_events_per_cycle``: CPU accesses, H2D Rsps (GO) and H2D Data taken per cycle, each of 8
  caches loading (RdShared, GO-S + Data) and evicting (CleanEvictNoData, GO-I) lines of its own, the
  host answering in the next cycle (target >= 0.5); ``request_cpu_to_d2h_req_latency`` (CPU access
  taken -> its D2H Req) and ``request_host_to_cpu_rsp_latency`` (the host's last message of a
  transaction taken -> ``cpu_rsp``), the largest in the window.  These four streams run on lines no
  other access or snoop touches, after a warm-up, and count events over the middle half of the run
  (``_StreamHarness``);
* ``snoop_hit_inv_latency``: the same for a SnpInv to a line held in S by an internal cache, with the
  coalescing window set to 0, *excluding* the internal cache's time (cycles from ``cmd`` valid to
  ``cmd_rsp`` valid, which the cache decides);
* ``coalesce_window``: what the window adds to the hit path (measured: hit latency at window w minus at 0);
* ``tx_miss``: cycles from a load miss's ``cpu_req`` handshake to its RdShared valid on ``d2h_req``;
* ``rx_fill``: cycles from the H2D Data handshake (GO already seen) to the fill on ``cpu_rsp``;
* ``link_one_way``: cycles a message takes through an idle 68B-flit link (the RTL loopback: packer,
  CRC, wire, retry check, unpacker), the slower of the two directions;
* ``snoop_pipe``: the same snoop streams (128 snoops each) through the pipelined DCOH's snoop path
  (hdl/dcoh/pipe/snoop_pipe.py, not yet the DCOH's: it takes snoops only, with no request in flight),
  checked against the golden device as they run (tb/snoop_pipe.py): ``*_per_cycle`` and ``*_latency``
  as above (snoop taken -> response valid, the first snoop of the stream, nothing ahead of it), and
  ``probe_per_cycle_by_work``: probed snoops per cycle with 8, 16, 24 and 32 work entries (the entries
  a probe's round trip needs: the coalescing window, the probe, the command and its answer).
* ``requests_pipe``: the request row's stream (8 caches, each loading lines of its own and evicting them,
  the host answering at once, no snoops) through the pipelined DCOH's engine (hdl/dcoh/pipe/engine.py,
  not yet the DCOH's: no back-invalidations), checked against the golden device as it runs
  (tb/engine.py): ``request_events_per_cycle`` as above; the latencies of one load miss alone, from its
  ``cpu_req`` taken to its D2H Req offered and from the host's last message taken to its ``cpu_rsp``.
* ``engine_mixed``: that request stream and host snoops to lines the device lacks (SnpData, offered from
  the first cycle) through the engine at once, checked against the golden device as it runs: the
  request events, the snoops answered and the two together per cycle, over the cycles in which both
  streams run (the middle of each).

    python -m bench.dcoh_bench [--out FILE]
    python -m bench.dcoh_bench --rescan-tries    # the rescans' tries with and without the wake-up rule per access

``models/cxl_timing.py`` reads the committed copy of these figures (``bench/dcoh_cycles.json``), so the
CXL-vs-RDMA report uses the RTL's cycle counts; ``make bench`` rewrites it.
"""

import argparse
import json
import sys
from pathlib import Path

from amaranth.sim import Simulator

from hdl.dcoh.dcoh import DCOH, CacheState, CmdOp, CpuKind
from cxl.messages import D2HReqOpcode, D2HRspOpcode, H2DReqOpcode, H2DRspOpcode, GOState

RESULTS = Path(__file__).with_name("dcoh_cycles.json")


def _run(dut, body):
    out = {}
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def bench(ctx):
        out.update(await body(ctx))
    sim.add_testbench(bench)
    sim.run()
    return out


def _dut(window=0):
    return DCOH(caches=2, sf_sets=64, sf_ways=4, tracker=16, coalesce_window=window, credits=64)


async def _wait(ctx, sig, limit=1000):
    for n in range(limit):
        if ctx.get(sig):
            return n
        await ctx.tick()
    raise RuntimeError(f"{sig.name} never rose in {limit} cycles")


async def _put(ctx, stream, fields, limit=1000):
    """Drive one handshake; return the number of cycles until it was taken (0: at once)."""
    ctx.set(stream.valid, 1)
    for name, v in fields.items():
        target = stream.p
        for part in name.split("."):
            target = getattr(target, part)
        ctx.set(target, v)
    for n in range(limit):
        if ctx.get(stream.ready):
            await ctx.tick()
            ctx.set(stream.valid, 0)
            return n
        await ctx.tick()
    raise RuntimeError("stream never ready")


def snoop_miss(n=256):
    dut = _dut()

    async def body(ctx):
        ctx.set(dut.d2h_rsp.ready, 1)
        cycle, taken, answered, i = 0, [], [], 0
        while len(answered) < n:
            if i < n:
                ctx.set(dut.h2d_req.valid, 1)
                ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
                ctx.set(dut.h2d_req.p.addr, 0x1000 + i)
                ctx.set(dut.h2d_req.p.uqid, i % 4096)
            else:
                ctx.set(dut.h2d_req.valid, 0)
            ctx.set(dut.crd_rsp, 1 if answered and answered[-1] == cycle - 1 else 0)
            if ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready):
                taken.append(cycle)
                i += 1
            if ctx.get(dut.d2h_rsp.valid):
                assert D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode)) is D2HRspOpcode.RspIHitI
                answered.append(cycle)
            await ctx.tick()
            cycle += 1
            if cycle > 20 * n:
                raise RuntimeError("snoop stream stalled")
        return {"per_cycle": n / (answered[-1] - answered[0] + 1),
                "latency": max(a - t for t, a in zip(taken, answered))}
    return _run(dut, body)


async def _fill_shared(ctx, dut, line, cache=0):
    """Load miss -> RdShared -> GO-S + Data -> fill.  Returns (tx cycles, rx cycles)."""
    for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.probe, dut.cmd):
        ctx.set(s.ready, 1)
    await _put(ctx, dut.cpu_req, {"kind": CpuKind.LOAD, "cache": cache, "line": line})
    tx = await _wait(ctx, dut.d2h_req.valid) + 1        # counted from the handshake edge
    cqid = ctx.get(dut.d2h_req.p.cqid)
    await ctx.tick()
    await _put(ctx, dut.h2d_rsp, {"opcode": H2DRspOpcode.GO, "rsp_data": GOState.Shared.value, "cqid": cqid})
    await _wait(ctx, dut.idle)
    await _put(ctx, dut.h2d_data, {"hdr.cqid": cqid, "data": 0xABCD})
    rx = await _wait(ctx, dut.cpu_rsp.valid) + 1
    await ctx.tick()
    await _wait(ctx, dut.idle)
    return tx, rx


def snoop_hit(window):
    dut = _dut(window)

    async def body(ctx):
        tx, rx = await _fill_shared(ctx, dut, 0x40)
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
        ctx.set(dut.h2d_req.p.addr, 0x40)
        ctx.set(dut.h2d_req.p.uqid, 7)
        await _wait(ctx, dut.h2d_req.ready)
        await ctx.tick()
        ctx.set(dut.h2d_req.valid, 0)
        cycles, cache_time, cmd_at = 1, 0, None
        while True:
            if ctx.get(dut.cmd.valid) and cmd_at is None:
                cmd_at = cycles
                ctx.set(dut.cmd_rsp.valid, 1)          # the cache answers in the next cycle
                ctx.set(dut.cmd_rsp.p.dirty, 0)
            answered = ctx.get(dut.cmd_rsp.valid) and ctx.get(dut.cmd_rsp.ready)
            if answered:
                cache_time = cycles + 1 - cmd_at
            if ctx.get(dut.d2h_rsp.valid):         # (may be the cycle the cache answers in)
                break
            await ctx.tick()
            if answered:
                ctx.set(dut.cmd_rsp.valid, 0)
            cycles += 1
            if cycles > 1000:
                raise RuntimeError("hit snoop never answered")
        assert D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode)) is D2HRspOpcode.RspIHitSE
        return {"latency": cycles - cache_time, "cache_time": cache_time, "tx": tx, "rx": rx}
    return _run(dut, body)


def link_one_way():
    """Cycles a message takes through an idle link (hdl/link/loopback.py): handshake into one end ->
    valid out of the other end's channel port (packer, CRC, wire, retry check, unpacker), both ways."""
    from hdl.link.loopback import LinkLoopback
    dut = LinkLoopback()

    async def body(ctx):
        out = {}
        for name, src, dst, fields in (("up", dut.d2h_rsp, dut.host_d2h_rsp, {"opcode": D2HRspOpcode.RspIHitI}),
                                       ("down", dut.host_h2d_rsp, dut.h2d_rsp, {"opcode": H2DRspOpcode.GO})):
            ctx.set(dst.ready, 1)
            await ctx.tick().repeat(50)                     # an idle link
            ctx.set(src.p.valid, 1)
            await _put(ctx, src, fields)
            out[name] = await _wait(ctx, dst.valid) + 1      # counted from the handshake edge
            await ctx.tick()
        return out
    return _run(dut, body)


# ---------------------------------------------------------------------------------------------------
# Streams of non-conflicting lines: an ideal host and ideal internal caches around the bare DCOH, so
# that the figure is the DCOH's own rate.  The host answers each D2H request in the next cycle (GO and
# Data of a read offered together, GO first), keeps CXL's rule of one snoop per line at a time
# (docs/sources.md §1.1) and returns every D2H credit in the cycle after its message; the caches take
# every probe and command at once and answer a command in the next cycle (tb/cache_bfm.py keeps their
# MESI state, so the answers are the real ones).  Every response and completion is checked against
# what the state asks for: a wrong one stops the bench.

STREAM_CACHES = 8         # one access outstanding per internal cache: 8 keep the engine busy
HOST_DELAY = 1            # cycles from a D2H request's handshake to the host's answer being offered


class _StreamHarness:
    """Drives the DCOH's host and cache sides one cycle at a time and records every handshake.

    ``accesses``: per cache, a list of ("load" | "evict", line) done in order, each after the last
    finished.  ``snoops``: (opcode, line, expected D2H Rsp opcode), offered in order once every access
    has finished and the engine is idle.  Records: ``events`` (cycle, kind) of every CPU access, H2D Rsp
    and H2D Data taken; ``snoop_taken`` / ``snoop_answered`` (cycle of each snoop's handshake and of
    its response); ``cpu_latency`` (CPU access taken -> its D2H Req) and ``done_latency`` (the host's
    last message of a transaction taken -> ``cpu_rsp``), each as (cycle of the start, cycles)."""

    def __init__(self, dut, accesses, snoops=()):
        from tb.cache_bfm import CacheBFM
        self.dut = dut
        self.bfm = CacheBFM(dut.caches)
        self.accesses = [list(a) for a in accesses] + [[] for _ in range(dut.caches - len(accesses))]
        self.snoops = list(snoops)
        self.events, self.snoop_taken, self.snoop_answered = [], [], []
        self.cpu_latency, self.done_latency = [], []
        self.snoop_probes = self.snoop_cmds = 0     # probes and commands while snoops were under way
        self.cycle = 0

    async def run(self, ctx, limit=200_000):
        from models.dcoh import CpuOp
        dut, bfm = self.dut, self.bfm
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.probe, dut.cmd):
            ctx.set(s.ready, 1)
        rsp_q, data_q = [], []                 # (due cycle, fields) the host will offer, in order
        cqid_line = {}                         # outstanding D2H request: CQID -> line
        cpu_cur = None                         # the CPU access offered on cpu_req: (cache, op)
        cpu_at, last_host = {}, {}             # line -> cycle its access / its last host message was taken
        cmd_answer = None                      # (dirty, excl, data) offered on cmd_rsp
        credits = [0, 0, 0]                    # D2H credits to return this cycle (req, rsp, data)
        snoop_line, snoop_i = {}, 0            # uqid -> line of the snoops not yet answered
        pending = sum(len(a) for a in self.accesses)
        snooping = False
        while pending or snoop_i < len(self.snoops) or snoop_line:
            now = self.cycle
            if now > limit:
                raise RuntimeError(f"stream stalled: {pending} accesses, {len(self.snoops) - snoop_i} snoops "
                                   f"and {len(snoop_line)} responses outstanding after {limit} cycles")
            # ---- drive
            for port, n in zip((dut.crd_req, dut.crd_rsp, dut.crd_data), credits):
                ctx.set(port, n)
            if cpu_cur is None:
                for k, todo in enumerate(self.accesses):
                    if todo and bfm.busy[k] is None:
                        kind, line = todo.pop(0)
                        op = CpuOp(kind, k, line)
                        if bfm.access(op):
                            raise RuntimeError(f"{op!r} hit in its cache: the stream needs DCOH work")
                        cpu_cur = (k, op)
                        break
            ctx.set(dut.cpu_req.valid, cpu_cur is not None)
            if cpu_cur is not None:
                k, op = cpu_cur
                ctx.set(dut.cpu_req.p.kind, CpuKind[op.kind.upper()])
                ctx.set(dut.cpu_req.p.cache, k)
                ctx.set(dut.cpu_req.p.line, op.line)
            for port, q, fields in ((dut.h2d_rsp, rsp_q, ("opcode", "rsp_data", "cqid")),
                                    (dut.h2d_data, data_q, ("cqid", "data"))):
                due = bool(q) and q[0][0] <= now
                ctx.set(port.valid, due)
                if due:
                    for name, v in q[0][1].items():
                        ctx.set(port.p.hdr.cqid if name == "cqid" and port is dut.h2d_data else getattr(port.p, name), v)
            snp = None
            snooping = snooping or (not pending and ctx.get(dut.idle))     # the fill is over
            if snooping and snoop_i < len(self.snoops):
                snp = self.snoops[snoop_i]
                if snp[1] in snoop_line.values():
                    snp = None                 # the host's rule: one snoop per line at a time
            ctx.set(dut.h2d_req.valid, snp is not None)
            if snp is not None:
                ctx.set(dut.h2d_req.p.opcode, snp[0])
                ctx.set(dut.h2d_req.p.addr, snp[1])
                ctx.set(dut.h2d_req.p.uqid, snoop_i % 4096)
            ctx.set(dut.cmd_rsp.valid, cmd_answer is not None)
            if cmd_answer is not None:
                ctx.set(dut.cmd_rsp.p.dirty, cmd_answer[0])
                ctx.set(dut.cmd_rsp.p.excl, cmd_answer[1])
                ctx.set(dut.cmd_rsp.p.data, cmd_answer[2])
            # ---- observe this cycle's handshakes
            taken = lambda s: ctx.get(s.valid) and ctx.get(s.ready)        # noqa: E731
            credits = [int(taken(s)) for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data)]
            if cpu_cur is not None and taken(dut.cpu_req):
                self.events.append((now, "cpu"))
                cpu_at[cpu_cur[1].line] = now
                cpu_cur = None
            if taken(dut.h2d_rsp):
                self.events.append((now, "rsp"))
                last_host[cqid_line[rsp_q.pop(0)[1]["cqid"]]] = now
            if taken(dut.h2d_data):
                self.events.append((now, "data"))
                last_host[cqid_line[data_q.pop(0)[1]["cqid"]]] = now
            if taken(dut.d2h_req):
                op, cqid, line = (D2HReqOpcode(ctx.get(dut.d2h_req.p.opcode)), ctx.get(dut.d2h_req.p.cqid),
                                  ctx.get(dut.d2h_req.p.addr))
                self.cpu_latency.append((cpu_at[line], now - cpu_at[line]))
                cqid_line[cqid] = line
                due = now + HOST_DELAY
                if op in (D2HReqOpcode.RdShared, D2HReqOpcode.RdOwn):
                    go = GOState.Shared if op is D2HReqOpcode.RdShared else GOState.Exclusive
                    rsp_q.append((due, {"opcode": H2DRspOpcode.GO, "rsp_data": go.value, "cqid": cqid}))
                    data_q.append((due, {"cqid": cqid, "data": line}))
                elif op is D2HReqOpcode.CleanEvictNoData:
                    rsp_q.append((due, {"opcode": H2DRspOpcode.GO, "rsp_data": GOState.Invalid.value, "cqid": cqid}))
                else:
                    raise RuntimeError(f"the stream's host does not answer {op.name}")
            if taken(dut.cpu_rsp):
                k, line = ctx.get(dut.cpu_rsp.p.cache), ctx.get(dut.cpu_rsp.p.line)
                state, data = CacheState(ctx.get(dut.cpu_rsp.p.state)), ctx.get(dut.cpu_rsp.p.data)
                want = {"load": CacheState.S, "evict": CacheState.I}[bfm.busy[k].kind]
                if state is not want or (want is CacheState.S and data != line):
                    raise RuntimeError(f"cpu_rsp for {bfm.busy[k]!r}: {state.name}, data {data:#x}")
                bfm.install(k, line, state.name, data)
                self.done_latency.append((last_host[line], now - last_host[line]))
                pending -= 1
            if cmd_answer is not None and taken(dut.cmd_rsp):
                cmd_answer = None
            if snooping and taken(dut.probe):
                self.snoop_probes += 1
            if taken(dut.cmd):
                self.snoop_cmds += snooping
                cmd_answer = bfm.command(ctx.get(dut.cmd.p.line), ctx.get(dut.cmd.p.caches),
                                         CmdOp(ctx.get(dut.cmd.p.op)).name)
            if snp is not None and taken(dut.h2d_req):
                snoop_line[snoop_i % 4096] = snp[1]
                self.snoop_taken.append(now)
                snoop_i += 1
            if taken(dut.d2h_rsp):
                uqid, got = ctx.get(dut.d2h_rsp.p.uqid), D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode))
                i = len(self.snoop_answered)
                if uqid != i % 4096 or got is not self.snoops[i][2]:
                    raise RuntimeError(f"snoop {i} ({self.snoops[i][0].name} {self.snoops[i][1]:#x}) answered "
                                       f"{got.name} for UQID {uqid}, expected {self.snoops[i][2].name}")
                del snoop_line[uqid]
                self.snoop_answered.append(now)
            if taken(dut.d2h_data):
                raise RuntimeError("D2H Data from a stream of clean lines")
            await ctx.tick()
            self.cycle += 1
        return self


def _window_rate(cycles):
    """Events per cycle over the middle half of a sorted list of event cycles (the first quarter is the
    warm-up, the last quarter the drain, when fewer caches are still busy)."""
    lo, hi = len(cycles) // 4, (3 * len(cycles)) // 4
    if hi - lo < 8:
        raise RuntimeError(f"{len(cycles)} events are too few for a window")
    return round((hi - lo) / (cycles[hi] - cycles[lo]), 4)


def _window_max(pairs, cycles):
    """The largest latency of the items that started inside the middle-half window of ``cycles``."""
    lo, hi = cycles[len(cycles) // 4], cycles[(3 * len(cycles)) // 4]
    return max(lat for start, lat in pairs if lo <= start <= hi)


def _stream_dut():
    return DCOH(caches=STREAM_CACHES, sf_sets=64, sf_ways=4, tracker=16, work=4, coalesce_window=0,
                credits=64)


def _loads_of(lines):
    """Accesses that leave ``lines`` in S, spread over the caches (each a load miss)."""
    acc = [[] for _ in range(STREAM_CACHES)]
    for i, line in enumerate(lines):
        acc[i % STREAM_CACHES].append(("load", line))
    return acc


def _run_stream(accesses, snoops=()):
    dut = _stream_dut()
    out = {}

    async def body(ctx):
        out["h"] = await _StreamHarness(dut, accesses, snoops).run(ctx)
        return {}
    _run(dut, body)
    return out["h"]


def snoop_stream(opcode, expect, lines, rounds, probe):
    """Snoops that hit the snoop filter, to ``lines`` held in S, ``rounds`` times round them (SnpData
    leaves the lines in S, so they can be snooped again; SnpInv invalidates them: one round).
    ``probe``: whether these snoops must probe the internal caches (checked: a stream of the other
    class would measure the wrong path)."""
    snoops = [(opcode, line, expect) for _ in range(rounds) for line in lines]
    h = _run_stream(_loads_of(lines), snoops)
    if probe != (h.snoop_probes > 0) or probe != (h.snoop_cmds > 0):
        raise RuntimeError(f"{opcode.name} to S lines: {h.snoop_probes} probes and {h.snoop_cmds} commands, "
                           f"but the stream is meant to {'probe' if probe else 'need no probe'}")
    pairs = list(zip(h.snoop_taken, (a - t for t, a in zip(h.snoop_taken, h.snoop_answered))))
    return {"per_cycle": _window_rate(h.snoop_answered), "latency": _window_max(pairs, h.snoop_answered),
            "snoops": len(snoops)}


def request_stream(per_cache=24):
    """Each cache loads a line of its own (a miss: RdShared, GO-S, Data) and evicts it (CleanEvictNoData,
    GO-I), ``per_cache`` lines in turn: CPU accesses, GOs and Data to lines no other access touches."""
    acc = [[(kind, 0x1000 + k + STREAM_CACHES * j) for j in range(per_cache) for kind in ("load", "evict")]
           for k in range(STREAM_CACHES)]
    h = _run_stream(acc)
    cycles = sorted(c for c, _ in h.events)
    return {"per_cycle": _window_rate(cycles), "cpu_latency": _window_max(h.cpu_latency, cycles),
            "done_latency": _window_max(h.done_latency, cycles), "events": len(cycles)}


def snoop_pipe():
    """The pipelined snoop path's streams (module docstring, ``snoop_pipe``)."""
    from tb.snoop_pipe import SnoopPipeBench, per_cycle
    held = [0x400 + i for i in range(128)]
    streams = {"snoop_miss": (H2DReqOpcode.SnpData, [0x10000 + i for i in range(128)]),
               "snoop_hit": (H2DReqOpcode.SnpData, held), "snoop_hit_probe": (H2DReqOpcode.SnpInv, held)}
    out = {}
    for name, (op, lines) in streams.items():
        b = SnoopPipeBench(seed=1, sf_sets=64, sf_ways=4, work=24, lines=held, shapes=("S",))
        r = b.run([(op, line) for line in lines])
        out[f"{name}_per_cycle"] = round(per_cycle(r["rsp_cycles"]), 4)
        out[f"{name}_latency"] = r["rsp_cycles"][0] - r["first_take"]
    out["probe_per_cycle_by_work"] = {}
    for work in (8, 16, 24, 32):
        b = SnoopPipeBench(seed=1, sf_sets=64, sf_ways=4, work=work, lines=held, shapes=("S",))
        r = b.run([(H2DReqOpcode.SnpInv, line) for line in held])
        out["probe_per_cycle_by_work"][str(work)] = round(per_cycle(r["rsp_cycles"]), 4)
    out["params"] = {"work": 24, "window": 8, "cmd_depth": 4, "coalesce_window": 4, "coalesce_block": 4,
                     "caches": 2, "sf_sets": 64, "sf_ways": 4}
    return out


def requests_pipe(caches=8, per_cache=24):
    """The pipelined engine's request stream (module docstring, ``requests_pipe``): each cache loads lines of
    its own and evicts them, the host answering at once; and one load miss alone for the latencies."""
    from models.dcoh import CpuOp
    from tb.engine import EngineBench

    def bench():
        return EngineBench(seed=1, caches=caches, tracker=16, sf_sets=64, sf_ways=4, uncached_share=0,
                             preload_share=0)
    b = bench()
    script = []
    for j in range(per_cache):
        for k in range(caches):
            line = b.lines[(k + caches * j) % len(b.lines)]
            script += [(0, CpuOp("load", k, line)), (0, CpuOp("evict", k, line))]
    # (the script is in cache order within each round: a cache's next access waits for its last answer)
    r = b.run(script=script, host_delay=0)
    events = sorted(r["event_cycles"])
    # one load miss alone: cpu_req taken -> D2H Req valid; the last host message taken -> cpu_rsp valid
    one = bench().run(script=[(0, CpuOp("load", 0, b.lines[0]))], host_delay=0)
    first = {what: cyc for cyc, what, _ in reversed(one["log"])}
    last = {what: cyc for cyc, what, _ in one["log"]}
    return {"request_events_per_cycle": _window_rate(events), "events": len(events),
            "request_cpu_to_d2h_req_latency": first["d2h_req"] - first["cpu_req"],
            "request_host_to_cpu_rsp_latency": last["cpu_rsp"] - last["h2d"],
            "params": {"caches": caches, "tracker": 16, "sf_sets": 64, "sf_ways": 4}}


def engine_mixed(caches=8, per_cache=24, snoops=384):
    """The engine with both streams at once (module docstring, ``engine_mixed``): the request row's
    stream of ``requests_pipe`` and host snoops to lines the device lacks, offered from the first cycle
    (the two sides share the snoop filter's one lookup a cycle, taking turns when both want it)."""
    from models.dcoh import CpuOp
    from tb.engine import EngineBench
    b = EngineBench(seed=1, caches=caches, tracker=16, sf_sets=64, sf_ways=4, uncached_share=0, preload_share=0)
    script = []
    for j in range(per_cache):
        for k in range(caches):
            line = b.lines[(k + caches * j) % len(b.lines)]
            script += [(0, CpuOp("load", k, line)), (0, CpuOp("evict", k, line))]
    snoop_script = [(0, H2DReqOpcode.SnpData, (1 << 21) + i) for i in range(snoops)]
    r = b.run(script=script, snoop_script=snoop_script, host_delay=0)
    req, rsp = sorted(r["event_cycles"]), sorted(r["rsp_cycles"])
    # the window: the cycles in which both streams run (the first quarter to the earlier stream's third)
    lo = max(req[len(req) // 4], rsp[len(rsp) // 4])
    hi = min(req[(3 * len(req)) // 4], rsp[(3 * len(rsp)) // 4])
    in_req = sum(lo <= c < hi for c in req)
    in_rsp = sum(lo <= c < hi for c in rsp)
    return {"events_per_cycle": round((in_req + in_rsp) / (hi - lo), 4),
            "request_events_per_cycle": round(in_req / (hi - lo), 4),
            "snoops_per_cycle": round(in_rsp / (hi - lo), 4), "window_cycles": hi - lo,
            "params": {"caches": caches, "tracker": 16, "sf_sets": 64, "sf_ways": 4, "snoops": snoops}}


def measure():
    miss = snoop_miss()
    link = link_one_way()
    hit0 = snoop_hit(0)
    hit4 = snoop_hit(4)
    lines = [0x100 + i for i in range(32)]
    # SnpData to an S line: RspSHitSE, the copies keep S (no probe); SnpInv: the copies must go (probe)
    hit = snoop_stream(H2DReqOpcode.SnpData, D2HRspOpcode.RspSHitSE, lines, rounds=4, probe=False)
    probe = snoop_stream(H2DReqOpcode.SnpInv, D2HRspOpcode.RspIHitSE, [0x400 + i for i in range(128)], rounds=1,
                         probe=True)
    req = request_stream()
    return {
        "snoop_miss_per_cycle": miss["per_cycle"],
        "snoop_miss_latency": miss["latency"],
        "snoop_hit_per_cycle": hit["per_cycle"],
        "snoop_hit_latency": hit["latency"],
        "snoop_hit_probe_per_cycle": probe["per_cycle"],
        "snoop_hit_probe_latency": probe["latency"],
        "request_events_per_cycle": req["per_cycle"],
        "request_cpu_to_d2h_req_latency": req["cpu_latency"],
        "request_host_to_cpu_rsp_latency": req["done_latency"],
        "snoop_hit_inv_latency": hit0["latency"],
        "coalesce_window_4_adds": hit4["latency"] - hit0["latency"],
        "tx_miss": hit0["tx"],
        "rx_fill": hit0["rx"],
        "link_one_way": max(link["up"], link["down"]),
        "link_one_way_up_down": [link["up"], link["down"]],
        "snoop_pipe": snoop_pipe(),
        "requests_pipe": requests_pipe(),
        "engine_mixed": engine_mixed(),
        "note": "cycles measured on the RTL in amaranth.sim (bench/dcoh_bench.py); hit latency excludes "
                "the internal cache's own time; *_per_cycle and the latencies beside them: streams of "
                "non-conflicting lines, middle half of the run (bench/dcoh_bench.py, _StreamHarness)",
    }


# (name, model Config fields over tests/dcoh_cosim.py's CONFIG): sizes at which accesses wait
RESCAN_CONFIGS = (("4 caches, 2 CQIDs", dict(caches=4, max_outstanding=2)),
                  ("8 caches, 4 CQIDs, 4x2 snoop filter", dict(caches=8, max_outstanding=4, sf_sets=4)))


def rescan_tries(seeds=3, steps=200):
    """The accesses the engine's rescans take up (``DCOH.scan_pick``), with the wake-up rule per access
    and without it (``DCOH.wake_per_access``), over the same co-simulated moves against the golden model
    (tests/dcoh_cosim.py, which fails on any difference): {config: {"every access": n, "per access": n}}."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from dcoh_cosim import CONFIG, make_dut, run_cosim
    from models.config import Config
    out = {}
    for name, over in RESCAN_CONFIGS:
        cfg = Config(**{**CONFIG, **over})
        counts = {}
        for label, per_access in (("every access", False), ("per access", True)):
            DCOH.wake_per_access = per_access
            try:
                tries = 0
                for seed in range(seeds):
                    dut = make_dut(cfg)
                    n = [0]

                    async def watch(ctx, dut=dut, n=n):
                        async for _, _, pick in ctx.tick().sample(dut.scan_pick):
                            n[0] += pick

                    async def drive(ctx, dut=dut, seed=seed):
                        await run_cosim(ctx, dut, seed, steps, cfg=cfg)
                    sim = Simulator(dut)
                    sim.add_clock(1e-8)
                    sim.add_process(watch)
                    sim.add_testbench(drive)
                    sim.run()
                    tries += n[0]
            finally:
                DCOH.wake_per_access = True
            counts[label] = tries
        out[name] = counts
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--rescan-tries", action="store_true",
                    help="only count the rescans' tries with and without the wake-up rule per access "
                         "(co-simulation against the golden model, seeds 0-2, 200 moves each); no JSON written")
    args = ap.parse_args(argv)
    if args.rescan_tries:
        for name, c in rescan_tries().items():
            print(f"{name}: tries {c['every access']} (every access) -> {c['per access']} (per access), "
                  f"{c['per access'] / c['every access']:.3f}")
        return 0
    res = measure()
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
