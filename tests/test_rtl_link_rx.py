"""The RTL RX unpacker (hdl/link/rx.py) against the reference ``models.flit.Unpacker``.

Every test feeds a flit stream to the RTL and checks, flit by flit, that it does what the reference's
``receive`` does: the same messages per channel (in order), credits, acks and control flits for a good
flit; ``crc_error`` / ``rule_error`` with the matching ``RxError`` exactly when the reference raises
``FlitError``; and a rejected flit leaves the state unchanged (the flits after it still decode as the
reference decodes them).  Inputs come with random gaps and the outputs with random backpressure; every
run is bounded in cycles (no hang).

One simulator per (direction, lane depth) is built once and ``reset()`` between runs: elaborating the
unpacker costs seconds, a run milliseconds.
"""

import json
import random
import re
from collections import namedtuple
from types import SimpleNamespace

import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from hypothesis import given, settings, strategies as st

from hdl.link.port import default_credits
from hdl.link.ports import channel_shape
from hdl.link.rx import CONTROL_KIND_NAMES, CONTROL_TABLES, FlitKind, FlitUnpacker, RegisteredFlitUnpacker, RxError
from cxl.credits import CREDIT_CLASSES
from cxl.flit import MAX_PER_FLIT, PAYLOAD_BITS
from cxl.messages import CODECS, D2HReqOpcode, D2HRspOpcode
from models import flit as F
from models.flit import (CONTROL_KINDS, Credits, Direction, FlitError, Packer, RandomPolicy, Unpacker,
                         control, decode_control, deframe, encode_control, encode_header, msg_from_json, seal)

DIRS = {True: Direction.UPSTREAM, False: Direction.DOWNSTREAM}
PORTS = ("req", "rsp", "data")

# ``use``: per flit, the messages it brings per port (req, rsp, data headers); given, the sender keeps to
# credits of ``cap`` per port and a message's credit comes back when the consumer takes it (the way
# ``LinkPort`` drives an unpacker that never waits for room, ``stall=False``).
Job = namedtuple("Job", "flits gaps ready seed use cap", defaults=(None, None))
Status = namedtuple("Status", "good crc_error rule_error error kind credits mem_credits acks ctl")


# ---------------------------------------------------------------- simulation harness
class Harness:
    """One elaborated unpacker; ``run(job)`` resets it and plays one flit stream.  ``registered``: the
    unpacker behind the input register that splits its pre-decode (``RegisteredFlitUnpacker``)."""

    def __init__(self, upstream, depth=4, registered=False, stall=True):
        self.dut = (RegisteredFlitUnpacker if registered else FlitUnpacker)(upstream, depth=depth, stall=stall)
        self.direction = DIRS[upstream]
        self.job = None
        self.result = None
        self.sim = Simulator(self.dut)
        self.sim.add_clock(1e-8)
        self.sim.add_testbench(self._bench)
        self.first = True

    def run(self, job):
        self.job, self.result = job, None
        if not self.first:
            self.sim.reset()
        self.first = False
        self.sim.run()
        return self.result

    async def _bench(self, ctx):
        dut, job = self.dut, self.job
        rng = random.Random(job.seed)
        flits = [int.from_bytes(f, "little") for f in job.flits]
        n = len(flits)
        got = {name: [] for name in PORTS}
        statuses = []
        self.done_at = []
        self.overflows = []                     # indices of the retired flits that overflowed a lane
        in_use = [0] * len(PORTS)               # credits held by messages not yet taken (with job.use)
        limit = 200 + 60 * n        # backpressure is >= 25 % ready, so this is generous
        i, gap, cycles, idle = 0, (job.gaps[0] if n else 0), 0, 0
        while True:
            assert cycles < limit, f"hang: {len(statuses)} of {n} flits retired after {cycles} cycles"
            drain = len(statuses) == n
            offer = i < n and gap == 0
            if offer and job.use is not None:   # a sender that keeps to its credits
                offer = all(u + k <= c for u, k, c in zip(in_use, job.use[i], job.cap))
            ctx.set(dut.flit.valid, offer)
            if offer:
                ctx.set(dut.flit.payload, flits[i])
            any_valid = False
            for name, p in zip(PORTS, job.ready):
                port = getattr(dut, name)
                ready = drain or rng.random() < p
                ctx.set(port.ready, ready)
                if ctx.get(port.valid):
                    any_valid = True
                    if ready:
                        got[name].append(ctx.get(port.payload).as_value().value)
                        in_use[PORTS.index(name)] -= 1
            if offer and ctx.get(dut.flit.ready):
                if job.use is not None:
                    in_use = [u + k for u, k in zip(in_use, job.use[i])]
                i += 1
                gap = job.gaps[i] if i < n else 0
            elif not offer and gap:
                gap -= 1
            await ctx.tick()
            cycles += 1
            if ctx.get(dut.done):
                if ctx.get(dut.overflow):
                    self.overflows.append(len(statuses))
                statuses.append(self._status(ctx))
                self.done_at.append(cycles)
            if drain:
                idle = 0 if any_valid else idle + 1
                if idle >= 3:        # the FIFO output register needs a cycle; 3 quiet ones mean empty
                    break
        self.result = (got, statuses, ctx.get(dut.crc_errors), ctx.get(dut.rule_errors), cycles)

    def _status(self, ctx):
        d = self.dut
        ctl = None
        if ctx.get(d.ctl_valid):
            kind = CONTROL_KIND_NAMES[ctx.get(d.ctl.kind)]
            ctl = (kind, {name: ctx.get(getattr(d.ctl, name)) for name in CONTROL_KINDS[kind][2]})
        as_credits = lambda v: Credits(v.req, v.rsp, v.data)    # noqa: E731
        return Status(ctx.get(d.good), ctx.get(d.crc_error), ctx.get(d.rule_error), ctx.get(d.error),
                      ctx.get(d.kind), as_credits(ctx.get(d.credits)), as_credits(ctx.get(d.mem_credits)),
                      ctx.get(d.acks), ctl)


_HARNESSES = {}


def harness(upstream, depth=4, registered=False, stall=True):
    key = (upstream, depth, registered, stall)
    if key not in _HARNESSES:
        _HARNESSES[key] = Harness(*key)
    return _HARNESSES[key]


# ---------------------------------------------------------------- the reference's view
def expected_code(err):
    """The RxError the RTL must report for a reference FlitError (classified by field and message)."""
    field, text = err.field, str(err)
    if field == "CRC":
        return RxError.CRC
    if field == "Type":
        return RxError.TYPE
    if field in ("CTL_FMT", "LLCTRL", "SubType", "Slot1-3"):
        return RxError.CONTROL
    if field == "reserved":
        return RxError.RESERVED if "flit header" in text else RxError.CONTROL
    if field == "BE":
        return RxError.BE
    if field == "Sz":
        return RxError.SZ
    if field == "DataHeaders":
        return RxError.MDH
    if re.fullmatch(r"Slot\d", field):
        if re.match(r"(upstream|downstream) format ", text.split(": ", 1)[1]):
            return RxError.FORMAT           # "<direction> format Xn ... reserved / not supported"
        for key, code in (("S2M NDR", RxError.NDR), ("padding", RxError.PADDING),
                          ("with non-zero bits", RxError.INVALID), ("encoding", RxError.OPCODE),
                          ("more than", RxError.MAX), ("must be G0", RxError.ROLLOVER),
                          ("no data header", RxError.NO_DATA), ("next slot for data", RxError.DATA_SLOT),
                          ("tightly packed", RxError.PACKING), ("(MDH) slot", RxError.MDH)):
            if key in text:
                return code
    raise AssertionError(f"unclassified reference error {err}")


KINDS = {"protocol": FlitKind.PROTOCOL, "all-data": FlitKind.ALL_DATA, "control": FlitKind.CONTROL}


def msg_value(msg):
    """A reference FlitMsg as the integer the RTL's output stream carries."""
    bits = CODECS[msg.chan].encode(msg.fields)
    if msg.data is None:
        return bits
    layout = channel_shape(msg.chan)
    return (bits << layout["hdr"].offset) | (int.from_bytes(msg.data, "little") << layout["data"].offset)


def reference(direction, flits):
    """Per-flit expected Status and per-port expected message values."""
    rx = Unpacker(direction)
    msgs = {name: [] for name in PORTS}
    port_of = dict(zip(direction.channels, PORTS))
    statuses = []
    for flit in flits:
        try:
            r = rx.receive(flit)
        except FlitError as e:
            code = expected_code(e)
            crc = code is RxError.CRC
            statuses.append(Status(0, int(crc), int(not crc), code, None, None, None, None, None))
            continue
        for m in r.messages:
            msgs[port_of[m.chan]].append(msg_value(m))
        ctl = (r.control.kind, r.control.fields) if r.control else None
        statuses.append(Status(1, 0, 0, RxError.NONE, KINDS[r.kind], r.credits, r.mem_credits, r.acks, ctl))
    return statuses, msgs


def credit_use(direction, flits):
    """Per flit, the credits its messages take per port (req, rsp, data): a data line's credit from the
    flit with its header until the line is taken (a bad flit takes none)."""
    rx = Unpacker(direction)
    port_of = dict(zip(direction.channels, PORTS))
    use = []
    for flit in flits:
        before = len(rx.waiting)
        try:
            r = rx.receive(flit)
        except FlitError:
            use.append((0, 0, 0))
            continue
        counts = {name: 0 for name in PORTS}
        for m in r.messages:
            counts[port_of[m.chan]] += 1
        counts["data"] += len(rx.waiting) - before           # headers now waiting for their chunks
        use.append(tuple(counts[name] for name in PORTS))
    return use


def lane_capacity(direction, depth):
    """What an unpacker's lanes hold per port (req, rsp, data): the sender's default credit pools, which
    ``hdl.link.port.default_credits`` sizes to those lanes."""
    pools = default_credits(direction is Direction.UPSTREAM, depth)
    return tuple(pools[cls] for cls in CREDIT_CLASSES)


def check(direction, flits, data=None, rng=None, depth=4, registered=False, stall=True):
    """Play ``flits`` on the RTL (random gaps and backpressure from ``data`` or ``rng``) and compare
    everything with the reference.  ``registered``: on ``RegisteredFlitUnpacker``.  ``stall=False``: on
    an unpacker that never waits for room, fed by a sender that keeps to the lanes' credits; no flit
    may overflow a lane."""
    if data is not None:
        gaps = data.draw(st.lists(st.sampled_from((0, 0, 0, 1, 3)), min_size=len(flits), max_size=len(flits)),
                         label="gaps")
        ready = data.draw(st.tuples(*[st.sampled_from((1.0, 1.0, 0.5, 0.25))] * 3), label="ready")
        seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    else:
        gaps = [rng.choice((0, 0, 0, 1, 3)) for _ in flits]
        ready = tuple(rng.choice((1.0, 0.5, 0.25)) for _ in PORTS)
        seed = rng.getrandbits(32)
    want_status, want_msgs = reference(direction, flits)
    credited = {} if stall else dict(use=credit_use(direction, flits), cap=lane_capacity(direction, depth))
    h = harness(direction is Direction.UPSTREAM, depth, registered, stall)
    got_msgs, got_status, crc_errors, rule_errors, cycles = h.run(Job(flits, gaps, ready, seed, **credited))
    assert h.overflows == [], f"flits {h.overflows} overflowed a lane, though the sender kept to its credits"
    assert len(got_status) == len(flits)
    for k, (g, w) in enumerate(zip(got_status, want_status)):
        if not w.good:     # only the verdict matters for a rejected flit
            g = g._replace(kind=None, credits=None, mem_credits=None, acks=None, ctl=None)
        assert g == w, f"flit {k} of {len(flits)}: RTL {g} != reference {w}"
    assert got_msgs == want_msgs
    assert crc_errors == sum(s.crc_error for s in want_status)
    assert rule_errors == sum(s.rule_error for s in want_status)
    return want_status, cycles


# ---------------------------------------------------------------- stimulus
def random_control(rng):
    kind = rng.choice(CONTROL_KIND_NAMES)
    spec = CONTROL_KINDS[kind][2]
    fields = {name: rng.getrandbits(max(s + w for s, _, w in pieces)) for name, pieces in spec.items()}
    return seal(encode_control(control(kind, **fields)))


def random_stream(rng, direction, segments=3, channels=None):
    """Flits of a few packed segments (reference or random policy) with control flits between them
    (where no data chunk is owed, so they are legal); messages of ``channels`` (default: all three)."""
    flits = []
    for _ in range(segments):
        packer = Packer(direction) if rng.random() < 0.5 else RandomPolicy(direction, rng)
        for _ in range(rng.choice((0, rng.randrange(1, 6), rng.randrange(6, 20)))):
            packer.push(F.random_msg(rng, rng.choice(channels or direction.channels)))
        packer.return_credits(*(rng.choice((0, rng.randrange(1, 100))) for _ in range(3)))
        packer.acknowledge(rng.choice((0, rng.randrange(1, 40))))
        flits += packer.drain()
        for _ in range(rng.choice((0, 0, 1, 2))):
            flits.append(random_control(rng))
    return flits


# ---------------------------------------------------------------- 1. vectors
@pytest.mark.parametrize("registered", (False, True))
def test_vectors(tmp_path, registered):
    path = F.write_vectors(tmp_path / "v.jsonl", count=100, seed=11)
    rng = random.Random(5)
    for line in path.read_text().splitlines():
        vec = json.loads(line)
        direction = Direction(vec["direction"])
        flits = [deframe(bytes.fromhex(h)) for h in vec["flits"]]
        want = {name: [] for name in PORTS}
        port_of = dict(zip(direction.channels, PORTS))
        for obj in vec["messages"]:
            msg = msg_from_json(obj)
            want[port_of[msg.chan]].append(msg_value(msg))
        statuses, _ = check(direction, flits, rng=rng, registered=registered)   # status and messages vs reference
        assert all(s.good for s in statuses)
        got, *_ = harness(direction is Direction.UPSTREAM, registered=registered).result
        assert got == want                                  # ... and the messages vs the vector itself


# ---------------------------------------------------------------- 2. random legal streams
@pytest.mark.parametrize("registered", (False, True))
@settings(max_examples=40)
@given(upstream=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_random_streams(registered, upstream, seed, data):
    flits = random_stream(random.Random(seed), DIRS[upstream])
    statuses, _ = check(DIRS[upstream], flits, data, registered=registered)
    assert all(s.good for s in statuses)


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_random_streams_shallow_lanes(seed, data):
    """Depth-1 lanes: every flit with a message waits for the output, the hardest backpressure case."""
    flits = random_stream(random.Random(seed), Direction.DOWNSTREAM)
    check(Direction.DOWNSTREAM, flits, data, depth=1)


@pytest.mark.parametrize("depth", (2, 8))
@settings(max_examples=15)
@given(upstream=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_random_streams_without_stalls(depth, upstream, seed, data):
    """``stall=False`` (the link port's unpacker): a sender that keeps to credits equal to the lanes'
    capacity, each credit back the cycle its message is taken, never overflows a lane, and the RTL does
    what the reference does.  Depth 2 is where a lane's last entry is hidden from ``SyncFIFOBuffered``'s
    ``w_rdy`` for a cycle (``LaneFIFO(exact=True)``); 8 is the port's default.  At depth 2 the streams
    carry no data: the golden packer puts up to 4 Data Headers in a flit, which 2 data credits never let
    a sender do.  At 8 every stream is one a credit-keeping sender could send: a protocol flit starts
    with at most one line waiting for chunks and brings at most 4 more headers (at 4 deep, 1 + 4 > 4:
    the harness, waiting for a credit that only the later chunks can free, would report a hang)."""
    direction = DIRS[upstream]
    flits = random_stream(random.Random(seed), direction, channels=direction.channels[:2] if depth < 8 else None)
    check(direction, flits, data, depth=depth, registered=True, stall=False)


def test_overflow_without_stalls_is_reported():
    """``stall=False`` with nobody taking messages: the flit that brings the first response beyond the
    lanes' capacity pulses ``overflow`` with its status, no flit before it does, and the input stays
    ready throughout (the sender broke its credits; the port makes it a link error)."""
    direction = Direction.DOWNSTREAM
    depth = 2
    rng = random.Random(5)
    rsp = direction.channels[1]
    msgs = [F.random_msg(rng, rsp) for _ in range(3 * MAX_PER_FLIT[rsp] * depth)]
    flits = F.pack(direction, msgs)
    cap = lane_capacity(direction, depth)[1]
    total, first_over = 0, None
    for k, use in enumerate(credit_use(direction, flits)):
        total += use[1]
        if total > cap and first_over is None:
            first_over = k
    assert first_over is not None
    h = harness(False, depth, stall=False)
    got, statuses, _, _, _ = h.run(Job(flits, [0] * len(flits), (0.0, 0.0, 0.0), 0))
    assert len(statuses) == len(flits) and all(s.good for s in statuses)
    assert h.overflows and h.overflows[0] == first_over, (h.overflows, first_over)
    assert h.done_at == list(range(2, 2 + len(flits))), "the unpacker held a flit back"


@pytest.mark.parametrize("registered", (False, True))
def test_throughput_one_flit_per_cycle(registered):
    """Streaming reads (header flits + all-data flits) with outputs always ready: one flit per cycle."""
    rng = random.Random(3)
    msgs = [F.random_msg(rng, F.Channel.H2D_DATA) for _ in range(16)]
    flits = F.pack(Direction.DOWNSTREAM, msgs)
    h = harness(False, registered=registered)
    got, statuses, _, _, cycles = h.run(Job(flits, [0] * len(flits), (1.0,) * 3, 0))
    assert len(got["data"]) == 16 and all(s.good for s in statuses)
    # Offered from cycle 0, retired on consecutive edges starting with the second (the input register),
    # one edge later behind the extra register.
    first = 3 if registered else 2
    assert h.done_at == list(range(first, first + len(flits))), h.done_at


# ---------------------------------------------------------------- 3. errors
def _flip_burst(flit, start, length, rng):
    """Flip a burst of ``length`` bits (first and last always) starting at codeword position ``start``
    in the order the CRC consumes the codeword: payload bit 511 .. 0, then CRC bit 15 .. 0."""
    def flit_bit(q):
        return 511 - q if q < 512 else 512 + 15 - (q - 512)
    value = int.from_bytes(flit, "little")
    for q in range(start, start + length):
        if q in (start, start + length - 1) or rng.random() < 0.5:
            value ^= 1 << flit_bit(q)
    return value.to_bytes(len(flit), "little")


@pytest.mark.parametrize("registered", (False, True))
@settings(max_examples=40)
@given(upstream=st.booleans(), seed=st.integers(0, 2**32 - 1), error=st.sampled_from(("1", "2", "burst")),
       data=st.data())
def test_crc_errors(registered, upstream, seed, error, data):
    rng = random.Random(seed)
    direction = DIRS[upstream]
    flits = random_stream(rng, direction, segments=2) or [random_control(rng)]
    k = rng.randrange(len(flits))
    bad = int.from_bytes(flits[k], "little")
    if error == "1":
        bad ^= 1 << rng.randrange(528)
    elif error == "2":
        for b in rng.sample(range(528), 2):
            bad ^= 1 << b
    else:
        length = rng.randint(2, 16)
        bad = int.from_bytes(_flip_burst(flits[k], rng.randrange(528 - length + 1), length, rng), "little")
    bad = bad.to_bytes(len(flits[k]), "little")
    stream = flits[:k] + [bad] + flits[k:]          # the bad copy first, as a retry would resend it
    statuses, _ = check(direction, stream, data, registered=registered)
    assert statuses[k].crc_error                    # facts §2.3: all 1-, 2-bit and <= 16-bit bursts caught
    assert all(s.good for i, s in enumerate(statuses) if i != k)


@pytest.mark.parametrize("registered", (False, True))
def test_each_crc_field_bit_flipped_is_a_crc_error(registered):
    """A flip of one bit of the CRC field leaves a syndrome of that one bit: each of the 16 must be
    caught (a verdict that ignored one syndrome bit passed the random error tests above)."""
    rng = random.Random(11)
    direction = DIRS[True]
    flits = random_stream(rng, direction, segments=2)
    k = len(flits) // 2
    good = int.from_bytes(flits[k], "little")
    bad = [(good ^ (1 << (PAYLOAD_BITS + b))).to_bytes(len(flits[k]), "little") for b in range(16)]
    stream = flits[:k] + bad + flits[k:]             # the bad copies first, as retries would resend it
    statuses, _ = check(direction, stream, rng=rng, registered=registered)
    missed = [b for b in range(16) if not statuses[k + b].crc_error]
    assert not missed, f"CRC field bits flipped and not caught: {missed}"
    assert all(st_.good for i, st_ in enumerate(statuses) if not k <= i < k + 16)


def _kinds(direction, flits):
    rx = Unpacker(direction)
    return [rx.receive(f).kind for f in flits]


SLOT_FIELDS = [(offset, width) for name, offset, width in F.HEADER_FIELDS if name.startswith("slot")]


@pytest.mark.parametrize("registered", (False, True))
@settings(max_examples=150)
@given(upstream=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_mutated_flits_match_reference(registered, upstream, seed, data):
    """Mutate a valid flit (random bit flips biased to the header and slot 0, or a slot-format field
    rewritten, which re-reads the slot's messages under another format), re-seal it, and insert it
    before the original: the RTL flags a rule error exactly when the reference raises, with the same
    code, and carries on exactly as the reference does."""
    rng = random.Random(seed)
    direction = DIRS[upstream]
    flits = random_stream(rng, direction, segments=2) or [random_control(rng)]
    kinds = _kinds(direction, flits)
    protocol = [i for i, kind in enumerate(kinds) if kind == "protocol"]
    k = rng.choice(protocol) if protocol and rng.random() < 0.7 else rng.randrange(len(flits))
    value = int.from_bytes(flits[k][:64], "little")
    if rng.random() < 0.3:
        offset, width = rng.choice(SLOT_FIELDS)
        value = (value & ~(((1 << width) - 1) << offset)) | rng.getrandbits(width) << offset
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        value ^= 1 << rng.randrange(rng.choice((32, 128, 512)))      # header, slot 0, anywhere
    stream = flits[:k] + [seal(value)] + flits[k:]
    check(direction, stream, data, registered=registered)


def _payload(header, slots):
    """Sealed protocol flit from header fields and {slot: message-area bits}."""
    value = encode_header(header)
    for s, bits in slots.items():
        value |= bits << (F.HEADER_BITS if s == 0 else F.SLOT_BITS * s)
    return seal(value)


def _fmt(direction, kind, code):
    return F.SLOT_FORMATS[direction, kind, code]


def _place(direction, kind, code, msgs):
    """Message-area bits of format (kind, code) with ``msgs`` = {position: message integer}."""
    fmt = _fmt(direction, kind, code)
    return sum(v << fmt.fields[pos][1] for pos, v in msgs.items())


UP, DOWN = Direction.UPSTREAM, Direction.DOWNSTREAM
D2H_REQ, D2H_RSP, D2H_DATA = UP.channels
_RSP = CODECS[D2H_RSP].encode(opcode=D2HRspOpcode.RspIHitI, uqid=5)
_DHDR = CODECS[D2H_DATA].encode(uqid=9, chunk_valid=0, bogus=0, poison=0)


def _header_flit_up():
    """Upstream H0 with one data header and its first chunk in slot 1: leaves 3 chunks owed."""
    slot0 = _place(UP, "H", 0, {0: _DHDR})
    return _payload({"sz": 1, "slot0": 0, "slot1": 0, "slot2": 1, "slot3": 1}, {0: slot0, 1: 0xAB})


def _malformed():
    """(name, direction, stream, expected code of the last flit): one per rule."""
    rsp = _RSP
    req = CODECS[D2H_REQ].encode(opcode=D2HReqOpcode.RdOwn, cqid=1, nt=0, addr=3)
    _, off, width, _ = next(f for f in CODECS[D2H_REQ].fields if f[0] == "opcode")
    bad_req = req & ~(((1 << width) - 1) << off)          # opcode 0: no D2H Req encoding
    empty = {"slot0": 0, "slot1": 1, "slot2": 1, "slot3": 1}
    owe3 = _header_flit_up()
    g3_pad = 1 << _fmt(UP, "G", 3).used_bits
    dhdr_dn = CODECS[DOWN.data_channel].encode(cqid=3, chunk_valid=0, poison=0, go_err=0)
    llcrd = encode_control(control("LLCRD", acks=5))
    cases = [
        ("reserved header bit", UP, [_payload(dict(empty, rsvd1=1), {})], RxError.RESERVED),
        ("byte enable", UP, [_payload(dict(empty, be=1), {})], RxError.BE),
        ("reserved H7", DOWN, [_payload(dict(empty, slot0=7), {})], RxError.FORMAT),
        ("unsupported G4 (CXL.mem)", DOWN, [_payload(dict(empty, slot2=4), {})], RxError.FORMAT),
        ("broken rollover", UP, [owe3, _payload(empty, {})], RxError.ROLLOVER),
        ("G0 with nothing owed", UP, [_payload(dict(empty, slot3=0), {})], RxError.NO_DATA),
        ("G3 padding", UP, [_payload(dict(empty, slot1=3), {1: g3_pad})], RxError.PADDING),
        ("H0 S2M NDR", UP, [_payload(empty, {0: 1 << _fmt(UP, "H", 0).fields[3][1]})], RxError.NDR),
        ("invalid message with bits", UP, [_payload(empty, {0: _place(UP, "H", 0, {1: rsp & ~1})})],
         RxError.INVALID),
        ("illegal opcode", UP, [_payload(dict(empty, slot1=1), {1: _place(UP, "G", 1, {0: bad_req})})],
         RxError.OPCODE),
        ("three D2H Rsp", UP, [_payload(dict(empty, slot1=1),
                                        {0: _place(UP, "H", 0, {1: rsp, 2: rsp}),
                                         1: _place(UP, "G", 1, {1: rsp})})], RxError.MAX),
        ("Sz without data header", UP, [_payload(dict(empty, sz=1), {})], RxError.SZ),
        ("data header without Sz", UP, [_payload(dict(empty, slot1=0, slot2=0, slot3=0),
                                                 {0: _place(UP, "H", 0, {0: _DHDR}), 1: 1, 2: 2, 3: 3})],
         RxError.SZ),
        ("control flit while owed", UP, [owe3, seal(llcrd)], RxError.TYPE),
        ("LLCRD reserved bit", DOWN, [seal(llcrd | 1 << 40)], RxError.CONTROL),
        ("control flit slot 2", DOWN, [seal(llcrd | 1 << 300)], RxError.CONTROL),
        ("reserved LLCTRL", DOWN, [seal(llcrd | 0b0111 << 32)], RxError.CONTROL),
        # CXL 1.1 / CXL 3.x §4.2.5 packing rules (tests/test_conformance.py has the wording)
        ("MDH slot with one Data Header", UP,
         [_payload(dict(empty, sz=1, slot1=3, slot2=0, slot3=0), {1: _place(UP, "G", 3, {0: _DHDR}), 2: 5, 3: 6})],
         RxError.MDH),
        ("two Data Headers without MDH", DOWN,
         [_payload(dict(empty, sz=1, slot0=1, slot1=0, slot2=0, slot3=2),
                   {0: _place(DOWN, "H", 1, {0: dhdr_dn}), 1: 5, 2: 6, 3: _place(DOWN, "G", 2, {1: dhdr_dn})})],
         RxError.MDH),
        ("MDH flit with another Data Header", DOWN,
         [_payload(dict(empty, sz=1, slot0=3, slot1=0, slot2=0, slot3=2),
                   {0: _place(DOWN, "H", 3, {0: dhdr_dn, 1: dhdr_dn}), 1: 5, 2: 6,
                    3: _place(DOWN, "G", 2, {1: dhdr_dn})})], RxError.MDH),
        ("no data in the slot after a Data Header", UP,
         [_payload(dict(empty, sz=1, slot1=2, slot2=1, slot3=0), {1: _place(UP, "G", 2, {1: _DHDR}), 3: 7})],
         RxError.DATA_SLOT),
        ("no data in the next data slot after a rollover chunk", UP,
         [_payload(dict(empty, sz=1, slot0=0, slot1=0, slot2=0, slot3=0), {0: _place(UP, "H", 0, {0: _DHDR}),
                                                                           1: 1, 2: 2, 3: 3}),
          _payload(dict(empty, sz=1, slot0=0, slot1=0, slot2=1, slot3=0), {0: _place(UP, "H", 0, {0: _DHDR}),
                                                                           1: 4, 3: 5})], RxError.DATA_SLOT),
        ("D2H Rsp not tightly packed", UP, [_payload(empty, {0: _place(UP, "H", 0, {2: rsp})})], RxError.PACKING),
        ("D2H Data Headers not tightly packed", UP,
         [_payload(dict(empty, sz=1, slot1=3, slot2=0, slot3=0),
                   {1: _place(UP, "G", 3, {1: _DHDR, 2: _DHDR}), 2: 5, 3: 6})], RxError.PACKING),
    ]
    return cases


@pytest.mark.parametrize("registered", (False, True))
@pytest.mark.parametrize("case", _malformed(), ids=lambda c: c[0])
def test_malformed_flits(case, registered):
    name, direction, stream, code = case
    rx = Unpacker(direction)
    for flit in stream[:-1]:
        rx.receive(flit)
    with pytest.raises(FlitError) as e:
        rx.receive(stream[-1])
    assert expected_code(e.value) is code, f"{name}: the reference says {e.value}"
    good = F.pack(direction, [F.random_msg(random.Random(1), ch) for ch in direction.channels])
    statuses, _ = check(direction, stream + good, rng=random.Random(2), registered=registered)
    assert statuses[len(stream) - 1].error is code and statuses[len(stream) - 1].rule_error


def test_init_param_fields_from_the_specification_layout():
    """CXL 1.1 Table 42 / CXL 3.x Table 4-10: INIT.Param's LLR Wrap Value is payload 31:24 (slot 0 byte
    11); the RTL reports it (and the Interconnect Version, payload 3:0) from a flit built by hand."""
    by_hand = bytearray(64)
    by_hand[0], by_hand[4], by_hand[8], by_hand[11] = 0x01, 0x8C, 0x02, 0x3C
    got, statuses, *_ = harness(False).run(Job([seal(bytes(by_hand))], [0], (1.0,) * 3, 0))
    assert statuses[0].good and statuses[0].ctl == ("INIT.Param", {"version": 2, "llr_wrap": 0x3C})


def test_early_verdicts_describe_the_flit_its_caller_registered():
    """``FlitUnpacker(early=True)`` hands out its first-half CRC verdict and control-flit matches (the
    link port's pre-check reads them instead of a CRC tree of its own): after an edge with
    ``early_load`` they describe the flit ``early_payload`` carried, ``early_crc_bad`` as the CRC
    check of ``models.flit.seal`` and ``early_ctl_hits`` one-hot at the kind ``decode_control`` finds
    (none for a protocol flit or a control flit with a reserved bit set), and they hold while
    ``early_load`` is low."""
    rng = random.Random(7)
    payloads = []
    for kind in CONTROL_KIND_NAMES:
        spec = CONTROL_KINDS[kind][2]
        for _ in range(3):
            fields = {name: rng.getrandbits(max(s + w for s, _, w in pieces)) for name, pieces in spec.items()}
            payloads.append(encode_control(control(kind, **fields)))
    packer = Packer(Direction.DOWNSTREAM)
    for _ in range(6):
        packer.push(F.random_msg(rng, rng.choice(Direction.DOWNSTREAM.channels)))
    payloads += [int.from_bytes(f[:64], "little") for f in packer.drain()]
    fixed, fmask, _, _ = CONTROL_TABLES["LLCRD"]
    reserved = ~(fixed | fmask) & ((1 << 128) - 1)         # slot 0 bits an LLCRD must leave 0
    payloads.append(fixed | (reserved & -reserved))        # one of them set: no kind matches
    flits = []
    for p in payloads:
        good = seal(p)
        flits.append(good)
        bad = int.from_bytes(good, "little") ^ (1 << rng.randrange(528))
        flits.append(bad.to_bytes(len(good), "little"))

    def expected(flit):
        payload = int.from_bytes(flit[:64], "little")
        try:
            kind = decode_control(payload).kind
        except FlitError:
            kind = None
        hits = sum(1 << i for i, k in enumerate(CONTROL_KIND_NAMES) if k == kind)
        return int(seal(flit[:64]) != flit), hits

    dut = FlitUnpacker(False, early=True)
    seen = []

    async def bench(ctx):
        for flit, other in zip(flits, flits[1:] + flits[:1]):
            ctx.set(dut.early_payload, int.from_bytes(flit, "little"))
            ctx.set(dut.early_load, 1)
            await ctx.tick()
            ctx.set(dut.early_payload, int.from_bytes(other, "little"))
            ctx.set(dut.early_load, 0)
            now = (ctx.get(dut.early_crc_bad), ctx.get(dut.early_ctl_hits))
            await ctx.tick()
            seen.append((now, (ctx.get(dut.early_crc_bad), ctx.get(dut.early_ctl_hits))))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == len(flits)
    for i, (flit, (now, held)) in enumerate(zip(flits, seen)):
        assert now == expected(flit), f"flit {i}: got (crc_bad, hits) {now}, want {expected(flit)}"
        assert held == now, f"flit {i}: changed while early_load was low: {now} -> {held}"
    assert {expected(f)[1] for f in flits} >= {1 << i for i in range(len(CONTROL_KIND_NAMES))} | {0}
    assert {expected(f)[0] for f in flits} == {0, 1}


# ---------------------------------------------------------------- 4. discard
def test_discard_drops_held_flit():
    """``discard`` high in a cycle where flit k is held retires k at the next edge as if it had never
    arrived, even with the outputs backpressured: its status cycle shows ``done`` and ``discarded``
    only, and everything else (messages, credits, verdicts, counters) is what the reference gives for
    the stream without the discarded flits.  ``discard`` with nothing held does nothing.  Streams of
    both directions, random gaps and backpressure, about a quarter of the flits discarded."""
    for upstream in (True, False):
        direction = DIRS[upstream]
        dut = FlitUnpacker(upstream, depth=2)
        job = {}

        async def bench(ctx, dut=dut, job=job):
            rng, values = job["rng"], [int.from_bytes(f, "little") for f in job["flits"]]
            drop, ready = job["drop"], job["ready"]
            got = {name: [] for name in PORTS}
            statuses, taken, retired, idle, empty_discards = [], 0, 0, 0, 0
            for _ in range(200 + 60 * len(values)):
                offer = taken < len(values) and rng.random() < 0.7
                ctx.set(dut.flit.valid, offer)
                if offer:
                    ctx.set(dut.flit.payload, values[taken])
                held = taken > retired              # flit number ``retired`` is in the input register
                dis = (held and retired in drop) or (not held and rng.random() < 0.3)
                empty_discards += dis and not held
                ctx.set(dut.discard, dis)
                drain = len(statuses) == len(values)
                any_valid = False
                for name, pr in zip(PORTS, ready):
                    port = getattr(dut, name)
                    rdy = drain or rng.random() < pr
                    ctx.set(port.ready, rdy)
                    if ctx.get(port.valid):
                        any_valid = True
                        if rdy:
                            got[name].append(ctx.get(port.payload).as_value().value)
                if offer and ctx.get(dut.flit.ready):
                    taken += 1
                await ctx.tick()
                if ctx.get(dut.done):
                    assert not (dis and held) or retired in drop
                    statuses.append((retired, ctx.get(dut.discarded),
                                     Harness._status(SimpleNamespace(dut=dut), ctx)))
                    retired += 1
                else:
                    assert not (dis and held), f"flit {retired}: discard did not retire it"
                    assert not ctx.get(dut.discarded)
                if drain:
                    idle = 0 if any_valid else idle + 1
                    if idle >= 3:
                        break
            else:
                raise AssertionError(f"hang: {retired} of {len(values)} flits retired")
            job.update(got=got, statuses=statuses, crc=ctx.get(dut.crc_errors),
                       rule=ctx.get(dut.rule_errors), empty_discards=empty_discards)

        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        for seed in range(6):
            rng = random.Random(1000 + seed)
            flits = []
            while len(flits) < 12:
                flits += random_stream(rng, direction)
            drop = {k for k in range(len(flits)) if rng.random() < 0.25}
            want_status, want_msgs = reference(direction, [f for k, f in enumerate(flits) if k not in drop])
            job.clear()
            job.update(rng=rng, flits=flits, drop=drop, ready=[rng.choice((1.0, 0.5, 0.25)) for _ in PORTS])
            if seed:
                sim.reset()
            sim.run()
            where = f"upstream={upstream} seed={seed} drop={sorted(drop)}"
            assert [k for k, *_ in job["statuses"]] == list(range(len(flits))), where
            wants = iter(want_status)
            for k, discarded, g in job["statuses"]:
                if k in drop:
                    assert discarded and g == Status(0, 0, 0, RxError.NONE, FlitKind.PROTOCOL, Credits(),
                                                     Credits(), 0, None), (where, k, g)
                    continue
                w = next(wants)
                assert not discarded, (where, k)
                if not w.good:
                    g = g._replace(kind=None, credits=None, mem_credits=None, acks=None, ctl=None)
                assert g == w, f"{where}: flit {k}: RTL {g} != reference {w}"
            assert job["got"] == want_msgs, where
            assert job["crc"] == sum(s.crc_error for s in want_status), where
            assert job["rule"] == sum(s.rule_error for s in want_status), where
            assert job["empty_discards"] > 0, where


# ---------------------------------------------------------------- parameters and Verilog
@pytest.mark.parametrize("kwargs", [dict(upstream=1), dict(upstream=True, depth=0), dict(upstream="up"),
                                    dict(upstream=True, early=1), dict(upstream=True, stall=0)])
def test_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError, match="upstream|depth|early|stall"):
        FlitUnpacker(**kwargs)


@pytest.mark.slow        # make test converts the whole device (both link ends, DCOH) for the system testbench
def test_converts_to_verilog():
    text = verilog.convert(FlitUnpacker(True), name="flit_unpacker", emit_src=False)
    assert "module flit_unpacker" in text
