"""The DCOH top (hdl/dcoh/dcoh.py) against the golden model's device, plus its directed properties.

* Random co-simulation (tests/dcoh_cosim.py): the model's whole system runs, device 0 is shadowed by
  the RTL; every step compares the D2H messages, internal caches, snoop filter and tracker.
* Every race of tests/test_races.py, replayed move by move against the RTL;
  the racy (state, event) pair each race asserts must be taken in the replay too.
* The snoop-filter-miss fast path: one snoop per cycle, response in the cycle after the snoop.
* A snoop the model stalls (GO seen, data not) is held, and later snoops wait behind it; a snoop whose
  probe was out when its line's GO came waits for the data too.
* Malformed host messages are counted, dropped, and nothing hangs (a snoop with a reserved opcode too); a
  second snoop to a line is counted and still answered once; bad parameters are named.
* A rescan that back-invalidates three victims with one coalescer group finishes; a snoop-filter miss is
  answered while the caches hold back probes, and (the snoop side path) while they hold back a command.
* The wake-up rule per access: a rescan first tries only the accesses the event before it woke.
"""

import inspect
import sys
from pathlib import Path

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parent))
import scenario as scenario_mod                                    # noqa: E402
import test_races                                                  # noqa: E402
from dcoh_cosim import CONFIG, CosimMismatch, simulate  # noqa: E402
from cxl.coherence import SNOOP_TABLE, STALL, DevState              # noqa: E402
from hdl.dcoh.dcoh import DCOH, CacheState, CpuKind, Dispatch, ErrorKind  # noqa: E402
from cxl.messages import D2HReqOpcode, D2HRspOpcode, H2DReqOpcode, H2DRspOpcode  # noqa: E402
from models.config import Config                                   # noqa: E402


def _cosim(cfg, seed, steps=0, trace=None, window=128):
    return simulate(cfg, seed, steps, trace=trace, window=window)


# Each example runs a few hundred model moves through the RTL (~1 s), so fewer examples than the
# profile's default; `make regress` style long runs use tests/dcoh_cosim.py directly with more seeds.
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_rtl_matches_model_on_random_streams(seed):
    _cosim(Config(**CONFIG), seed, steps=200)


def test_cosim_detects_a_broken_rtl(monkeypatch):
    """The co-simulation can fail: an RTL that answers SnpData with a downgrade left out is caught."""
    import hdl.dcoh.engine_tables as rtl          # where the RTL reads the snoop table
    from cxl.coherence import DevState as D
    broken = dict(rtl.SNOOP_TABLE)
    broken[(D.E, H2DReqOpcode.SnpData)] = (D2HRspOpcode.RspSHitSE, D.E, 0)   # keeps E: breaks SWMR
    monkeypatch.setattr(rtl, "SNOOP_TABLE", broken)
    with pytest.raises(CosimMismatch):
        for seed in range(20):
            _cosim(Config(**CONFIG), seed, steps=200)


RACES = [f for name, f in inspect.getmembers(test_races, inspect.isfunction) if name.startswith("test_")]


@pytest.mark.parametrize("race", RACES, ids=[f.__name__ for f in RACES])
def test_rtl_replays_race(race, monkeypatch):
    made = []
    orig = scenario_mod.Scenario.__init__

    def record(self, **cfg):
        orig(self, **cfg)
        made.append(self)
    monkeypatch.setattr(scenario_mod.Scenario, "__init__", record)
    race()                                            # the model-only race test, recording its moves
    (s,) = made
    # A held snoop (SNOOP_TABLE says STALL) is counted when the model's host finds the device refusing it;
    # the RTL refuses it by back-pressure, which its shadow does not see as an event: not compared.
    held = {(st.name, snp.name) for (st, snp), (rsp, _, _) in SNOOP_TABLE.items() if rsp is STALL}
    wanted = {pair for pair in s.dev(0).coverage} - held
    system = _cosim(s.cfg, 0, trace=s.trace, window=1024)
    got = set(system.devices[0].coverage)
    assert wanted <= got, f"the replay missed the race's (state, event) pairs {wanted - got}"


# ------------------------------------------------------------------------------------------------
def _bench(dut, body):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()


# (snoop, lines held in S before it, the response): the snoops the DCOH answers without a probe or a
# change, which it streams one per cycle -- a snoop-filter miss, and an S line that stays S
_STREAMED_SNOOPS = {
    "miss": (H2DReqOpcode.SnpInv, False, D2HRspOpcode.RspIHitI),
    "S_SnpData": (H2DReqOpcode.SnpData, True, D2HRspOpcode.RspSHitSE),
    "S_SnpCur": (H2DReqOpcode.SnpCur, True, D2HRspOpcode.RspVHitV),
}


@pytest.mark.parametrize("kind", list(_STREAMED_SNOOPS))
def test_snoop_fast_path_streams_one_per_cycle(kind):
    """32 snoops offered back to back to 8 lines (round robin, so each line has one snoop at a time): each
    answered in the cycle after it was taken, one per cycle sustained, with no probe and no command to the
    caches, and the lines' state left as it was (a second round gets the same answers)."""
    opcode, held, want = _STREAMED_SNOOPS[kind]
    dut = DCOH(caches=2, sf_sets=4, sf_ways=2, tracker=4, credits=64)
    lines = [0x100 + i for i in range(8)]                       # two per set: the 4x2 filter holds them all
    n = 32
    log = {}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.cpu_rsp, dut.cmd):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)
        if held:
            for i, line in enumerate(lines):
                await _fill_line(ctx, dut, line, cache=i % 2)
        cycle, taken, answered, touched = 0, [], [], 0
        i = 0
        while len(answered) < n and cycle < 10 * n:
            if i < n:
                ctx.set(dut.h2d_req.valid, 1)
                ctx.set(dut.h2d_req.p.opcode, opcode)
                ctx.set(dut.h2d_req.p.addr, lines[i % len(lines)])
                ctx.set(dut.h2d_req.p.uqid, i)
            else:
                ctx.set(dut.h2d_req.valid, 0)
            ctx.set(dut.crd_rsp, 1 if answered and answered[-1][0] == cycle - 1 else 0)
            touched += ctx.get(dut.probe.valid) + ctx.get(dut.cmd.valid)
            if ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready):
                taken.append(cycle)
                i += 1
            if ctx.get(dut.d2h_rsp.valid):
                p = ctx.get(dut.d2h_rsp.p)
                assert D2HRspOpcode(p.opcode) is want, (D2HRspOpcode(p.opcode), int(p.uqid))
                answered.append((cycle, int(p.uqid)))
            await ctx.tick()
            cycle += 1
        log.update(taken=taken, answered=answered, touched=touched)

    _bench(dut, body)
    taken, answered = log["taken"], log["answered"]
    assert [u for _, u in answered] == list(range(n))
    assert log["touched"] == 0, "a streamed snoop probed or commanded the caches"
    latency = [a - t for t, (a, _) in zip(taken, answered)]
    assert max(latency) == 1, latency                          # response in the cycle after the snoop
    span = answered[-1][0] - answered[0][0] + 1
    assert span == n, f"{n} snoops ({kind}) took {span} cycles"  # one per cycle sustained


def test_stalled_snoop_is_held_and_later_snoops_wait():
    """RdShared, GO seen, data not (IS_D): a snoop to the line waits for the data; a later snoop to
    another line waits behind it (the snoop channel is in order)."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, credits=64)
    events = []

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)
        ctx.set(dut.cpu_req.valid, 1)                           # load miss -> RdShared, CQID 0
        ctx.set(dut.cpu_req.p.kind, 0)
        ctx.set(dut.cpu_req.p.line, 0x40)
        await ctx.tick().until(dut.d2h_req.valid)
        ctx.set(dut.cpu_req.valid, 0)
        await ctx.tick()
        ctx.set(dut.h2d_rsp.valid, 1)                           # GO-S
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, 1)
        ctx.set(dut.h2d_rsp.p.cqid, 0)
        await ctx.tick().until(dut.h2d_rsp.ready)
        ctx.set(dut.h2d_rsp.valid, 0)
        def snoop(line, uqid):
            ctx.set(dut.h2d_req.valid, 1)
            ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpData)
            ctx.set(dut.h2d_req.p.addr, line)
            ctx.set(dut.h2d_req.p.uqid, uqid)

        async def tick():
            if ctx.get(dut.d2h_rsp.valid):
                events.append(("rsp", int(ctx.get(dut.d2h_rsp.p.uqid)), D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode))))
            if ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready):
                events.append(("taken", int(ctx.get(dut.h2d_req.p.uqid))))
                await ctx.tick()
                ctx.set(dut.h2d_req.valid, 0)
                return True
            await ctx.tick()
            return False

        snoop(0x40, 10)                                         # to the line in IS_D
        while not await tick():
            pass
        snoop(0x41, 11)                                         # a miss, but behind the held one
        for _ in range(30):
            assert not await tick(), "the later snoop passed the held one"
        events.append(("data",))
        ctx.set(dut.h2d_data.valid, 1)
        ctx.set(dut.h2d_data.p.hdr.cqid, 0)
        ctx.set(dut.h2d_data.p.data, 0x1234)
        ctx.set(dut.h2d_data.p.hdr.valid, 1)
        for _ in range(60):
            if ctx.get(dut.h2d_data.valid) and ctx.get(dut.h2d_data.ready):
                await tick()
                ctx.set(dut.h2d_data.valid, 0)
            else:
                await tick()

    _bench(dut, body)
    rsps = [e for e in events if e[0] == "rsp"]
    assert rsps and events.index(("data",)) < events.index(rsps[0]), events  # nothing answered before the data
    assert [r[1] for r in rsps] == [10, 11], events
    assert rsps[0][2] is D2HRspOpcode.RspSHitSE                          # S after the data: RspSHitSE
    assert rsps[1][2] is D2HRspOpcode.RspIHitI


def test_malformed_host_messages_are_counted_not_hung():
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, credits=8)
    got = {}

    async def body(ctx):
        ctx.set(dut.h2d_rsp.valid, 1)                           # GO for a CQID nobody uses
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, 1)
        ctx.set(dut.h2d_rsp.p.cqid, 3)
        await ctx.tick().until(dut.h2d_rsp.ready)
        ctx.set(dut.h2d_rsp.valid, 0)
        await ctx.tick().repeat(3)
        got["first"] = (ctx.get(dut.protocol_errors), ctx.get(dut.last_error))
        ctx.set(dut.h2d_data.valid, 1)                          # data for a CQID beyond the tracker
        ctx.set(dut.h2d_data.p.hdr.cqid, 4000)
        await ctx.tick().until(dut.h2d_data.ready)
        ctx.set(dut.h2d_data.valid, 0)
        await ctx.tick().repeat(3)
        got["second"] = ctx.get(dut.protocol_errors)
        got["idle"] = ctx.get(dut.idle)

    _bench(dut, body)
    assert got["first"] == (1, ErrorKind.UNKNOWN_CQID)
    assert got["second"] == 2 and got["idle"] == 1


@pytest.mark.parametrize("kwargs, name", [
    (dict(caches=0), "caches"), (dict(sf_sets=3), "sf_sets"), (dict(sf_ways=6), "sf_ways"),
    (dict(tracker=1), "tracker"), (dict(tracker=5000), "tracker"), (dict(work=0), "work"),
    (dict(coalesce_block=3), "coalesce_block"), (dict(coalesce_window=-1), "coalesce_window"),
    (dict(credits=0), "credits"), (dict(starvation_bound=0), "starvation_bound"),
    (dict(addr_width=2, sf_sets=8), "addr_width")])
def test_bad_parameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DCOH(**kwargs)


@pytest.mark.slow        # ~30 s; make test converts the whole device (DCOH + link) for the system testbench
def test_converts_to_verilog():
    text = verilog.convert(DCOH(caches=2, sf_sets=8, sf_ways=2, tracker=4), name="dcoh")
    assert "module dcoh" in text


# ------------------------------------------------------------------------------------------------
async def _fill_line(ctx, dut, line, cache=0):
    """A load miss of ``cache`` to ``line`` served by the host (GO-S, then the data): the line is S."""
    ctx.set(dut.cpu_req.valid, 1)
    ctx.set(dut.cpu_req.p.kind, 0)
    ctx.set(dut.cpu_req.p.cache, cache)
    ctx.set(dut.cpu_req.p.line, line)
    await ctx.tick().until(dut.d2h_req.valid)
    cqid = ctx.get(dut.d2h_req.p.cqid)
    ctx.set(dut.cpu_req.valid, 0)
    await ctx.tick()
    ctx.set(dut.h2d_rsp.valid, 1)
    ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
    ctx.set(dut.h2d_rsp.p.rsp_data, 1)                          # GO-S
    ctx.set(dut.h2d_rsp.p.cqid, cqid)
    await ctx.tick().until(dut.h2d_rsp.ready)
    ctx.set(dut.h2d_rsp.valid, 0)
    ctx.set(dut.h2d_data.valid, 1)
    ctx.set(dut.h2d_data.p.hdr.valid, 1)
    ctx.set(dut.h2d_data.p.hdr.cqid, cqid)
    await ctx.tick().until(dut.h2d_data.ready)
    ctx.set(dut.h2d_data.valid, 0)
    await ctx.tick().until(dut.cpu_rsp.valid)
    await ctx.tick().until(dut.idle)


def test_reserved_snoop_opcode_is_counted_and_dropped():
    """A snoop with a reserved opcode (CXL defines SnpData, SnpInv and SnpCur; docs/sources.md §1.4) to a
    line the device holds in S, and one to a line it does not hold: each is counted (RESERVED_SNOOP) and
    dropped, as the link's unpacker drops one, with no response; the S line stays S (a SnpData after
    them gets RspSHitSE) and nothing hangs.  (The snoop table's default row would have freed the line.)"""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, credits=64)
    got = {"rsp": []}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)
        await _fill_line(ctx, dut, 0x40)
        for uqid, line, opcode in ((1, 0x40, 0b111), (2, 0x41, 0b000), (3, 0x40, H2DReqOpcode.SnpData.value)):
            ctx.set(dut.h2d_req.valid, 1)
            ctx.set(dut.h2d_req.p.opcode.as_value(), opcode)
            ctx.set(dut.h2d_req.p.addr, line)
            ctx.set(dut.h2d_req.p.uqid, uqid)
            await ctx.tick().until(dut.h2d_req.ready)
            ctx.set(dut.h2d_req.valid, 0)
            for _ in range(12):
                if ctx.get(dut.d2h_rsp.valid):
                    got["rsp"].append((int(ctx.get(dut.d2h_rsp.p.uqid)), D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode))))
                await ctx.tick()
            if uqid == 2:
                got["errors"] = (ctx.get(dut.protocol_errors), ctx.get(dut.last_error))
        got["idle"] = ctx.get(dut.idle)

    _bench(dut, body)
    assert got["errors"] == (2, ErrorKind.RESERVED_SNOOP), got
    assert got["rsp"] == [(3, D2HRspOpcode.RspSHitSE)], got["rsp"]
    assert got["idle"] == 1


def test_second_snoop_to_a_line_is_counted_and_still_answered():
    """A host that breaks the one-snoop-per-line rule (CXL 3.0 §3.2.5.5, docs/sources.md §1.1): a second
    snoop to a line whose first snoop waits for its probe.  The DCOH names the error (SECOND_SNOOP) and
    answers both snoops, each exactly once, the first first; nothing hangs."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    got = {"rsp": []}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)                            # the cache answers every command at once
        await _fill_line(ctx, dut, 0x40)
        for uqid, op in ((1, H2DReqOpcode.SnpInv), (2, H2DReqOpcode.SnpData)):
            ctx.set(dut.h2d_req.valid, 1)                        # the S copy must be probed: work waits
            ctx.set(dut.h2d_req.p.opcode, op)                    # for the caches to take the probe
            ctx.set(dut.h2d_req.p.addr, 0x40)
            ctx.set(dut.h2d_req.p.uqid, uqid)
            await ctx.tick().until(dut.h2d_req.ready)
            ctx.set(dut.h2d_req.valid, 0)
            for _ in range(8):
                await ctx.tick()
        got["error"] = (ctx.get(dut.protocol_errors), ctx.get(dut.last_error))
        ctx.set(dut.probe.ready, 1)
        for _ in range(200):
            if ctx.get(dut.d2h_rsp.valid):
                got["rsp"].append(int(ctx.get(dut.d2h_rsp.p.uqid)))
            await ctx.tick()
        got["idle"] = ctx.get(dut.idle)
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    assert got["error"] == (1, ErrorKind.SECOND_SNOOP)
    assert got["rsp"] == [1, 2], f"snoop responses by UQID: {got['rsp']}"
    assert got["idle"] == 1 and got["errors"] == 1


def test_snoop_whose_probe_outlasts_its_lines_go_waits_for_the_data():
    """A snoop's work outlasted by the GO to its line: cache 0 holds L in S and stores to it (RdOwn, SM_AD);
    an SnpInv to L must probe the S copy, and the caches hold the probe back while the host's GO-E
    arrives (SM_D, where the snoop table stalls snoops until the data).  The work must wait for the data
    (parked), not answer from SM_D (no response opcode there), and then answer from the state the data
    leaves (M: RspIFwdM with the stored line), exactly once, and nothing hung.  CXL 3.x §3.2.5.2 forbids
    that GO (docs/sources.md §1.7): the DCOH counts it, once (GO_DURING_SNOOP)."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    got = {"rsp": [], "data": []}
    line, value = 0x40, 0xC0FFEE

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)                            # the cache answers every command at once
        await _fill_line(ctx, dut, line)
        ctx.set(dut.cpu_req.valid, 1)                            # store to the S line: RdOwn (SM_AD)
        ctx.set(dut.cpu_req.p.kind, CpuKind.STORE)
        ctx.set(dut.cpu_req.p.cache, 0)
        ctx.set(dut.cpu_req.p.line, line)
        ctx.set(dut.cpu_req.p.data, value)
        await ctx.tick().until(dut.d2h_req.valid)
        assert D2HReqOpcode(ctx.get(dut.d2h_req.p.opcode)) is D2HReqOpcode.RdOwn
        cqid = ctx.get(dut.d2h_req.p.cqid)
        ctx.set(dut.cpu_req.valid, 0)
        await ctx.tick()
        ctx.set(dut.h2d_req.valid, 1)                            # SnpInv: the S copy must be probed
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
        ctx.set(dut.h2d_req.p.addr, line)
        ctx.set(dut.h2d_req.p.uqid, 7)
        await ctx.tick().until(dut.h2d_req.ready)
        ctx.set(dut.h2d_req.valid, 0)
        await ctx.tick().repeat(4)
        ctx.set(dut.h2d_rsp.valid, 1)                            # GO-E while the probe is held back
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, 2)
        ctx.set(dut.h2d_rsp.p.cqid, cqid)
        await ctx.tick().until(dut.h2d_rsp.ready)
        ctx.set(dut.h2d_rsp.valid, 0)
        ctx.set(dut.probe.ready, 1)                              # the caches take the probe now
        for _ in range(60):
            if ctx.get(dut.d2h_rsp.valid):
                got["rsp"].append(("before data", int(ctx.get(dut.d2h_rsp.p.uqid)),
                                   ctx.get(dut.d2h_rsp.p.opcode.as_value())))    # (may be no opcode)
            await ctx.tick()
        # the store leaves the cache's copy M (the DCOH's entry says E): the INV that takes it finds it dirty
        ctx.set(dut.cmd_rsp.p.dirty, 1)
        ctx.set(dut.cmd_rsp.p.data, value)
        ctx.set(dut.h2d_data.valid, 1)                           # the data: SM_D -> E, the store done
        ctx.set(dut.h2d_data.p.hdr.valid, 1)
        ctx.set(dut.h2d_data.p.hdr.cqid, cqid)
        ctx.set(dut.h2d_data.p.data, 0x1234)
        for _ in range(200):
            if ctx.get(dut.h2d_data.valid) and ctx.get(dut.h2d_data.ready):
                await ctx.tick()
                ctx.set(dut.h2d_data.valid, 0)
                continue
            if ctx.get(dut.d2h_rsp.valid):
                got["rsp"].append(("after data", int(ctx.get(dut.d2h_rsp.p.uqid)),
                                   D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode))))
            if ctx.get(dut.d2h_data.valid):
                got["data"].append((int(ctx.get(dut.d2h_data.p.hdr.uqid)), int(ctx.get(dut.d2h_data.p.data))))
            await ctx.tick()
        got["idle"] = ctx.get(dut.idle)
        got["errors"] = (ctx.get(dut.protocol_errors), ctx.get(dut.last_error))

    _bench(dut, body)
    assert got["rsp"] == [("after data", 7, D2HRspOpcode.RspIFwdM)], got["rsp"]
    assert got["data"] == [(7, value)], got["data"]
    assert got["idle"] == 1 and got["errors"] == (1, ErrorKind.GO_DURING_SNOOP), got


def test_rescan_back_invalidations_with_no_free_coalescer_group_finish():
    """A rescan that must back-invalidate three victims (in three blocks) while the coalescer has one group,
    and the caches take one probe message at a time, the next only once the engine has dispatched the work
    and the rescan after it (slow caches).  Three snoops to three E lines of one block leave
    their work in the whole work table (3 entries); three loads, each needing a victim of the full 8-way
    set, wait for a work entry; when the caches take the snoops' message the work frees all three entries
    and the rescan after it back-invalidates three victims.  All must finish (tests/dcoh_liveness.py's
    oracle: accesses done, snoops answered once, everything drained)."""
    import dcoh_liveness as live
    dut = live.make_dut(caches=4, sf_sets=2, sf_ways=4, tracker=8, work=3, window=32, block=8, groups=1)
    fills = [1, 3, 5, 8, 16, 24, 32]      # set 1: block 0 (three lines); set 0 (full): blocks 1, 2, 3, 4
    script = {60 * i: [("cpu", 0, "load", line, 1)] for i, line in enumerate(fills)}   # RdAny, granted E
    script[500] = [("hold_probes", 200)] + [("snoop", H2DReqOpcode.SnpData, line) for line in (1, 3, 5)]
    script[560] = [("cpu", k, "load", line, 0) for k, line in ((1, 40), (2, 48), (3, 56))]
    stats = {}

    async def body(ctx):
        await live.run_liveness(ctx, dut, 0, cycles=800, snoop_rate=0, cpu_rate=0, host_delay=2,
                                probe_delay=0, probe_rule="one_at_a_time", drain=3000, script=script,
                                rdany_grant="E", stats=stats)
    _bench(dut, body)
    assert stats["snoops"] == 3


def _snoop_miss_answered_while(hold_back, cycles=40, check=None):
    """Line 0x40 is S in cache 0; then ``hold_back(ctx)`` makes the caches hold something back, and a snoop to
    line 0x80, which no cache, request or work holds (a snoop-filter miss), must be answered within
    ``cycles`` cycles.  Returns the cycles it took (None: not answered); ``check(ctx, dut)`` is called in
    the cycle the response is offered."""
    dut = DCOH(caches=2, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, coalesce_groups=1,
               credits=64)
    got = {}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)
        await _fill_line(ctx, dut, 0x40)
        await hold_back(ctx, dut)
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
        ctx.set(dut.h2d_req.p.addr, 0x80)
        ctx.set(dut.h2d_req.p.uqid, 7)
        for t in range(cycles):
            taken = ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready)
            if ctx.get(dut.d2h_rsp.valid) and ctx.get(dut.d2h_rsp.p.uqid) == 7:
                got["t"] = t
                if check is not None:
                    check(ctx, dut)
                return
            await ctx.tick()
            if taken:
                ctx.set(dut.h2d_req.valid, 0)

    _bench(dut, body)
    return got.get("t")


def test_snoop_miss_answered_while_the_caches_hold_back_probes():
    """The caches do not take probe messages: two snoops to the S line 0x40's block need probes, the second
    finds the coalescer's one group full.  The engine does not wait for the coalescer (its probes queue in
    front of it), so a later snoop-filter miss is still answered."""
    async def hold(ctx, dut):
        ctx.set(dut.probe.ready, 0)
        for uqid, line in ((1, 0x40), (2, 0x42)):
            if line == 0x42:
                await _fill_line(ctx, dut, 0x42)
            ctx.set(dut.h2d_req.valid, 1)
            ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
            ctx.set(dut.h2d_req.p.addr, line)
            ctx.set(dut.h2d_req.p.uqid, uqid)
            await ctx.tick().until(dut.h2d_req.ready)
            ctx.set(dut.h2d_req.valid, 0)
            await ctx.tick().repeat(10)
        assert ctx.get(dut.probe.valid) and not ctx.get(dut.coal.probes.ready), "the coalescer is not full"
    assert _snoop_miss_answered_while(hold) is not None


async def _load_filled_from_cache_0(ctx, dut):
    """Cache 1 loads line 0x40, which cache 0 holds in S: an internal fill (a ``cmd`` TO_S to cache 0,
    its answer, then ``cpu_rsp`` to cache 1)."""
    ctx.set(dut.cpu_req.valid, 1)
    ctx.set(dut.cpu_req.p.kind, 0)
    ctx.set(dut.cpu_req.p.cache, 1)
    ctx.set(dut.cpu_req.p.line, 0x40)
    await ctx.tick().until(dut.cpu_req.ready)
    ctx.set(dut.cpu_req.valid, 0)


@pytest.mark.parametrize("held", ["cmd", "cmd_rsp", "cpu_rsp"])
def test_snoop_miss_answered_while_one_cache_holds_back_a_handshake(held):
    """The engine waits in the middle of an internal fill for a cache that holds back the command, its
    answer or the completion (``held``).  A snoop-filter miss needs no cache: the snoop side path answers
    it (RspIHitI) within 3 cycles, while the cache still holds back and the engine is still busy."""
    got = {}

    async def hold(ctx, dut):
        port = {"cmd": dut.cmd.ready, "cmd_rsp": dut.cmd_rsp.valid, "cpu_rsp": dut.cpu_rsp.ready}[held]
        ctx.set(port, 0)
        await _load_filled_from_cache_0(ctx, dut)
        waits_on = {"cmd": dut.cmd.valid, "cmd_rsp": dut.cmd_rsp.ready, "cpu_rsp": dut.cpu_rsp.valid}[held]
        await ctx.tick().until(waits_on)
        got["port"] = port
    t = _snoop_miss_answered_while(hold, check=lambda ctx, dut: got.setdefault(
        "answer", (ctx.get(dut.d2h_rsp.p.opcode), ctx.get(got["port"]), ctx.get(dut.idle))))
    assert t is not None and t <= 3, f"the snoop-filter miss waited {t} cycles for a cache"
    assert got["answer"] == (D2HRspOpcode.RspIHitI, 0, 0), \
        f"(response, {held} still held, engine idle): {got['answer']}"


async def _snoop_held_then_answered(ctx, dut, line, release, why, not_taken=False, hold=20, cycles=60, uqid=9):
    """Offer a SnpData to ``line``: for ``hold`` cycles it must not be answered (``why`` names the reason;
    ``not_taken``: nor taken); then ``release(ctx)`` lets the caches go.  Returns the opcode of its response
    within ``cycles`` more cycles (None: none)."""
    ctx.set(dut.h2d_req.valid, 1)
    ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpData)
    ctx.set(dut.h2d_req.p.addr, line)
    ctx.set(dut.h2d_req.p.uqid, uqid)
    for _ in range(hold):
        if not_taken:
            assert not ctx.get(dut.h2d_req.ready), f"a snoop {why} was taken"
        assert not ctx.get(dut.d2h_rsp.valid), f"a snoop {why} was answered"
        await ctx.tick()
    release(ctx)
    rsp = None
    for _ in range(cycles):
        taken = ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready)
        if ctx.get(dut.d2h_rsp.valid) and ctx.get(dut.d2h_rsp.p.uqid) == uqid:
            rsp = ctx.get(dut.d2h_rsp.p.opcode)
        await ctx.tick()
        if taken:
            ctx.set(dut.h2d_req.valid, 0)
    return rsp


def test_snoop_to_the_line_of_a_waiting_eviction_waits_for_it():
    """Cache 0 evicts its S line 0x40 and holds back the command that takes the copy out.  A SnpData to
    0x40 would be answered RspSHitSE from the snoop filter, which still says S; but the eviction is
    already taken whole by a shadow model (the DCOH dispatched it), where the line is SI_A and the answer
    RspIHitI.  So the side path must leave a snoop to the waiting event's line to the engine: not taken
    while the cache holds back, answered RspIHitI after the eviction."""
    dut = DCOH(caches=2, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, coalesce_groups=1,
               credits=64)
    got = {}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)
        await _fill_line(ctx, dut, 0x40)
        ctx.set(dut.cmd.ready, 0)
        ctx.set(dut.cpu_req.valid, 1)
        ctx.set(dut.cpu_req.p.kind, CpuKind.EVICT)
        ctx.set(dut.cpu_req.p.cache, 0)
        ctx.set(dut.cpu_req.p.line, 0x40)
        await ctx.tick().until(dut.cpu_req.ready)
        ctx.set(dut.cpu_req.valid, 0)
        await ctx.tick().until(dut.cmd.valid)
        got["rsp"] = await _snoop_held_then_answered(ctx, dut, 0x40, lambda ctx: ctx.set(dut.cmd.ready, 1),
                                                     "to the waiting eviction's line", not_taken=True, cycles=40)

    _bench(dut, body)
    assert got.get("rsp") == SNOOP_TABLE[(DevState.SI_A, H2DReqOpcode.SnpData)][0] == D2HRspOpcode.RspIHitI


async def _wait_for(ctx, signal, what, cycles=100):
    """Tick until ``signal`` is high (looked at before each tick), at most ``cycles`` times."""
    for _ in range(cycles):
        if ctx.get(signal):
            return
        await ctx.tick()
    raise AssertionError(f"no {what} within {cycles} cycles")


async def _access(ctx, dut, cache, kind, line):
    """Offer a CPU access of ``cache`` until the DCOH takes it."""
    ctx.set(dut.cpu_req.valid, 1)
    ctx.set(dut.cpu_req.p.kind, kind)
    ctx.set(dut.cpu_req.p.cache, cache)
    ctx.set(dut.cpu_req.p.line, line)
    await _wait_for(ctx, dut.cpu_req.ready, f"cpu_req of cache {cache}")
    await ctx.tick()
    ctx.set(dut.cpu_req.valid, 0)


async def _both_cqids_taken(ctx, dut, held_line, held_by):
    """Every port ready and the caches answering commands at once; cache ``held_by`` gets ``held_line`` in
    S; then caches 0 and 1 load 0x41 and 0x42 (sets 1 and 2 of a 4-set filter: no victim needed), which
    takes both CQIDs of a 2-entry tracker.  Returns the two loads' CQIDs."""
    for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
        ctx.set(s.ready, 1)
    ctx.set(dut.cmd_rsp.valid, 1)
    await _fill_line(ctx, dut, held_line, cache=held_by)
    cqids = []
    for cache, line in ((0, 0x41), (1, 0x42)):
        await _access(ctx, dut, cache, CpuKind.LOAD, line)
        await _wait_for(ctx, dut.d2h_req.valid, f"D2H Req of cache {cache}'s load")
        cqids.append(ctx.get(dut.d2h_req.p.cqid))
        await ctx.tick()
    return cqids


async def _complete_load(ctx, dut, cqid):
    """The host's GO-S, then the data, for the load at ``cqid``."""
    ctx.set(dut.h2d_rsp.valid, 1)
    ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
    ctx.set(dut.h2d_rsp.p.rsp_data, 1)                      # GO-S
    ctx.set(dut.h2d_rsp.p.cqid, cqid)
    await _wait_for(ctx, dut.h2d_rsp.ready, "GO taken")
    await ctx.tick()
    ctx.set(dut.h2d_rsp.valid, 0)
    ctx.set(dut.h2d_data.valid, 1)
    ctx.set(dut.h2d_data.p.hdr.valid, 1)
    ctx.set(dut.h2d_data.p.hdr.cqid, cqid)
    await _wait_for(ctx, dut.h2d_data.ready, "data taken")
    await ctx.tick()
    ctx.set(dut.h2d_data.valid, 0)


def test_snoop_answered_while_an_access_waits_for_the_rescan_after_the_event():
    """The rescan after an event is a step of its own (``dispatch`` SCAN), and the side path answers
    snoops before it.  Cache 2 evicts its S line 0x80 while caches 0 and 1 hold both CQIDs: the eviction
    waits, and so does cache 3's load after it.  A GO-S and the data complete cache 0's load; its cpu_rsp
    is held back, so the engine waits in the completion with the eviction still waiting for the rescan.
    A SnpData to 0x80 offered then is answered at once, RspSHitSE from the line as it is (S, the eviction
    not yet issued), and ``dispatch`` shows it (SNOOP) before the completion's SCAN: a shadow model that
    rescans at SCAN answers it alike (tb/system_tb.py).  Once the cpu_rsp goes, the rescan issues the
    eviction of the S line, CleanEvictNoData.  Without the SCAN step the side path would have to leave
    such snoops alone (it did: the ``q_len`` condition), and a SCAN shown before the snoop, or none, fails
    the order checked here."""
    dut = DCOH(caches=4, sf_sets=4, sf_ways=2, tracker=2, work=2, coalesce_window=0, coalesce_groups=1,
               credits=64)
    got = {"codes": [], "reqs": []}

    async def body(ctx):
        cqids = await _both_cqids_taken(ctx, dut, 0x80, held_by=2)
        await _access(ctx, dut, 2, CpuKind.EVICT, 0x80)
        await _access(ctx, dut, 3, CpuKind.LOAD, 0x43)
        await ctx.tick().repeat(10)
        assert ctx.get(dut.q_len) == 2 and not ctx.get(dut.d2h_req.valid), "both accesses should wait for a CQID"
        ctx.set(dut.cpu_rsp.ready, 0)
        await _complete_load(ctx, dut, cqids[0])
        await _wait_for(ctx, dut.cpu_rsp.valid, "cpu_rsp of the completed load")
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpData)
        ctx.set(dut.h2d_req.p.addr, 0x80)
        ctx.set(dut.h2d_req.p.uqid, 9)
        for cycle in range(60):
            if cycle == 20:
                assert "rsp" in got, "the snoop was not answered while the completion's cpu_rsp was held"
                ctx.set(dut.cpu_rsp.ready, 1)
            code = ctx.get(dut.dispatch)
            if ctx.get(dut.scan_before):
                got["codes"].append(Dispatch.SCAN)
            if code != Dispatch.NONE:
                got["codes"].append(code)
            if ctx.get(dut.d2h_rsp.valid) and ctx.get(dut.d2h_rsp.p.uqid) == 9:
                got.setdefault("rsp", ctx.get(dut.d2h_rsp.p.opcode))
            if ctx.get(dut.d2h_req.valid):
                got["reqs"].append((ctx.get(dut.d2h_req.p.opcode), ctx.get(dut.d2h_req.p.addr)))
            taken = ctx.get(dut.h2d_req.valid) and ctx.get(dut.h2d_req.ready)
            await ctx.tick()
            if taken:
                ctx.set(dut.h2d_req.valid, 0)

    _bench(dut, body)
    assert got.get("rsp") == SNOOP_TABLE[(DevState.S, H2DReqOpcode.SnpData)][0] == D2HRspOpcode.RspSHitSE, got
    assert got["codes"][:2] == [Dispatch.SNOOP, Dispatch.SCAN], \
        f"dispatch after the snoop was offered: {[c.name for c in got['codes']]}"
    assert (D2HReqOpcode.CleanEvictNoData, 0x80) in got["reqs"], f"D2H requests after the snoop: {got['reqs']}"


@pytest.mark.parametrize("data_first", [True, False], ids=["data_first", "data_last"])
def test_go_and_snoop_offered_in_one_cycle_take_the_go_first(data_first):
    """CXL 3.x §3.2.5.2 (docs/sources.md §1.7): a GO and a snoop to its line that reach the DCOH in the same
    cycle (a sender that puts them in one flit; this project's packer no longer does) are taken GO first:
    cache 0's load gets GO-E, and the SnpInv behind it finds the line E and takes it (RspIHitSE), where a
    snoop taken first would find nothing (RspIHitI)."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    got = {}

    async def body(ctx):
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)                            # the cache answers every command at once
        ctx.set(dut.cpu_req.valid, 1)
        ctx.set(dut.cpu_req.p.kind, 0)                           # a load miss of cache 0
        ctx.set(dut.cpu_req.p.line, 0x40)
        await ctx.tick().until(dut.d2h_req.valid)
        cqid = ctx.get(dut.d2h_req.p.cqid)
        ctx.set(dut.cpu_req.valid, 0)
        await ctx.tick()

        async def data():
            ctx.set(dut.h2d_data.valid, 1)
            ctx.set(dut.h2d_data.p.hdr.valid, 1)
            ctx.set(dut.h2d_data.p.hdr.cqid, cqid)
            await ctx.tick().until(dut.h2d_data.ready)
            ctx.set(dut.h2d_data.valid, 0)
        if data_first:
            await data()
        ctx.set(dut.h2d_rsp.valid, 1)
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, 2)                       # GO-E
        ctx.set(dut.h2d_rsp.p.cqid, cqid)
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
        ctx.set(dut.h2d_req.p.addr, 0x40)
        ctx.set(dut.h2d_req.p.uqid, 5)
        rsp_taken = req_taken = None
        for cycle in range(40):
            _, _, rsp_ready, req_ready = await ctx.tick().sample(dut.h2d_rsp.ready, dut.h2d_req.ready)
            if rsp_ready and rsp_taken is None:
                rsp_taken = cycle
                ctx.set(dut.h2d_rsp.valid, 0)
            if req_ready and req_taken is None:
                req_taken = cycle
                ctx.set(dut.h2d_req.valid, 0)
            if rsp_taken is not None and req_taken is not None:
                break
        got["taken"] = (rsp_taken, req_taken)
        if not data_first:
            await data()
        for _ in range(100):
            if ctx.get(dut.d2h_rsp.valid):
                got["rsp"] = (D2HRspOpcode(ctx.get(dut.d2h_rsp.p.opcode)), ctx.get(dut.d2h_rsp.p.uqid))
            await ctx.tick()
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    rsp_taken, req_taken = got["taken"]
    assert rsp_taken is not None and req_taken is not None and rsp_taken <= req_taken, got
    assert got.get("rsp") == (D2HRspOpcode.RspIHitSE, 5), got
    assert got["errors"] == 0, got


@pytest.mark.parametrize("go", [1, 2], ids=["GO-S", "GO-E"])
def test_data_behind_its_go_is_taken_in_the_gos_last_cycle(go):
    """Chained dispatch (hdl/dcoh/dispatch.py, ``chain``): a load's GO and its Data offered in the same cycle.
    The GO is taken first and moves the request without completing it; the Data is taken in the GO's
    last cycle, one cycle after the GO (no IDLE cycle between them), judged on the state the GO writes at
    that cycle's edge (forwarded): the fill installs what the GO granted (S or E) with the host's line,
    and nothing is counted as a protocol error.  Judged on the tracker's register instead, the Data finds
    the state before the GO and the fill goes wrong (or the request never completes)."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    line, value = 0x40, 0x1234_5678_9ABC
    got = {}

    async def body(ctx):
        drv = _Driver(ctx, dut, got)
        await drv.access(0, CpuKind.LOAD, line)                  # a load miss of cache 0
        cqid = await drv.cqid_of(line)
        drv.offer_go(cqid, go)
        drv.offer_data(cqid, value)
        taken = {}
        for cycle in range(60):
            rsp_t = ctx.get(dut.h2d_rsp.valid) and ctx.get(dut.h2d_rsp.ready)
            data_t = ctx.get(dut.h2d_data.valid) and ctx.get(dut.h2d_data.ready)
            if ctx.get(dut.cpu_rsp.valid):
                got["fill"] = (ctx.get(dut.cpu_rsp.p.state), ctx.get(dut.cpu_rsp.p.data))
            await ctx.tick()
            if rsp_t:
                taken["rsp"] = cycle
                ctx.set(dut.h2d_rsp.valid, 0)
            if data_t:
                taken["data"] = cycle
                ctx.set(dut.h2d_data.valid, 0)
            if "fill" in got:
                break
        got["taken"] = taken
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    assert got["taken"].get("data") == got["taken"].get("rsp", -9) + 1, got
    assert got.get("fill") == ({1: CacheState.S, 2: CacheState.E}[go], value), got
    assert got["errors"] == 0, got


@pytest.mark.parametrize("go", [1, 2], ids=["GO-S", "GO-E"])
def test_go_behind_its_data_waits_for_the_datas_write(go):
    """Chained dispatch, the other order: a load's Data comes alone, and its GO is offered in the Data's
    last cycle, when the Data writes the request's state and its line into the buffer.  That GO must
    not be taken in that cycle (its verdict and the line it completes with would be read before the
    Data's writes): it is taken in the next one, and the fill installs what it granted with the line."""
    dut = DCOH(caches=1, sf_sets=4, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    line, value = 0x40, 0x0BAD_CAFE_F00D
    got = {}

    async def body(ctx):
        drv = _Driver(ctx, dut, got)
        await drv.access(0, CpuKind.LOAD, line)                  # a load miss of cache 0
        cqid = await drv.cqid_of(line)
        drv.offer_data(cqid, value)
        await ctx.tick().until(dut.h2d_data.ready)
        ctx.set(dut.h2d_data.valid, 0)
        ctx.set(dut.h2d_rsp.valid, 1)                            # offered in the Data's last cycle
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, go)
        ctx.set(dut.h2d_rsp.p.cqid, cqid)
        for cycle in range(60):
            if ctx.get(dut.h2d_rsp.valid) and ctx.get(dut.h2d_rsp.ready):
                got["rsp"] = cycle
            if ctx.get(dut.cpu_rsp.valid):
                got["fill"] = (ctx.get(dut.cpu_rsp.p.state), ctx.get(dut.cpu_rsp.p.data))
            await ctx.tick()
            if "rsp" in got:
                ctx.set(dut.h2d_rsp.valid, 0)
            if "fill" in got:
                break
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    assert got.get("rsp") == 1, got                 # not in cycle 0, the Data's last cycle
    assert got.get("fill") == ({1: CacheState.S, 2: CacheState.E}[go], value), got
    assert got["errors"] == 0, got



class _Driver:
    """Host and cache sides of a bare DCOH for directed tests, one cycle per ``step()``: every output
    always ready, every command answered at once, and each D2H Req (opcode, line, CQID) and probe
    (block, lines) the DCOH offers recorded in ``got``."""

    def __init__(self, ctx, dut, got):
        self.ctx, self.dut, self.got = ctx, dut, got
        got.setdefault("reqs", [])
        got.setdefault("probes", [])
        for s in (dut.d2h_req, dut.d2h_rsp, dut.d2h_data, dut.cpu_rsp, dut.cmd, dut.probe):
            ctx.set(s.ready, 1)
        ctx.set(dut.cmd_rsp.valid, 1)

    async def step(self):
        ctx, dut, got = self.ctx, self.dut, self.got
        if ctx.get(dut.d2h_req.valid):
            got["reqs"].append((D2HReqOpcode(ctx.get(dut.d2h_req.p.opcode)), ctx.get(dut.d2h_req.p.addr),
                                ctx.get(dut.d2h_req.p.cqid)))
        if ctx.get(dut.probe.valid):
            got["probes"].append((ctx.get(dut.probe.p.block), ctx.get(dut.probe.p.lines)))
        await ctx.tick()

    def offer(self, k, kind, line):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.cpu_req.valid, 1)
        ctx.set(dut.cpu_req.p.kind, kind)
        ctx.set(dut.cpu_req.p.cache, k)
        ctx.set(dut.cpu_req.p.line, line)

    def offer_go(self, cqid, go):
        """Offer a GO (``go``: its GOState code) for ``cqid`` on h2d_rsp."""
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.h2d_rsp.valid, 1)
        ctx.set(dut.h2d_rsp.p.opcode, H2DRspOpcode.GO)
        ctx.set(dut.h2d_rsp.p.rsp_data, go)
        ctx.set(dut.h2d_rsp.p.cqid, cqid)

    def offer_data(self, cqid, value=0):
        """Offer ``cqid``'s Data (the line ``value``) on h2d_data."""
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.h2d_data.valid, 1)
        ctx.set(dut.h2d_data.p.hdr.valid, 1)
        ctx.set(dut.h2d_data.p.hdr.cqid, cqid)
        ctx.set(dut.h2d_data.p.data, value)

    async def access(self, k, kind, line):
        """Cache ``k``'s access, offered until the DCOH takes it (at most 50 cycles)."""
        self.offer(k, kind, line)
        for _ in range(50):
            if self.ctx.get(self.dut.cpu_req.ready):
                break
            await self.step()
        else:
            raise AssertionError(f"cache {k}'s {kind.name} of {line:#x} not taken in 50 cycles: {self.got}")
        await self.step()
        self.ctx.set(self.dut.cpu_req.valid, 0)

    async def cqid_of(self, line):
        """The CQID of the D2H Req for ``line`` (waiting for it up to 20 cycles)."""
        for _ in range(20):
            found = [c for _, addr, c in self.got["reqs"] if addr == line]
            if found:
                return found[-1]
            await self.step()
        raise AssertionError(f"no D2H Req for {line:#x}: {self.got}")

    async def go_s_and_data(self, cqid, then=None):
        """GO-S and Data for ``cqid``, offered together; ``then()`` runs in the cycle after the Data is
        taken (the Data's last cycle)."""
        ctx, dut = self.ctx, self.dut
        self.offer_go(cqid, 1)
        self.offer_data(cqid)
        for _ in range(20):
            rsp_t = ctx.get(dut.h2d_rsp.valid) and ctx.get(dut.h2d_rsp.ready)
            data_t = ctx.get(dut.h2d_data.valid) and ctx.get(dut.h2d_data.ready)
            await self.step()
            if rsp_t:
                ctx.set(dut.h2d_rsp.valid, 0)
            if data_t:
                ctx.set(dut.h2d_data.valid, 0)
                if then is not None:
                    then()
                return
        raise AssertionError(f"CQID {cqid}'s Data not taken: {self.got}")


def _one_set_with_a_busy_way(ctx, dut, got):
    """One set of two ways (``sf_sets=1, sf_ways=2``): cache 1 loads A (way 0, filled S) and starts its
    upgrade (RdOwn, never answered: A stays busy), then cache 0 loads B (way 1).  Returns the driver."""
    async def run():
        drv = _Driver(ctx, dut, got)
        await drv.access(1, CpuKind.LOAD, _A)
        await drv.go_s_and_data(await drv.cqid_of(_A))
        for _ in range(10):
            await drv.step()
        await drv.access(1, CpuKind.STORE, _A)
        await drv.access(0, CpuKind.LOAD, _B)
        return drv
    return run()


_A, _B, _C = 0x10, 0x20, 0x30


def test_way_allocated_in_a_chained_cycle_is_busy_for_the_next_lookup():
    """Chained dispatch: a CPU access looked up in the cycle where the access before it allocates a
    snoop-filter way must count that way as busy (its request is in flight).  One set of two ways: way 0
    holds A, whose upgrade is pending (busy); cache 0's load of B takes the free way 1, and in that same
    cycle cache 2's load of C is taken and looked up: no way is free, the pseudo-LRU victim (way 0, as
    way 1 was just touched) is busy, so C must wait (the model's ``_way_for``: every way busy), not
    back-invalidate B's placeholder in way 1, which the tracker registers do not show as busy yet."""
    dut = DCOH(caches=3, sf_sets=1, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    got = {}

    async def body(ctx):
        drv = await _one_set_with_a_busy_way(ctx, dut, got)       # B's access is taken last ...
        await drv.access(2, CpuKind.LOAD, _C)                     # ... C offered right behind it
        for _ in range(30):
            await drv.step()
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    lines = [(op, addr) for op, addr, _ in got["reqs"]]
    assert lines == [(D2HReqOpcode.RdShared, _A), (D2HReqOpcode.RdOwn, _A), (D2HReqOpcode.RdShared, _B)], got
    assert got["probes"] == [], got                              # nothing back-invalidated
    assert got["errors"] == 0, got


def test_request_completing_in_a_chained_cycle_is_not_busy_for_the_next_lookup():
    """Chained dispatch: a load whose Data completes it fills the cache and, in that same cycle, a CPU
    access is taken and looked up.  The completed request's tracker entry is freed at that cycle's edge;
    for the lookup it is no longer busy (the model completed it first).  One set of two ways: way 0 holds
    A, whose upgrade is pending (busy); way 1 holds B, whose load completes now; cache 2's load of C
    then finds no free way, the pseudo-LRU victim A busy, and must back-invalidate B (a probe to cache
    0), not wait as if every way were busy."""
    dut = DCOH(caches=3, sf_sets=1, sf_ways=2, tracker=4, work=2, coalesce_window=0, credits=64)
    got = {}

    async def body(ctx):
        drv = await _one_set_with_a_busy_way(ctx, dut, got)
        for _ in range(10):
            await drv.step()
        # C offered in B's Data's last cycle (the cycle that completes B)
        await drv.go_s_and_data(await drv.cqid_of(_B), then=lambda: drv.offer(2, CpuKind.LOAD, _C))
        for _ in range(40):
            taken = ctx.get(dut.cpu_req.valid) and ctx.get(dut.cpu_req.ready)
            await drv.step()
            if taken:
                ctx.set(dut.cpu_req.valid, 0)
        got["errors"] = ctx.get(dut.protocol_errors)

    _bench(dut, body)
    # the coalescer's message names block B // 4 (coalesce_block 4) and B's bit in it
    assert (_B >> 2, 1 << (_B & 3)) in got["probes"], got
    assert got["errors"] == 0, got


def test_a_rescan_first_tries_only_the_accesses_an_event_woke():
    """The wake-up rule per access (docs/dcoh.md, "Waking the waiting accesses"): a failed try records
    what the access waits for, and the rescan after an event tries first only the accesses that event
    woke.  Both CQIDs are held by loads of 0x41 and 0x42; cache 2's store to 0x41 waits for that line
    (set 1), cache 3's load of 0x46 for a CQID.  A SnpInv probes cache 2's S copy of 0x45 (set 1): the
    end of its work frees a line of set 1, which wakes the store (tried again: it fails, 0x41 is still
    busy) but not the load, as no CQID was freed (not looked up).  Then cache 1's load completes: the
    CQID it frees wakes the load, which issues."""
    dut = DCOH(caches=4, sf_sets=4, sf_ways=2, tracker=2, work=2, coalesce_window=0, coalesce_groups=1,
               credits=64)
    looked = []

    async def watch(ctx):
        async for _clk, _rst, valid, ready, line in ctx.tick().sample(
                dut.sf.lookup.valid, dut.sf.lookup.ready, dut.sf.lookup.p.line):
            if valid and ready:
                looked.append(line)

    async def body(ctx):
        cqids = await _both_cqids_taken(ctx, dut, 0x45, held_by=2)
        await _access(ctx, dut, 2, CpuKind.STORE, 0x41)
        await _access(ctx, dut, 3, CpuKind.LOAD, 0x46)
        await _wait_for(ctx, dut.idle, "the engine idle with two accesses waiting")
        assert ctx.get(dut.q_len) == 2 and ctx.get(dut.woken) == 0, "both accesses should have failed their try"
        looked.clear()
        ctx.set(dut.h2d_req.valid, 1)
        ctx.set(dut.h2d_req.p.opcode, H2DReqOpcode.SnpInv)
        ctx.set(dut.h2d_req.p.addr, 0x45)
        ctx.set(dut.h2d_req.p.uqid, 5)
        await _wait_for(ctx, dut.h2d_req.ready, "the SnpInv taken")
        await ctx.tick()
        ctx.set(dut.h2d_req.valid, 0)
        await _wait_for(ctx, dut.d2h_rsp.valid, "the SnpInv's answer")
        await ctx.tick().repeat(3)
        await _wait_for(ctx, dut.idle, "the engine idle after the snoop's rescan")
        assert looked.count(0x41) == 1, f"the store waiting for its line's set was not tried once: {looked}"
        assert 0x46 not in looked, f"the load waiting for a CQID was tried although none was freed: {looked}"
        assert ctx.get(dut.q_len) == 2
        await _complete_load(ctx, dut, cqids[1])
        await _wait_for(ctx, dut.d2h_req.valid, "the waiting load's D2H Req after the CQID was freed")
        assert ctx.get(dut.d2h_req.p.addr) == 0x46

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(watch)
    sim.add_testbench(body)
    sim.run()
