"""tb/stamped.py: the cycle-stamped recorder and release queue, against a reference in the testbench."""

import random
from collections import deque

import pytest
from amaranth.lib import data
from amaranth.sim import Simulator

from tb.seed import env_seed
from tb.stamped import EventRecorder, ReleaseQueue

SEED = env_seed(1)


def _sim(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("offset", range(2))
def test_recorder_gives_every_record_once_in_order_with_its_cycle(offset):
    seed = SEED + offset
    rng = random.Random(seed)
    dut = EventRecorder(data.StructLayout({"a": 8, "b": 20}), depth=16, window=4)
    got = []

    async def bench(ctx):
        sent = deque()
        pop_seq = 0
        for cycle in range(3000):
            ctx.set(dut.now, cycle)
            count = ctx.get(dut.count)
            write = rng.random() < 0.4 and count + 0 < 16 - 1
            ctx.set(dut.write, write)
            if write:
                rec = {"a": rng.randrange(256), "b": rng.randrange(1 << 20)}
                ctx.set(dut.record, rec)
                sent.append((cycle, rec["a"], rec["b"]))
            # a batch now and then: read what is visible, drop some of it
            if rng.random() < 0.2 and count:
                n = rng.randint(1, min(count, 4))
                for i in range(n):
                    w = ctx.get(dut.window[i])
                    got.append((w.cycle, w.record.a, w.record.b))
                pop_seq ^= 1
                ctx.set(dut.pop, n)
                ctx.set(dut.pop_seq, pop_seq)
            assert not ctx.get(dut.overflow), f"seed {seed} cycle {cycle}: overflow below depth"
            await ctx.tick()
        expect = list(sent)[:len(got)]
        assert got == expect, f"seed {seed}: first difference at record " \
            f"{next(i for i, (x, y) in enumerate(zip(got, expect)) if x != y)}"
        assert len(got) > 500

    _sim(dut, bench)


def test_recorder_reports_overflow():
    dut = EventRecorder(data.StructLayout({"a": 4}), depth=4, window=2)

    async def bench(ctx):
        ctx.set(dut.write, 1)
        for cycle in range(4):
            ctx.set(dut.now, cycle)
            await ctx.tick()
        assert ctx.get(dut.count) == 4 and not ctx.get(dut.overflow)
        await ctx.tick()                      # a fifth record: no room
        assert ctx.get(dut.overflow) and ctx.get(dut.count) == 4

    _sim(dut, bench)


@pytest.mark.parametrize("offset", range(2))
def test_release_queue_goes_in_order_when_due_and_gated(offset):
    seed = SEED + offset
    rng = random.Random(seed)
    dut = ReleaseQueue(data.StructLayout({"x": 16}), depth=8, lanes=3)

    async def bench(ctx):
        pushed = deque()               # (at, gate, x) in push order, not yet out
        push_seq = 0
        gate = 0
        n_out = 0
        for cycle in range(3000):
            ctx.set(dut.now, cycle)
            ctx.set(dut.gate_count, gate)
            space = ctx.get(dut.space)
            assert space == 8 - len(pushed), f"seed {seed} cycle {cycle}: space {space}, {len(pushed)} queued"
            lanes = []
            if rng.random() < 0.3:
                for i in range(3):
                    if rng.random() < 0.6 and len(lanes) + len(pushed) < 8:
                        e = (cycle + 1 + rng.randrange(20), rng.randrange(gate, gate + 4), rng.randrange(1 << 16))
                        lanes.append(e)
                    else:
                        lanes.append(None)
                push_seq ^= 1
                ctx.set(dut.push_seq, push_seq)
                for i, e in enumerate(lanes):
                    ctx.set(dut.push[i], {"valid": e is not None,
                                          "entry": {"at": e[0], "gate": e[1], "payload": {"x": e[2]}} if e else
                                          {"at": 0, "gate": 0, "payload": {"x": 0}}})
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            valid = ctx.get(dut.o.valid)
            due = bool(pushed) and cycle >= pushed[0][0] and gate >= pushed[0][1]
            assert valid == due, f"seed {seed} cycle {cycle}: valid {valid}, head {pushed[0] if pushed else None}, gate {gate}"
            if valid:
                assert ctx.get(dut.o.p.x) == pushed[0][2], f"seed {seed} cycle {cycle}: out of order"
                if ready:
                    pushed.popleft()
                    n_out += 1
            pushed.extend(e for e in lanes if e is not None)
            if rng.random() < 0.2:
                gate += 1
            assert not ctx.get(dut.overflow)
            await ctx.tick()
        assert n_out > 200

    _sim(dut, bench)


def test_release_queue_reports_overflow():
    dut = ReleaseQueue(data.StructLayout({"x": 4}), depth=4, lanes=3)

    async def bench(ctx):
        ctx.set(dut.now, 0)
        for i in range(3):
            ctx.set(dut.push[i], {"valid": 1, "entry": {"at": 100, "gate": 0, "payload": {"x": i}}})
        ctx.set(dut.push_seq, 1)
        await ctx.tick()
        assert not ctx.get(dut.overflow) and ctx.get(dut.space) == 1
        await ctx.tick()                      # the same push_seq: not taken again
        assert not ctx.get(dut.overflow) and ctx.get(dut.space) == 1
        ctx.set(dut.push_seq, 0)              # three more, room for one
        await ctx.tick()
        assert ctx.get(dut.overflow) and ctx.get(dut.space) == 0

    _sim(dut, bench)


def test_stamped_reject_bad_parameters():
    with pytest.raises(ValueError, match="depth"):
        EventRecorder(data.StructLayout({"a": 1}), depth=12)
    with pytest.raises(ValueError, match="window"):
        EventRecorder(data.StructLayout({"a": 1}), depth=4, window=8)
    with pytest.raises(ValueError, match="lanes"):
        ReleaseQueue(data.StructLayout({"a": 1}), depth=2, lanes=4)
