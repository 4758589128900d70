"""The DCOH's tracker and work table (hdl/dcoh/tracker.py, hdl/dcoh/work_table.py) against a plain Python
model of their write ports, and each of their Asserts made to fire by a write that breaks it."""

import pytest
from hypothesis import given, strategies as st

from rtl_sim import run_clocked

from cxl.messages import D2HReqOpcode as Req, H2DReqOpcode as Snp
from hdl.dcoh.tracker import TrackerTable, tracker_entry
from hdl.dcoh.work_table import WorkTable, work_entry

ENTRIES = 4
TRK = tracker_entry(caches=2, addr_width=8, way_bits=2, state_bits=4)
WRK = work_entry(addr_width=8, way_bits=2)
SNOOPS = list(Snp)


def _idle(ctx, ports):
    for p in ports:
        ctx.set(p, 0)


def _check_entries(ctx, dut, fields, model):
    """Every entry that is valid in the model or in the RTL has the model's fields (a freed entry's other
    fields are don't-cares)."""
    for i in range(ENTRIES):
        e = dut.entries[i]
        got = {k: ctx.get(getattr(e, k)) for k in fields}
        if model[i]["valid"] or got["valid"]:
            assert got == model[i], (i, got, model[i])


# ------------------------------------------------------------------------------------------------ tracker
TRACKER_FIELDS = ("valid", "line", "state", "granted_e", "way")


@given(st.data())
def test_tracker_matches_its_model(data):
    """Random legal cycles: a new request in a free entry, a state (with or without a grant) and/or a
    free of a live one, in the same cycle where the ports allow it."""
    dut = TrackerTable(ENTRIES, TRK)
    steps = data.draw(st.lists(st.tuples(st.integers(0, 2 ** 16 - 1), st.booleans(), st.booleans(),
                                         st.booleans()), max_size=40), label="steps")

    async def bench(ctx):
        model = [dict(valid=0, line=0, state=0, granted_e=0, way=0) for _ in range(ENTRIES)]
        for r, do_new, do_set, do_free in steps:
            live = [i for i in range(ENTRIES) if model[i]["valid"]]
            free = [i for i in range(ENTRIES) if not model[i]["valid"]]
            _idle(ctx, (dut.new.valid, dut.set.valid, dut.free.valid, dut.set.grant))
            new_i = free[r % len(free)] if do_new and free else None
            set_i = live[(r >> 2) % len(live)] if do_set and live else None
            free_i = live[(r >> 4) % len(live)] if do_free and live else None
            if new_i is not None:
                line, state, way = (r >> 3) & 0xFF, (r >> 6) & 0xF, (r >> 10) & 3
                ctx.set(dut.new.valid, 1)
                ctx.set(dut.new.idx, new_i)
                ctx.set(dut.new.entry, {"valid": 1, "op": Req.RdShared, "line": line, "state": state, "cache": 0,
                                        "cpu": 1, "store": 0, "granted_e": 0, "has_way": 1, "way": way})
            if set_i is not None:
                set_to, grant, ge = (r >> 8) & 0xF, (r >> 12) & 1, (r >> 13) & 1
                ctx.set(dut.set.valid, 1)
                ctx.set(dut.set.idx, set_i)
                ctx.set(dut.set.state, set_to)
                ctx.set(dut.set.grant, grant)
                ctx.set(dut.set.granted_e, ge)
            if free_i is not None:
                ctx.set(dut.free.valid, 1)
                ctx.set(dut.free.idx, free_i)
            await ctx.tick()
            if new_i is not None:
                model[new_i] = dict(valid=1, line=line, state=state, granted_e=0, way=way)
            if set_i is not None:
                model[set_i]["state"] = set_to
                if grant:
                    model[set_i]["granted_e"] = ge
            if free_i is not None:
                model[free_i]["valid"] = 0
            _check_entries(ctx, dut, TRACKER_FIELDS, model)
    run_clocked(dut, bench)


def _run_writes(dut, idle, cycles):
    """Drive ``cycles`` into table ``dut``, one per clock: each a list of (port, idx, fields) writes
    (``fields`` of the port, or of its ``entry`` for ``new``; ``readied``: the bit ``idx``); the ports
    in ``idle`` are low where a cycle does not drive them."""
    async def bench(ctx):
        for cycle in cycles:
            _idle(ctx, idle)
            for port, idx, fields in cycle:
                p = getattr(dut, port)
                if port == "readied":
                    ctx.set(p, 1 << idx)
                    continue
                if port != "cur":
                    ctx.set(p.valid, 1)
                ctx.set(p.idx, idx)
                for k, v in fields.items():
                    ctx.set(getattr(p.entry if port == "new" else p, k), v)
            await ctx.tick()
    run_clocked(dut, bench)


def _tracker_break(setup, bad):
    dut = TrackerTable(ENTRIES, TRK)
    _run_writes(dut, (dut.new.valid, dut.set.valid, dut.free.valid), [*setup, bad])


NEW1, NEW2 = ("new", 1, {"valid": 1}), ("new", 2, {"valid": 1})


@pytest.mark.parametrize("setup, bad, message", [
    ([[NEW1]], [NEW1], "started in an entry in use"),
    ([[NEW1], [("free", 1, {})]], [("set", 1, {})], "state written into a free entry"),
    ([[NEW1], [("free", 1, {})]], [("free", 1, {})], "freed that is not in use"),
    ([[NEW2]], [NEW1, ("set", 1, {})], "started and written in the same cycle"),
])
def test_tracker_asserts_fire(setup, bad, message):
    _tracker_break(setup, [])        # the same writes without the bad cycle pass
    with pytest.raises(AssertionError, match=message):
        _tracker_break(setup, bad)


# ------------------------------------------------------------------------------------------------ work table
WORK_FIELDS = ("valid", "ready", "line", "snoop", "snp_uqid", "evict", "parked", "go_during")


@given(st.data())
def test_work_table_matches_its_model(data):
    """Random legal cycles of every port, with probes readying entries in the same cycles; where the
    engine changes an entry's ``ready`` in the cycle a probe readies it, the engine's write wins.  A
    parked entry (``cur.park``) stays in use, not ready, until ``wake`` readies every parked entry."""
    dut = WorkTable(ENTRIES, WRK)
    steps = data.draw(st.lists(st.tuples(st.integers(0, 2 ** 20 - 1), st.sampled_from(
        ["new", "snoop", "take", "cur", "park", "wake", "none"]), st.integers(0, 2 ** ENTRIES - 1)), max_size=40),
        label="steps")

    async def bench(ctx):
        model = [dict(valid=0, ready=0, line=0, snoop=0, snp_uqid=0, evict=0, parked=0, go_during=0)
                 for _ in range(ENTRIES)]
        cur = 0
        for r, kind, readied in steps:
            live = [i for i in range(ENTRIES) if model[i]["valid"]]
            free = [i for i in range(ENTRIES) if not model[i]["valid"]]
            _idle(ctx, (dut.new.valid, dut.snoop.valid, dut.take.valid, dut.cur.clr_valid, dut.cur.clr_snoop,
                        dut.cur.set_ready, dut.cur.clr_ready, dut.cur.park, dut.wake))
            ready_bits = readied & sum(1 << i for i in live)
            ctx.set(dut.readied, ready_bits)
            ctx.set(dut.cur.idx, cur)
            after = [dict(e) for e in model]
            for i in range(ENTRIES):
                if ready_bits >> i & 1:
                    after[i]["ready"] = 1
            if kind == "new" and free:
                i = free[r % len(free)]
                line, snoop, uqid, evict = (r >> 2) & 0xFF, (r >> 10) & 1, (r >> 11) & 0xFFF, (r >> 1) & 1
                ctx.set(dut.new.valid, 1)
                ctx.set(dut.new.idx, i)
                ctx.set(dut.new.entry, {"valid": 1, "ready": 0, "line": line, "way": 0, "snoop": snoop,
                                        "snp_op": SNOOPS[0], "snp_uqid": uqid, "evict": evict, "evict_cqid": 0})
                after[i] = dict(valid=1, ready=0, line=line, snoop=snoop, snp_uqid=uqid, evict=evict, parked=0,
                                go_during=0)
            elif kind == "snoop" and (unsnooped := [i for i in live if not model[i]["snoop"]]):
                i = unsnooped[r % len(unsnooped)]
                uqid = (r >> 4) & 0xFFF
                ctx.set(dut.snoop.valid, 1)
                ctx.set(dut.snoop.idx, i)
                ctx.set(dut.snoop.op, SNOOPS[r % len(SNOOPS)])
                ctx.set(dut.snoop.uqid, uqid)
                after[i].update(snoop=1, snp_uqid=uqid)
            elif kind == "take" and (ready := [i for i in live if model[i]["ready"]]):
                i = ready[r % len(ready)]
                ctx.set(dut.take.valid, 1)
                ctx.set(dut.take.idx, i)
                after[i]["ready"] = 0
                cur = i                                  # the engine works on it from the next cycle
            elif kind == "cur" and model[cur]["valid"]:
                strobes = {s: (r >> b) & 1 for b, s in enumerate(("clr_valid", "clr_snoop", "set_ready",
                                                                   "clr_ready"))}
                for s, v in strobes.items():
                    ctx.set(getattr(dut.cur, s), v)
                if strobes["clr_valid"]:
                    after[cur].update(valid=0, parked=0)
                if strobes["clr_snoop"]:
                    after[cur]["snoop"] = 0
                if strobes["set_ready"]:
                    after[cur]["ready"] = 1
                if strobes["clr_ready"]:
                    after[cur]["ready"] = 0
            elif kind == "park" and model[cur]["valid"] and model[cur]["snoop"] and not model[cur]["ready"]:
                ctx.set(dut.cur.park, 1)                 # (W_GO parks the work it took up)
                after[cur].update(parked=1, go_during=1)
            elif kind == "wake":
                ctx.set(dut.wake, 1)
                for i in range(ENTRIES):
                    if model[i]["parked"]:
                        after[i].update(ready=1, parked=0)
            await ctx.tick()
            model = after
            _check_entries(ctx, dut, WORK_FIELDS, model)
    run_clocked(dut, bench)


def _work_break(setup, bad):
    dut = WorkTable(ENTRIES, WRK)
    _run_writes(dut, (dut.new.valid, dut.snoop.valid, dut.take.valid, dut.readied, dut.cur.clr_valid,
                      dut.cur.clr_snoop, dut.cur.set_ready, dut.cur.clr_ready, dut.cur.park, dut.wake),
                [*setup, bad])


NEW0 = [("new", 0, {"valid": 1})]


@pytest.mark.parametrize("setup, bad, message", [
    ([NEW0], NEW0, "work started in an entry in use"),
    ([], [("snoop", 0, {})], "snoop joined an entry that is free"),
    ([[("new", 0, {"valid": 1, "snoop": 1})]], [("snoop", 0, {})], "holds a snoop already"),
    ([], [("cur", 0, {"clr_valid": 1})], "a free entry worked on"),
    ([NEW0], [("take", 0, {})], "work taken up that is not ready"),
    ([NEW0], [("cur", 0, {"park": 1})], "an entry parked with no snoop"),
])
def test_work_table_asserts_fire(setup, bad, message):
    _work_break(setup, [])
    with pytest.raises(AssertionError, match=message):
        _work_break(setup, bad)


def test_readied_and_the_engine_in_one_cycle():
    """A probe readying the entry the engine takes up in the same cycle leaves it not ready (the engine's
    write wins), and one readying another entry is kept."""
    dut = WorkTable(ENTRIES, WRK)

    async def bench(ctx):
        for i in (0, 1):
            ctx.set(dut.new.valid, 1)
            ctx.set(dut.new.idx, i)
            ctx.set(dut.new.entry.valid, 1)
            await ctx.tick()
        ctx.set(dut.new.valid, 0)
        ctx.set(dut.readied, 0b01)
        await ctx.tick()
        ctx.set(dut.readied, 0b11)
        ctx.set(dut.take.valid, 1)
        ctx.set(dut.take.idx, 0)
        await ctx.tick()
        assert (ctx.get(dut.entries[0].ready), ctx.get(dut.entries[1].ready)) == (0, 1)
    run_clocked(dut, bench)


@pytest.mark.parametrize("cls, layout", [(TrackerTable, TRK), (WorkTable, WRK)])
def test_bad_parameters_are_named(cls, layout):
    with pytest.raises(ValueError, match="entries=0"):
        cls(0, layout)
    from amaranth.lib import data
    with pytest.raises(ValueError, match="no 'valid' field"):
        cls(2, data.StructLayout({"line": 8}))
