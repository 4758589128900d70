"""tb/rtl_caches.py ``InternalCaches`` against the Python cache BFM's rules, under a random stand-in DCOH.

The stand-in drives every input the DCOH would (cmd, cmd_rsp back-pressure, cpu_req back-pressure,
cpu_rsp with a legal granted state, probes, its events (drawn as dispatch codes), idle) at random, and a
mirror of the caches (tb/cache_bfm.py ``CacheBFM``, the rules the cocotb testbench uses) follows what
crossed the ports.
Checked every cycle: each hit is a hit in the mirror and happens while the DCOH is quiet by the Python
testbench's rule; each miss is a miss in the mirror; no access starts before its think time; each
cpu_req carries the access the mirror has outstanding; each cmd_rsp is the mirror's answer to that cmd;
``busy`` is the mirror's, every probe is taken at once; no error bit is set.  At the end: every access finished,
``drained``, and the RTL's memories hold the mirror's lines.  A run that stops making progress fails
with its seed."""

import random
from collections import deque

import pytest
from amaranth.sim import Simulator

from cxl.coherence import MESI
from hdl.dcoh.dcoh import CacheState, CmdOp, CpuKind, Dispatch
from models.dcoh import CpuOp, cache_hit
from tb.cache_bfm import CacheBFM
from tb.rtl_caches import InternalCaches
from tb.seed import env_seed

SEED = env_seed(1)
KINDS = [k.name.lower() for k in CpuKind]
# what a DCOH may grant each kind (models/dcoh.py: a load gets S or E, a store M, the rest nothing)
GRANT = {"load": ("S", "E"), "store": ("M",)}
LINES = [0x3, 0x7, 0x11, 0x12, 0x20, 0x3f]     # within index_bits=6


def _run(seed, ops_per_cache=150, caches=2, think=3, limit=40000, idle_p=0.6, stall_bits=0):
    rng = random.Random(seed)
    dut = InternalCaches(caches=caches, index_bits=6, think_bits=4, op_depth=2, stall_bits=stall_bits)
    todo = [deque() for _ in range(caches)]
    value = 0
    for k in range(caches):
        for _ in range(ops_per_cache):
            value += 1
            todo[k].append(CpuOp(rng.choice(KINDS), k, rng.choice(LINES), value, rng.randrange(2)))
    thinks = {}                      # op value -> think
    expect = [deque() for _ in range(caches)]   # accesses fed, not started
    mirror = CacheBFM(caches)
    report = {"cmd_held": 0, "cpu_rsp_held": 0, "answer_late": 0}

    async def bench(ctx):
        cycle = 0
        last_done = [-1] * caches
        cmd_cur = None               # (line, mask, op) offered
        rsp_owed = None              # (dirty, excl, data) the RTL must answer
        req_taken = deque()          # [due cycle, cache, op] accepted cpu_reqs waiting for their cpu_rsp
        rsp_cur = None
        feeding = [None] * caches
        done = 0
        total = caches * ops_per_cache
        while done < total or not ctx.get(dut.drained):
            if cycle > limit:
                raise AssertionError(f"seed {seed}: no progress: {done}/{total} accesses at cycle {cycle}")
            # ---- drive this cycle's inputs
            k_feed = rng.randrange(caches)
            if feeding[k_feed] is None and todo[k_feed] and rng.random() < 0.5:
                op = todo[k_feed].popleft()
                t = thinks[op.value] = rng.randrange(think + 1)
                feeding[k_feed] = (op, t)
            offer = next((f for f in feeding if f is not None), None)
            ctx.set(dut.ops.valid, offer is not None)
            if offer is not None:
                op, t = offer
                ctx.set(dut.ops.p, {"cache": op.k, "kind": CpuKind[op.kind.upper()], "line": op.line,
                                    "value": op.value, "variant": op.variant, "think": t})
            if cmd_cur is None and rsp_owed is None and rng.random() < 0.12:
                line = rng.choice(LINES)
                mask = rng.randrange(1, 1 << caches)
                # the DCOH never commands a cache about the line it is fetching for that cache
                mask &= ~sum(1 << k for k in range(caches) if mirror.busy[k] is not None and mirror.busy[k].line == line)
                if mask:
                    cmd_cur = (line, mask, rng.choice(list(CmdOp)))
            ctx.set(dut.cmd.valid, cmd_cur is not None)
            if cmd_cur is not None:
                ctx.set(dut.cmd.p, {"line": cmd_cur[0], "caches": cmd_cur[1], "op": cmd_cur[2]})
            ctx.set(dut.cmd_rsp.ready, rng.random() < 0.7)
            ctx.set(dut.cpu_req.ready, rng.random() < 0.6)
            if rsp_cur is None and req_taken and req_taken[0][0] <= cycle:
                _, k, op = req_taken.popleft()
                state = rng.choice(GRANT.get(op.kind, ("I",)))
                data = rng.randrange(1 << 40) if state in ("S", "E") else 0
                rsp_cur = (k, op.line, state, data)
            ctx.set(dut.cpu_rsp.valid, rsp_cur is not None)
            if rsp_cur is not None:
                ctx.set(dut.cpu_rsp.p, {"cache": rsp_cur[0], "line": rsp_cur[1], "state": CacheState[rsp_cur[2]],
                                        "data": rsp_cur[3]})
            ctx.set(dut.probe.valid, rng.random() < 0.05)
            code = Dispatch.NONE if rng.random() < 0.7 else rng.choice(list(Dispatch))
            ctx.set(dut.dcoh_event, code != Dispatch.NONE)
            ctx.set(dut.snoop_taken, code == Dispatch.SNOOP)
            idle = rng.random() < idle_p
            ctx.set(dut.dcoh_idle, idle)

            # ---- what happens at the coming edge (the outputs, settled)
            errors = ctx.get(dut.errors.as_value())
            assert errors == 0, f"seed {seed} cycle {cycle}: error bits {ctx.get(dut.errors)}"
            assert ctx.get(dut.probe.ready), f"seed {seed} cycle {cycle}: a probe not taken at once"
            busy = ctx.get(dut.busy)
            assert busy == sum(1 << k for k in range(caches) if mirror.busy[k] is not None), \
                f"seed {seed} cycle {cycle}: busy {busy:b}, mirror {mirror.busy}"
            # the Python testbench's quiet rule, on the state before this cycle's changes
            cmd_rsp_ready = ctx.get(dut.cmd_rsp.ready)
            quiet = (idle and code == Dispatch.NONE and cmd_cur is None and rsp_cur is None and
                     not (rsp_owed is not None and not cmd_rsp_ready))
            # slow caches: what they held back this cycle
            if cmd_cur is not None and rsp_owed is None and not ctx.get(dut.cmd.ready):
                report["cmd_held"] += 1
            if rsp_cur is not None and not ctx.get(dut.cpu_rsp.ready):
                report["cpu_rsp_held"] += 1
            if rsp_owed is not None and not ctx.get(dut.cmd_rsp.valid):
                report["answer_late"] += 1
            # a cmd_rsp answered in this cycle
            if ctx.get(dut.cmd_rsp.valid):
                assert rsp_owed is not None, f"seed {seed} cycle {cycle}: cmd_rsp with no cmd"
                if cmd_rsp_ready:
                    got = (ctx.get(dut.cmd_rsp.p.dirty), ctx.get(dut.cmd_rsp.p.excl), ctx.get(dut.cmd_rsp.p.data))
                    assert got == rsp_owed, f"seed {seed} cycle {cycle}: cmd_rsp {got}, mirror {rsp_owed}"
                    rsp_owed = None
            # the cmd taken in this cycle: the mirror changes now
            if cmd_cur is not None and ctx.get(dut.cmd.ready):
                line, mask, op = cmd_cur
                rsp_owed = mirror.command(line, mask, op.name)
                cmd_cur = None
            if rsp_cur is not None and ctx.get(dut.cpu_rsp.ready):
                k, line, state, data = rsp_cur
                mirror.install(k, line, state, data)
                last_done[k] = cycle
                done += 1
                rsp_cur = None
            hit, miss = ctx.get(dut.hit), ctx.get(dut.miss)
            for k in range(caches):
                for what in ("hit", "miss"):
                    if not ((hit if what == "hit" else miss) >> k) & 1:
                        continue
                    assert expect[k], f"seed {seed} cycle {cycle}: cache {k} {what} with no access fed"
                    op = expect[k].popleft()
                    assert cycle >= last_done[k] + 1 + thinks[op.value], \
                        f"seed {seed} cycle {cycle}: {op!r} started before its think time"
                    assert cache_hit(mirror.caches[k], op) == (what == "hit"), \
                        f"seed {seed} cycle {cycle}: RTL {what} {op!r}, mirror {mirror.caches[k].get(op.line)}"
                    if what == "hit":
                        assert quiet, f"seed {seed} cycle {cycle}: hit {op!r} while the DCOH is not quiet"
                        mirror.access(op)
                        last_done[k] = cycle
                        done += 1
                    else:
                        mirror.access(op)
            if ctx.get(dut.cpu_req.valid) and ctx.get(dut.cpu_req.ready):
                k = ctx.get(dut.cpu_req.p.cache)
                op = mirror.busy[k]
                assert op is not None and all(x[1] != k for x in req_taken), \
                    f"seed {seed} cycle {cycle}: cpu_req for cache {k}, which has no miss to send"
                got = (CpuKind(ctx.get(dut.cpu_req.p.kind)).name.lower(), ctx.get(dut.cpu_req.p.line),
                       ctx.get(dut.cpu_req.p.variant), ctx.get(dut.cpu_req.p.data))
                assert got == (op.kind, op.line, op.variant, op.value), f"seed {seed} cycle {cycle}: cpu_req {got}, {op!r}"
                req_taken.append([cycle + 1 + rng.randrange(5), k, op])
            if offer is not None and ctx.get(dut.ops.ready):
                expect[offer[0].k].append(offer[0])
                feeding[offer[0].k] = None
            report.setdefault("hits", 0)
            report["hits"] += bin(hit).count("1")
            report.setdefault("misses", 0)
            report["misses"] += bin(miss).count("1")
            await ctx.tick()
            cycle += 1
        for k in range(caches):
            for line in LINES:
                e = ctx.get(dut.storage[k][line])
                got = None if e.state == CacheState.I else [MESI[CacheState(e.state).name], e.value]
                assert got == mirror.caches[k].get(line), \
                    f"seed {seed}: cache {k} line {line:#x}: RTL {got}, mirror {mirror.caches[k].get(line)}"
        report["cycles"] = cycle

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return report


@pytest.mark.parametrize("offset", range(3))
def test_internal_caches_follow_the_bfm_rules(offset):
    r = _run(SEED + offset)
    assert r["hits"] > 30 and r["misses"] > 30, r      # both paths exercised


def test_internal_caches_with_one_cache_and_a_busy_dcoh():
    r = _run(SEED + 10, caches=1, idle_p=0.2)
    assert r["hits"] > 10 and r["misses"] > 10, r


@pytest.mark.parametrize("stall_bits", [1, 3])
def test_slow_internal_caches_follow_the_bfm_rules(stall_bits):
    """``stall_bits``: the caches hold cmd and cpu_rsp back and answer cmds late (pseudo-randomly), and still
    follow every rule above; each kind of holding back happens.  The default never holds back."""
    r = _run(SEED + 20 + stall_bits, stall_bits=stall_bits)
    assert r["hits"] > 30 and r["misses"] > 30, r
    assert r["cmd_held"] > 5 and r["cpu_rsp_held"] > 5 and r["answer_late"] > 5, r
    plain = _run(SEED + 20, ops_per_cache=40)
    assert plain["cmd_held"] == plain["cpu_rsp_held"] == plain["answer_late"] == 0, plain


def test_internal_caches_reject_bad_parameters():
    with pytest.raises(ValueError, match="index_bits"):
        InternalCaches(index_bits=0)
    with pytest.raises(ValueError, match="value_bits"):
        InternalCaches(value_bits=1000)
    with pytest.raises(ValueError, match="coalesce_block"):
        InternalCaches(coalesce_block=3)
    with pytest.raises(ValueError, match="stall_bits"):
        InternalCaches(stall_bits=7)
    with pytest.raises(ValueError, match="stall_bits"):
        InternalCaches(stall_bits=-1)
