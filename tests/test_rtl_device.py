"""The device top (DCOH + device end of the link) against the golden model, with every message
crossing a whole 68B-flit link (tb/linked_device.py: device end, two wires, host end) -- with and
without bit errors on the wires.  The co-simulation is tests/dcoh_cosim.py's, unchanged: it compares
messages, internal caches, snoop filter and tracker with the model after every step."""

import sys
from pathlib import Path

import pytest
from amaranth.sim import Simulator

sys.path.insert(0, str(Path(__file__).parent))
from dcoh_cosim import CONFIG, run_cosim          # noqa: E402
from models.config import Config                  # noqa: E402
from tb.linked_device import LinkedDevice         # noqa: E402
from hdl.device import Device                     # noqa: E402
from hdl.link.port import RX_ERROR_KINDS          # noqa: E402
from cxl.messages import H2DReqOpcode             # noqa: E402
from models.flit import control, encode_control, seal   # noqa: E402


def linked(cfg, ber, seed):
    return LinkedDevice(dcoh=dict(caches=cfg.caches, sf_sets=cfg.sf_sets, sf_ways=cfg.sf_ways,
                                  tracker=cfg.max_outstanding, work=8, coalesce_window=128,
                                  coalesce_block=cfg.coalesce_block, coalesce_groups=4, credits=64),
                        link=dict(retry_depth=64), ber=ber, seed=seed)


@pytest.mark.parametrize("ber, seed, steps", [(0.0, 11, 80), (2e-4, 12, 80), (1e-3, 13, 40)])
def test_device_through_the_link_matches_model(ber, seed, steps):
    cfg = Config(**CONFIG)
    dut = linked(cfg, ber, seed)
    out = {}

    async def bench(ctx):
        await run_cosim(ctx, dut, seed, steps, cfg=cfg)
        out["injected"], out["retries"] = ctx.get(dut.injected), ctx.get(dut.retries)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    if ber >= 1e-3:                                   # errors really happened and were retried
        assert out["injected"] > 0 and out["retries"] > 0, out


def test_bad_host_input_counted_at_the_device_top():
    """Flits from the host that break a rule, one kind each (an illegal snoop opcode, a reserved slot
    format, a reserved LLCTRL), and a RETRY.Idle: counted per kind on the device top's ``rx_errors``;
    each rule breaker is answered by the test with a RETRY.Ack, after which the device resumes (no
    link error)."""
    dut = Device(link=dict(retry_depth=64))
    bad_op = next(v for v in range(8) if v not in {m.value for m in H2DReqOpcode})
    as_int = lambda b: int.from_bytes(b, "little")                    # noqa: E731
    flits = {"opcode": as_int(seal((1 | bad_op << 1) << 32)), "format": as_int(seal(7 << 5)),
             "control": as_int(seal(1 | 3 << 32)), "retry_unused": as_int(seal(encode_control(control("RETRY.Idle"))))}
    ack = as_int(seal(encode_control(control("RETRY.Ack", eseq=0))))
    out = {}

    async def bench(ctx):
        ctx.set(dut.tx_flit.ready, 1)
        for kind, flit in flits.items():
            for f in [flit] + [None] * 30 + ([ack] if kind != "retry_unused" else []) + [None] * 10:
                ctx.set(dut.rx_flit.valid, f is not None)
                if f is not None:
                    ctx.set(dut.rx_flit.payload, f)
                await ctx.tick()
        out.update({k: ctx.get(getattr(dut.rx_errors, k)) for k in RX_ERROR_KINDS},
                   link_error=ctx.get(dut.link_error), rule=ctx.get(dut.rule_errors))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for k in RX_ERROR_KINDS:
        assert out[k] == (1 if k in flits else 0), (k, out)
    assert out["rule"] == 3 and out["link_error"] == 0, out


def test_linked_device_error_bit_reports_a_dead_link():
    """With every flit corrupted (BER 0.02: a 528-bit flit survives with probability ~2e-5) one snoop's
    flit is retried until the device end gives up: the linked device's ``error`` bit rises with
    RETRY_LIMIT as the cause, which the system testbench turns into a failure naming it (tb/system_tb.py
    ``rtl_errors``), instead of a watchdog timeout thousands of cycles later."""
    from hdl.link.port import LinkErrorCause
    from models.link import Msg, encode
    from cxl.messages import Channel
    dut = LinkedDevice(ber=0.02, seed=3)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.h2d_req.payload.as_value(), encode(Msg(Channel.H2D_REQ, H2DReqOpcode.SnpInv, 1, 0x40)))
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.d2h_rsp.ready, 1)
        for cycle in range(6000):
            await ctx.tick()
            if ctx.get(dut.h2d_req.ready):
                ctx.set(dut.h2d_req.valid, 0)
            causes = ctx.get(dut.link_error_cause), ctx.get(dut.host_link_error_cause)
            if any(causes) or ctx.get(dut.error):
                seen.update(cycle=cycle, causes=causes, error=ctx.get(dut.error), crc=ctx.get(dut.crc_errors))
                return
    sim.add_testbench(bench)
    sim.run()
    assert seen, "6000 cycles of corrupted flits and no link error"
    assert seen["error"], f"a link stopped (device, host causes {seen['causes']}) but error stayed low"
    assert any(c & LinkErrorCause.RETRY_LIMIT for c in seen["causes"]) and seen["crc"] > 0, seen


# ---------------------------------------------------------------------------------------------------
# A snoop to a line whose GO is still on its way through the link (docs/sources.md §1.7).  The host may
# send a snoop right behind the GO of the device's request to the same line; the snoop must then see
# the GO's result (CXL 3.x §3.2.5.2: GO-E for an RdOwn followed at once by a snoop to the address: the
# device takes the line to M and answers RspIFwdM).  Whether the host sent the read's data before the
# GO or after the snoop, the device's answer is the same; with the data still missing it holds the snoop
# until the data arrives (CXL 3.x §3.2.5.14 item 4).  The host may not send the opposite order -- a GO
# while a snoop to its line is pending (§3.2.5.2) -- so the only back-to-back pair is GO, then snoop.
# Here nothing holds the snoop back: the host end takes GO, snoop and data one after another and the
# link and the DCOH alone keep their order.

# The host's messages in groups: a group is offered to the host end in one cycle (GO and snoop in one
# cycle go into one flit), the next group in the cycle after the last message of the one before was
# taken; ("wait",) lets DATA_LAG cycles pass first, so that the snoop reaches the DCOH well before the
# data (without it the data, one flit behind, overtakes the snoop inside the DCOH, which takes H2D
# Data before snoops: the same answer, but the snoop is never held).
DATA_LAG = 30
GO_THEN_SNOOP = {"data first, GO and snoop in one cycle": (("data",), ("go", "snoop")),
                 "GO and snoop in one cycle, data last": (("go", "snoop"), ("wait",), ("data",)),
                 "data first, snoop in the cycle after the GO": (("data",), ("go",), ("snoop",)),
                 "snoop in the cycle after the GO, data last": (("go",), ("snoop",), ("wait",), ("data",))}
STORE_VALUE = 0x5A5A_0001
FILL_VALUE = 0x1111_2222
LINE = 0x40


def _ordering_rig():
    return LinkedDevice(dcoh=dict(caches=2, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0,
                                  credits=64), link=dict(retry_depth=64))


async def _go_then_snoop(ctx, dut, order, snoop_op):
    """Cache 0 stores to LINE (a miss: RdOwn); the host answers with GO-E and the data and snoops the line,
    in ``order`` (groups of GO_THEN_SNOOP).  Returns what the host end received, the caches, the DCOH's
    snoop filter, busy tracker entries and protocol-error count afterwards, and when things happened."""
    from tb.cache_bfm import CacheBFM
    from models.dcoh import CpuOp
    from hdl.dcoh.dcoh import CacheState, CmdOp, CpuKind, Dispatch
    from cxl.messages import D2HReqOpcode, D2HRspOpcode, GOState, H2DRspOpcode
    sys.path.insert(0, str(Path(__file__).parent))
    from dcoh_cosim import _rtl_sf

    bfm = CacheBFM(2)
    seen = {"d2h_req": [], "d2h_rsp": [], "d2h_data": [], "cpu_rsp": []}
    at = {"now": 0}                          # cycle counter; when the host end / the DCOH took each message
    cmd_answer = [None]
    for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.probe, dut.cmd):
        ctx.set(s.ready, 1)

    async def cycle():
        """One cycle: the caches (tb/cache_bfm.py: a command answered in the next cycle, every probe
        taken at once) and the host end's D2H outputs, recorded."""
        taken = lambda s: ctx.get(s.valid) and ctx.get(s.ready)          # noqa: E731
        ctx.set(dut.cmd_rsp.valid, cmd_answer[0] is not None)
        if cmd_answer[0] is not None:
            dirty, excl, line_data = cmd_answer[0]
            ctx.set(dut.cmd_rsp.p.dirty, dirty)
            ctx.set(dut.cmd_rsp.p.excl, excl)
            ctx.set(dut.cmd_rsp.p.data, line_data)
            if taken(dut.cmd_rsp):
                cmd_answer[0] = None
        if taken(dut.cmd):
            cmd_answer[0] = bfm.command(ctx.get(dut.cmd.p.line), ctx.get(dut.cmd.p.caches),
                                        CmdOp(ctx.get(dut.cmd.p.op)).name)
        if taken(dut.cpu_rsp):
            k, line, state = ctx.get(dut.cpu_rsp.p.cache), ctx.get(dut.cpu_rsp.p.line), ctx.get(dut.cpu_rsp.p.state)
            seen["cpu_rsp"].append((k, line, CacheState(state).name))
            bfm.install(k, line, CacheState(state).name, ctx.get(dut.cpu_rsp.p.data))
        if taken(dut.d2h_req):
            seen["d2h_req"].append((D2HReqOpcode(ctx.get(dut.d2h_req.p.opcode)), ctx.get(dut.d2h_req.p.cqid),
                                    ctx.get(dut.d2h_req.p.addr)))
        if taken(dut.d2h_rsp):
            seen["d2h_rsp"].append((D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode)), ctx.get(dut.d2h_rsp.p.uqid)))
        if taken(dut.d2h_data):
            seen["d2h_data"].append((ctx.get(dut.d2h_data.p.hdr.uqid), ctx.get(dut.d2h_data.p.data)))
        if taken(dut.dcoh.h2d_rsp):
            at.setdefault("go_at_dcoh", at["now"])
        for chan, s_ in (("go", dut.dcoh.h2d_rsp), ("snoop", dut.dcoh.h2d_req)):
            if ctx.get(s_.valid):
                at.setdefault(f"{chan}_reached_dcoh", at["now"])
        if ctx.get(dut.dispatch) == Dispatch.REPLAY:
            at["replays"] = at.get("replays", 0) + 1
        await ctx.tick()
        at["now"] += 1

    async def put(*messages):
        """Offer messages ((stream, fields), each on a channel of its own) to the host end together, each
        until it is taken (each cycle run through ``cycle``); ``at[stream]``: the cycle it was taken."""
        waiting = dict(messages)
        for stream, fields in messages:
            for name, v in fields.items():
                target = stream.p
                for part in name.split("."):
                    target = getattr(target, part)
                ctx.set(target, v)
            ctx.set(stream.valid, 1)
        for _ in range(200):
            done = [s for s in waiting if ctx.get(s.ready)]
            for s in done:
                at[s] = at["now"]
            await cycle()
            for s in done:
                ctx.set(s.valid, 0)
                del waiting[s]
            if not waiting:
                return
        raise AssertionError(f"the host end did not take {list(waiting.values())}")

    async def until(what, cond, limit=2000):
        for _ in range(limit):
            if cond():
                return
            await cycle()
        raise AssertionError(f"{order}: {what} did not happen in {limit} cycles; seen {seen}")

    store = CpuOp("store", 0, LINE, value=STORE_VALUE)
    assert not bfm.access(store)
    await put((dut.cpu_req, {"kind": CpuKind.STORE, "cache": 0, "line": LINE, "data": STORE_VALUE}))
    await until("the RdOwn", lambda: seen["d2h_req"])
    op, cqid, addr = seen["d2h_req"][0]
    assert (op, addr) == (D2HReqOpcode.RdOwn, LINE), seen
    messages = {
        "go": (dut.h2d_rsp, {"valid": 1, "opcode": H2DRspOpcode.GO, "rsp_data": GOState.Exclusive.value,
                             "cqid": cqid}),
        "data": (dut.h2d_data, {"hdr.valid": 1, "hdr.cqid": cqid, "data": FILL_VALUE}),
        "snoop": (dut.h2d_req, {"valid": 1, "opcode": snoop_op, "addr": LINE, "uqid": 9}),
    }
    for group in order:                      # back to back: each group offered in the cycle after the last was taken
        if group == ("wait",):
            for _ in range(DATA_LAG):
                await cycle()
        else:
            await put(*(messages[name] for name in group))
    # the host's order: the host end took the GO no later than the snoop (then the link may not swap
    # them) -- and what the test is about: the snoop entered the link while the GO was still in it
    assert at[dut.h2d_rsp] <= at[dut.h2d_req] < at.get("go_at_dcoh", at["now"] + 1), (order, at)
    await until("the snoop's answer", lambda: seen["d2h_rsp"])
    await until("quiet", lambda: ctx.get(dut.idle))
    trk = ctx.get(dut.dcoh.trk)
    sf, _ = _rtl_sf(ctx, dut.dcoh)
    return seen, bfm.caches, sf, [int(trk[i].state) for i in range(dut.dcoh.tracker) if trk[i].valid], \
        ctx.get(dut.protocol_errors), {k: v for k, v in at.items() if isinstance(k, str)}


@pytest.mark.parametrize("order, snoop", [(o, "SnpInv") for o in GO_THEN_SNOOP] +
                         [(o, "SnpData") for o in list(GO_THEN_SNOOP)[:2]])
def test_snoop_right_behind_a_go_sees_the_go(order, snoop):
    """GO-E for cache 0's RdOwn and a snoop to the same line, back to back through the whole link, the
    data before the GO or after the snoop: the store completes in M and the snoop finds it M, RspIFwdM
    (SnpInv: the line leaves the device) or RspSFwdM (SnpData: it stays S in cache 0), with the store's
    value as its data."""
    from cxl.messages import D2HRspOpcode, H2DReqOpcode
    from hdl.dcoh.snoop_filter import SFState
    from cxl.coherence import MESI
    dut = _ordering_rig()
    out = {}

    async def bench(ctx):
        out["r"] = await _go_then_snoop(ctx, dut, GO_THEN_SNOOP[order], H2DReqOpcode[snoop])
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    seen, caches, sf, busy, errors, at = out["r"]
    fwd = {"SnpInv": D2HRspOpcode.RspIFwdM, "SnpData": D2HRspOpcode.RspSFwdM}[snoop]
    assert seen["cpu_rsp"] == [(0, LINE, "M")], seen
    assert seen["d2h_rsp"] == [(fwd, 9)], f"{order}: the snoop did not see the GO's M line: {seen}"
    assert seen["d2h_data"] == [(9, STORE_VALUE)], seen
    assert errors == 0 and busy == [], (errors, busy)
    groups = GO_THEN_SNOOP[order]
    if ("go", "snoop") in groups:
        # offered in one cycle, they still cross in order: the host end's packer puts the snoop in a flit
        # after the GO's (models.flit.packer, "A GO and the snoop behind it"), so the DCOH has the GO first
        assert at["go_reached_dcoh"] < at["snoop_reached_dcoh"], at
    if groups[-1] == ("data",):
        assert at.get("replays", 0) >= 1, f"the snoop found GO without data and was not held: {at}"
    if snoop == "SnpInv":
        assert LINE not in sf and LINE not in caches[0], (sf, caches)
    else:
        state, dirty, presence, _ = sf[LINE]
        assert (state, dirty, presence) == (SFState.S, 0, 0b01), sf[LINE]
        assert caches[0][LINE] == [MESI.S, STORE_VALUE], caches


def _slots_of(wire_words, chans):
    """(flit, slot) of the first message of each channel in ``chans`` among the down-link flits
    ``wire_words`` (payload and CRC, as the linked device's ``down_word`` tap shows them)."""
    from models.flit.crc import frame
    from models.flit.json_form import decode_stream
    found = {}
    flits = [frame(w.to_bytes(66, "little")) for w in wire_words]
    for obj in decode_stream("downstream", flits):
        for s, slot in enumerate(obj.get("slots", [])):
            for msg in slot.get("messages", []):
                found.setdefault(msg["channel"], (obj["flit"], s))
    return [found.get(c) for c in chans]


def test_go_and_snoop_offered_together_cross_in_separate_slots():
    """CXL 3.x §3.2.5.2: a GO and a snoop behind it reach the device in separate slots, GO first, even
    when the host hands both to its link end in the same cycle (docs/sources.md §1.7)."""
    from cxl.messages import H2DReqOpcode
    dut = _ordering_rig()
    words = []

    async def monitor(ctx):
        async for _clk, _rst, crossed, word in ctx.tick().sample(dut.down_flit, dut.down_word):
            if crossed:
                words.append(word)

    async def bench(ctx):
        await _go_then_snoop(ctx, dut, GO_THEN_SNOOP["GO and snoop in one cycle, data last"], H2DReqOpcode.SnpInv)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(monitor)
    sim.add_testbench(bench)
    sim.run()
    go, snoop = _slots_of(words, ("H2D_RSP", "H2D_REQ"))
    assert go is not None and snoop is not None, (go, snoop)
    assert go < snoop, f"GO at (flit, slot) {go}, the snoop behind it at {snoop}: not in separate slots, GO first"
