"""cocotb tests of the VIP's link side on the device's RTL flit receiver.

Toplevel ``link_rx``: ``hdl.link.rx.FlitUnpacker(upstream=False)`` (H2D flits in at ``flit``, H2D
Req/Rsp/Data out at ``req``/``rsp``/``data``), the ``link_rx`` top of ``hdl/verilog.py``.  Flits come from
the golden ``models.flit.Packer`` through ``tb.vip.FlitDriver``; the channel side is drained by
``ChannelSink``s and watched by ``ChannelMonitor``s; a ``FlitStreamMonitor`` on the flit input decodes
what actually went in with the golden ``Unpacker``.  Checked, per test:

* the RTL's per-flit verdict (``done`` with exactly one of ``good``/``crc_error``/``rule_error``) equals
  the golden receiver's on the same wire, flit for flit, and a good flit's credits and acks equal the
  golden ones;
* the messages out of each channel equal, in order, the golden receiver's on the wire, and also what the
  test expects from what it packed (all of them with no errors; without the corrupted flits' messages
  when flits are corrupted);
* nothing more comes out, and the ``crc_errors``/``rule_errors`` counters match.

``SEED`` (environment, :mod:`tb.seed`) seeds everything; every failure message starts with it.
``LINK_FLITS_COUNT``: messages packed per test (default 300).
"""

import itertools
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from hdl.link.rx import CreditsLayout
from cxl.credits import Credits
from cxl.flit import FLIT_BYTES, Direction
from models.flit import Unpacker, pack, random_msg
from tb.seed import env_seed
from tb.vip import ChannelMonitor, ChannelSink, FlitDriver, FlitStreamMonitor, StructCodec, channel_fields

SEED = env_seed(1)
COUNT = int(os.environ.get("LINK_FLITS_COUNT", "300"))     # messages per test
DIRECTION = Direction.DOWNSTREAM                   # FlitUnpacker(upstream=False) receives H2D flits
PORTS = dict(zip(DIRECTION.channels, ("req", "rsp", "data")))
_CREDITS = StructCodec(CreditsLayout)


def fail(what):
    raise AssertionError(f"seed {SEED}: {what} (reproduce: SEED={SEED})")


class StatusMonitor:
    """The RTL's per-flit status pulses, in retire order: (verdict, credits, acks) per flit."""

    def __init__(self, dut):
        self.dut = dut
        self.retired = []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            if not int(dut.done.value):
                continue
            flags = {"good": int(dut.good.value), "crc": int(dut.crc_error.value),
                     "rule": int(dut.rule_error.value), "discarded": int(dut.discarded.value)}
            if sum(flags.values()) != 1:
                fail(f"flit {len(self.retired)} retired with status {flags}: not exactly one verdict")
            verdict = next(k for k, v in flags.items() if v)
            raw = int(dut.credits.value)
            credits = Credits(**_CREDITS.decode(raw))
            self.retired.append((verdict, credits, int(dut.acks.value)))


class TB:
    def __init__(self, dut, *, pause=None, backpressure=None, error_rate=0.0, corrupt=()):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.discard.value = 0
        self.driver = FlitDriver(dut, "flit", dut.clk, direction=DIRECTION, pause=pause,
                                 error_rate=error_rate, corrupt=corrupt, seed=SEED)
        self.wire = FlitStreamMonitor(dut, "flit", dut.clk, DIRECTION, strict=not (error_rate or corrupt),
                                      name=f"seed {SEED} (SEED): flit input")
        self.sinks = {c: ChannelSink(dut, p, dut.clk, c, backpressure=backpressure() if backpressure else None)
                      for c, p in PORTS.items()}
        self.mons = {c: ChannelMonitor(dut, p, dut.clk, c) for c, p in PORTS.items()}
        self.status = StatusMonitor(dut)

    async def reset(self):
        self.dut._log.info("SEED=%d", SEED)
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 2)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def finish(self, limit=4000):
        """Wait until every driven flit is retired and the outputs are drained (bounded: no hang)."""
        await self.driver.wait_idle()
        n = len(self.driver.wire)
        want = {c: len(m) for c, m in self.wire.messages.items()}
        for cycle in itertools.count():
            if cycle > limit:
                fail(f"hang: {len(self.status.retired)} of {n} flits retired, received "
                     f"{ {c.name: len(s.received) for c, s in self.sinks.items()} } of "
                     f"{ {c.name: k for c, k in want.items()} }")
            # the golden decode is final once every flit is seen; the RTL then needs a few cycles
            want = {c: len(m) for c, m in self.wire.messages.items()}
            if len(self.status.retired) >= n and all(len(s.received) >= want[c] for c, s in self.sinks.items()):
                break
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, 8)              # anything extra would show up by now

    def check(self, expected):
        """RTL against the golden receiver on the same wire, and against ``expected`` (per channel, the
        FlitMsgs the test packed minus those it knows were lost)."""
        n = len(self.driver.wire)
        if len(self.wire.flits) != n:
            fail(f"the flit monitor saw {len(self.wire.flits)} flits, the driver sent {n}")
        if len(self.status.retired) != n:
            fail(f"the RTL retired {len(self.status.retired)} flits, {n} were driven")
        for k, ((verdict, credits, acks), gold, rx) in enumerate(zip(self.status.retired, self.wire.verdicts,
                                                                    self.wire.rx)):
            if verdict != gold:
                err = dict(self.wire.errors).get(k)
                fail(f"flit {k}: the RTL says {verdict}, the golden receiver {gold}"
                     + (f" ({err})" if err else "") + f"; injected: {self.driver.injected}")
            if rx is not None and (credits, acks) != (rx.credits, rx.acks):
                fail(f"flit {k}: RTL credits {credits} acks {acks}, golden {rx.credits} acks {rx.acks}")
        for c in DIRECTION.channels:
            got = list(self.sinks[c].received)
            gold = [channel_fields(m) for m in self.wire.messages[c]]
            want = [channel_fields(m) for m in expected[c]]
            for name, other in (("the golden receiver on the wire", gold), ("the test's expected list", want)):
                if got != other:
                    i = next((i for i, (a, b) in enumerate(zip(got, other)) if a != b), min(len(got), len(other)))
                    fail(f"{c.name}: the RTL delivered {len(got)} messages, {name} has {len(other)}; first "
                         f"difference at message {i}: RTL {got[i] if i < len(got) else None} vs "
                         f"{other[i] if i < len(other) else None}")
            if self.mons[c].seen != got:
                fail(f"{c.name}: the channel monitor disagrees with the sink")
        crc = sum(v == "crc" for v in self.wire.verdicts)
        rule = sum(v == "rule" for v in self.wire.verdicts)
        counters = (int(self.dut.crc_errors.value), int(self.dut.rule_errors.value))
        if counters != (crc, rule):
            fail(f"RTL counters crc_errors/rule_errors = {counters}, the golden receiver saw {(crc, rule)}")


def make_messages(rng, count):
    """``count`` random H2D messages (golden ``random_msg``), data-heavy enough for all-data flits."""
    chans = DIRECTION.channels
    return [random_msg(rng, c) for c in rng.choices(chans, (2, 3, 2), k=count)]


def by_channel(msgs):
    return {c: [m for m in msgs if m.chan is c] for c in DIRECTION.channels}


def credit_returns(rng):
    return Credits(*(rng.randrange(0, 40) for _ in range(3))), rng.randrange(0, 30)


@cocotb.test()
async def test_packed_messages_come_out_in_order(dut):
    """No errors; idle cycles on the flit input and backpressure on the outputs."""
    rng = random.Random(SEED)
    tb = TB(dut, pause=itertools.cycle([0, 0, 1, 0, 1]),
            backpressure=lambda: itertools.cycle([0, 1, 0, 0, 1, 1, 0]))
    await tb.reset()
    msgs = make_messages(rng, COUNT)
    credits, acks = credit_returns(rng)
    flits = tb.driver.send_messages(msgs, credits, acks)
    await tb.finish()
    tb.check(by_channel(msgs))
    if any(v != "good" for v in tb.wire.verdicts) or tb.driver.injected:
        fail("a flit was bad with no error injected")
    if tb.wire.credits != credits or tb.wire.acks != acks:
        fail(f"returned {tb.wire.credits} / {tb.wire.acks} acks, packed {credits} / {acks}")
    kinds = {rx.kind for rx in tb.wire.rx}
    if not {"protocol", "all-data"} <= kinds:
        fail(f"stream too tame: flit kinds {kinds}")
    dut._log.info("seed %d: %d flits, %d messages, coverage %s", SEED, len(flits), len(msgs),
                  dict(sorted(tb.wire.coverage.items())))


@cocotb.test()
async def test_crc_errors_are_flagged_and_dropped(dut):
    """One flipped bit in chosen flits: each is a CRC error and none of its messages comes out; the
    rest arrive unchanged.  The chosen flits carry no data header and no chunk (the receiver's data
    state is the same before and after them), so losing one loses exactly its own messages.  The
    packer keeps chunks owed across most flits of a mixed stream (it places messages before chunks
    that can wait), so a stream of data-free messages, packed after the mixed one, supplies them."""
    rng = random.Random(SEED)
    msgs = make_messages(rng, COUNT)
    credits, acks = credit_returns(rng)
    tail = [random_msg(rng, c) for c in rng.choices(DIRECTION.channels[:2], k=COUNT // 8)]
    packer_flits = [int.from_bytes(f, "little") for f in pack(DIRECTION, msgs, credits, acks) + pack(DIRECTION, tail)]
    rx = Unpacker(DIRECTION)
    per_flit, eligible = [], []
    for k, word in enumerate(packer_flits):
        owed = rx.owed
        r = rx.receive(word.to_bytes(FLIT_BYTES, "little"))
        per_flit.append(r.messages)
        if owed == 0 and rx.owed == 0 and r.kind == "protocol" and r.messages:
            eligible.append(k)
    if len(eligible) < 3:
        fail(f"only {len(eligible)} self-contained protocol flits to corrupt")
    corrupt = set(rng.sample(eligible, min(8, len(eligible) // 4)))
    tb = TB(dut, pause=itertools.cycle([0, 1, 0]), backpressure=lambda: itertools.cycle([0, 0, 1]),
            corrupt=corrupt)
    await tb.reset()
    for word in packer_flits:
        tb.driver.send(word)
    await tb.finish()
    expected = by_channel([m for k, ms in enumerate(per_flit) if k not in corrupt for m in ms])
    tb.check(expected)
    bad = {k for k, v in enumerate(tb.wire.verdicts) if v != "good"}
    if bad != corrupt or {k for k, _ in tb.driver.injected} != corrupt:
        fail(f"bad flits {sorted(bad)}, corrupted {sorted(corrupt)}, injected {tb.driver.injected}")
    if {v for k, v in enumerate(tb.wire.verdicts) if k in corrupt} != {"crc"}:
        fail("a single flipped bit was not a CRC error")
    lost = sum(len(per_flit[k]) for k in corrupt)
    dut._log.info("seed %d: corrupted flits %s (bits %s), %d messages lost", SEED, sorted(corrupt),
                  [b for _, b in tb.driver.injected], lost)


@cocotb.test()
async def test_random_bit_errors_match_the_golden_receiver(dut):
    """Seeded random bit errors (10 % of flits) anywhere in the stream: a lost data header makes its
    chunks rule errors, and so on; the RTL must agree with the golden receiver flit for flit."""
    rng = random.Random(SEED + 1)
    tb = TB(dut, error_rate=0.1, backpressure=lambda: itertools.cycle([0, 1, 0, 0]))
    await tb.reset()
    msgs = make_messages(rng, COUNT)
    credits, acks = credit_returns(rng)
    tb.driver.send_messages(msgs, credits, acks)
    await tb.finish()
    tb.check(tb.wire.messages)          # the golden receiver on the wire is the reference here
    if not tb.driver.injected:
        fail("no bit error was injected")
    crc = {k for k, v in enumerate(tb.wire.verdicts) if v == "crc"}
    if crc != {k for k, _ in tb.driver.injected}:      # one flipped bit is always a CRC error, and only then
        fail(f"CRC errors in flits {sorted(crc)}, but the driver injected {tb.driver.injected}")
    dut._log.info("seed %d: %d flits, %d corrupted, verdicts %s", SEED, len(tb.driver.wire), len(tb.driver.injected),
                  {v: tb.wire.verdicts.count(v) for v in ("good", "crc", "rule")})
