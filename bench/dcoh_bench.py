"""DCOH RTL figures, measured in amaranth.sim (cycles, not wall time):

* ``snoop_miss_per_cycle``: snoops answered per cycle on the snoop-filter-miss path, streaming 256
  snoops to lines the device does not hold (target 1);
* ``snoop_miss_latency``: cycles from a snoop's handshake on ``h2d_req`` to its RspIHitI being valid on
  ``d2h_rsp`` (target <= 2);
* ``snoop_hit_inv_latency``: the same for a SnpInv to a line held in S by an internal cache, with the
  coalescing window set to 0, *excluding* the internal cache's time (cycles from ``cmd`` valid to
  ``cmd_rsp`` valid, which the cache decides);
* ``coalesce_window``: what the window adds to the hit path (measured: hit latency at window w minus at 0);
* ``tx_miss``: cycles from a load miss's ``cpu_req`` handshake to its RdShared valid on ``d2h_req``;
* ``rx_fill``: cycles from the H2D Data handshake (GO already seen) to the fill on ``cpu_rsp``;
* ``link_one_way``: cycles a message takes through an idle 68B-flit link (the RTL loopback: packer,
  CRC, wire, retry check, unpacker), the slower of the two directions.

    python -m bench.dcoh_bench [--out FILE]

``models/cxl_timing.py`` reads the committed copy of these figures (``bench/dcoh_cycles.json``), so the
CXL-vs-RDMA report uses the RTL's cycle counts; ``make bench`` rewrites it.
"""

import argparse
import json
import sys
from pathlib import Path

from amaranth.sim import Simulator

from hdl.dcoh.dcoh import DCOH, CpuKind
from cxl.messages import D2HRspOpcode, H2DReqOpcode, H2DRspOpcode, GOState

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
        while not ctx.get(dut.d2h_rsp.valid):
            if ctx.get(dut.cmd.valid) and cmd_at is None:
                cmd_at = cycles
                ctx.set(dut.cmd_rsp.valid, 1)          # the cache answers in the next cycle
                ctx.set(dut.cmd_rsp.p.dirty, 0)
            if ctx.get(dut.cmd_rsp.valid) and ctx.get(dut.cmd_rsp.ready):
                cache_time = cycles + 1 - cmd_at
                await ctx.tick()
                ctx.set(dut.cmd_rsp.valid, 0)
            else:
                await ctx.tick()
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


def measure():
    miss = snoop_miss()
    link = link_one_way()
    hit0 = snoop_hit(0)
    hit4 = snoop_hit(4)
    return {
        "snoop_miss_per_cycle": miss["per_cycle"],
        "snoop_miss_latency": miss["latency"],
        "snoop_hit_inv_latency": hit0["latency"],
        "coalesce_window_4_adds": hit4["latency"] - hit0["latency"],
        "tx_miss": hit0["tx"],
        "rx_fill": hit0["rx"],
        "link_one_way": max(link["up"], link["down"]),
        "link_one_way_up_down": [link["up"], link["down"]],
        "note": "cycles measured on the RTL in amaranth.sim (bench/dcoh_bench.py); hit latency excludes "
                "the internal cache's own time",
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    res = measure()
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
