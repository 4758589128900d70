"""RTL TX flit packer (hdl/link/tx.py) against the golden model ``models.flit.Packer``.

Every test drives the RTL and a reference ``Packer`` in lockstep: in each cycle where the RTL decides a
flit (its skid register empty, not paused) the reference's ``next_flit()`` is called first, then
the messages the RTL accepted in the *previous* cycle are pushed and the credits/acks handed in then are
added.  The packer plans each flit one cycle ahead (hdl/link/tx.py, "Timing"), so a decision sees the
inputs of two or more cycles before it.  The decided flit enters the packer's output stages
(``FlitPacker.OUTPUT_STAGES`` - 1 registers before the port, the CRC's among them), which move
together at each advance (while the skid register beside the port is empty); at the
(OUTPUT_STAGES - 1)-th advance it leaves stage B, into the port register if that loads (it is empty
or its flit is taken: the flit is then offered OUTPUT_STAGES cycles after its decision if nothing
stalled), else into the skid register, whose flit the port takes first when it loads.  The harness
models these registers and, after every clock edge, the RTL must offer exactly the flit of the
modelled port register (or none).
Every transferred flit is also decoded by ``models.flit.Unpacker``, which must never raise, and at the
end every message, credit and ack must have come out, in per-channel order.

One simulator per direction is built once and reused (``Simulator.reset``): elaborating the packer
costs more than simulating one scenario.
"""

import collections
import json
import random

import pytest
from amaranth.back import verilog
from hypothesis import given, strategies as st

from cxl.control import is_ack_only_llcrd
from hdl.link.tx import COUNTER_BITS, FlitPacker
from models.flit import (CREDIT_CLASSES, FLIT_BYTES, Credits, Direction, Packer, Unpacker, deframe,
                         msg_from_json, random_msg, stream_payload as encode, write_vectors)
from tb.reused_sim import ReusedSimulator

# Constructors that raise on bad parameters leave a half-made Elaboratable behind; that is expected.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

VECTOR_MIXES = 100
COUNTER_MAX = (1 << COUNTER_BITS) - 1




class Harness(ReusedSimulator):
    """One packer per direction in a reusable simulator.  ``run(scenario)`` plays a scenario:

    * ``messages``: {channel: [FlitMsg]} to hand in, each channel in order;
    * ``cycles``: per cycle a dict with ``valid`` (channel -> offer the next message if any),
      ``ready``, ``pause``, ``crd`` (req, rsp, data) and ``acks`` additions; after the list, the
      harness drains: ready, no pause, every pending message offered, until nothing is left.

    Returns the transferred flits (bytes) and the reference packer."""

    def __init__(self, upstream, **params):
        self.direction = Direction.UPSTREAM if upstream else Direction.DOWNSTREAM
        dut = FlitPacker(upstream, **params)
        self.ports = dict(zip(self.direction.channels, (dut.req, dut.rsp, dut.data)))
        super().__init__(dut)

    async def _bench(self, ctx):
        sc = self.job
        if sc is None:                     # the constructor runs once when the testbench is added
            return
        dut, chans = self.dut, self.direction.channels
        ref = Packer(self.direction, wait=dut.wait, credit_batch=dut.credit_batch)
        pending = {ch: list(sc["messages"].get(ch, ())) for ch in chans}
        flits, expected, self.transfers = [], None, []
        idle = {"valid": {ch: True for ch in chans}, "ready": True, "pause": False, "crd": (0, 0, 0), "acks": 0}
        cycle, drain_limit = 0, len(sc["cycles"]) + 20 * (sum(map(len, pending.values())) + 8)
        late = ([], (0, 0, 0), 0)          # what was handed in during the previous cycle (see below)
        # The packer's registers after the decision, as the model has them (None: no flit): stages W,
        # A and B (the flits decided at the last OUTPUT_STAGES - 1 advances, oldest first), the port
        # register and the skid register beside it.
        in_flight = collections.deque([None] * (dut.OUTPUT_STAGES - 1))
        port = skid = None
        self.max_decided = 0               # the most flits decided and not yet taken, over the run
        while True:
            step = sc["cycles"][cycle] if cycle < len(sc["cycles"]) else idle
            draining = cycle >= len(sc["cycles"])
            if draining and not ref.busy and not ref.acks and not any(ref.credits.values()) \
                    and not any(pending.values()) and not late[0] and not any(late[1]) and not late[2] \
                    and not any(in_flight) and port is None and skid is None:
                break
            assert cycle < drain_limit, "the packer does not drain"
            for ch in chans:
                offer = bool(step["valid"].get(ch)) and bool(pending[ch])
                ctx.set(self.ports[ch].valid, offer)
                if offer:
                    ctx.set(self.ports[ch].payload.as_value(), encode(pending[ch][0]))
            for k, n in zip(CREDIT_CLASSES, step["crd"]):
                ctx.set(getattr(dut, f"crd_{k}"), n)
            ctx.set(dut.ack_add, step["acks"])
            ctx.set(dut.flit.ready, step["ready"])
            ctx.set(dut.pause, step["pause"])

            valid, ready = ctx.get(dut.flit.valid), ctx.get(dut.flit.ready)
            if valid and ready:
                flits.append(ctx.get(dut.flit.payload).to_bytes(FLIT_BYTES, "little"))
                self.transfers.append(cycle)
            load = not valid or ready             # the port register loads (empty or taken)
            advance = skid is None                # the stages move while the skid register is empty
            decide = advance and not step["pause"]
            expected = None
            if decide:
                # Planned in the previous cycle: it sees what was handed in up to two cycles ago.
                expected = ref.next_flit()
            ref.push_together(late[0])               # handed in last cycle: seen from the next decision
            ref.return_credits(*late[1])
            ref.acknowledge(late[2])
            accepted = []
            for ch in chans:
                if ctx.get(self.ports[ch].valid) and ctx.get(self.ports[ch].ready):
                    accepted.append(pending[ch].pop(0))
            late = (accepted, tuple(step["crd"]), step["acks"])
            await ctx.tick()
            cycle += 1
            # The clock edge: the decided flit enters stage W on an advance, and the flit decided
            # OUTPUT_STAGES - 1 advances ago leaves stage B, into the port register if it loads (offered
            # OUTPUT_STAGES cycles after its decision if nothing stalls), else into the skid register.
            # A loading port takes the skid's flit first (the stages wait that cycle).
            leaving = in_flight.popleft() if advance else None
            if advance:
                in_flight.append(expected)
            if load:
                port, skid = (skid if skid is not None else leaving), None
            elif advance:
                skid = leaving
            decided = sum(f is not None for f in (*in_flight, port, skid))
            self.max_decided = max(self.max_decided, decided)
            got_valid = ctx.get(dut.flit.valid)
            assert got_valid == (port is not None), f"cycle {cycle}: valid {got_valid}, model {port}"
            if port is not None:
                got = ctx.get(dut.flit.payload).to_bytes(FLIT_BYTES, "little")
                assert got == port, f"cycle {cycle}:\n RTL   {got.hex()}\n model {port.hex()}"
                lazy = ctx.get(dut.flit_lazy)
                expect_lazy = is_ack_only_llcrd(int.from_bytes(port[:64], "little"))
                assert lazy == expect_lazy, f"cycle {cycle}: flit_lazy {lazy} for {port.hex()}"
        assert self.max_decided <= dut.DECIDED_MAX, \
            f"{self.max_decided} flits decided and untaken, above DECIDED_MAX = {dut.DECIDED_MAX}"
        self.result = flits, ref


_HARNESS = {}


def harness(upstream, **params):
    key = (upstream, tuple(sorted(params.items())))
    if key not in _HARNESS:
        _HARNESS[key] = Harness(upstream, **params)
    return _HARNESS[key]


def check_stream(direction, flits, messages, credits, acks):
    """Decode the RTL's flits: the unpacker must accept every one, and deliver everything in order."""
    rx = Unpacker(direction)
    got = {ch: [] for ch in direction.channels}
    got_credits, got_acks = Credits(), 0
    for flit in flits:
        r = rx.receive(flit)                           # raises FlitError on any broken rule
        for msg in r.messages:
            got[msg.chan].append(msg)
        got_credits += r.credits
        got_acks += r.acks
        assert r.mem_credits == Credits(), "the packer returns CXL.cache credits only"
    assert rx.owed == 0, "stream ends with data chunks owed"
    for ch in direction.channels:
        assert got[ch] == list(messages.get(ch, ())), ch.name
    assert got_credits == credits
    assert got_acks == acks


# ---------------------------------------------------------------- 1. the vectors
@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    path = write_vectors(tmp_path_factory.mktemp("vectors") / "flits.jsonl", count=VECTOR_MIXES, seed=7)
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("depth", [8, 4])
def test_vectors(vectors, depth):
    """Each mix loaded (as far as the queues hold it) while paused, credits and acks handed in first,
    then released: where the whole mix fitted before the first flit the RTL must give the vector's
    flits exactly; otherwise the rest is fed as space frees and checked against the lockstep model."""
    exact = 0
    for i, vec in enumerate(vectors):
        direction = Direction(vec["direction"])
        chans = direction.channels
        messages = {ch: [] for ch in chans}
        for obj in vec["messages"]:
            msg = msg_from_json(obj)
            messages[msg.chan].append(msg)
        h = harness(direction is Direction.UPSTREAM, depth=depth, data_depth=depth)
        fits = all(len(messages[ch]) <= h.dut.depths[ch] for ch in chans)
        credits = Credits(**vec["credits"])
        # Paused: the messages one per cycle in the vector's order (the order between an H2D Rsp and an
        # H2D Req matters: models.flit.pack), all credits and acks at once.
        order = [msg_from_json(obj).chan for obj in vec["messages"]] or [None]
        # One more paused cycle after the last message: the packer plans a flit a cycle ahead, so the
        # first decision sees what was handed in up to two cycles before it (hdl/link/tx.py, "Timing").
        cycles = [{"valid": {ch: True} if ch is not None else {}, "ready": False, "pause": True,
                   "crd": tuple(credits) if c == 0 else (0, 0, 0), "acks": vec["acks"] if c == 0 else 0}
                  for c, ch in enumerate(order)]
        cycles.append({"valid": {}, "ready": False, "pause": True, "crd": (0, 0, 0), "acks": 0})
        flits, _ = h.run({"messages": messages, "cycles": cycles})
        want = [deframe(bytes.fromhex(f)) for f in vec["flits"]]
        if fits:
            assert flits == want, f"mix {i}: RTL flits differ from the vector"
            exact += 1
        check_stream(direction, flits, messages, credits, vec["acks"])
    # Guard against a harness change that silently stops comparing with the vectors.
    print(f"{exact} of {len(vectors)} mixes compared exactly with the vectors")
    assert exact >= VECTOR_MIXES // (2 if depth >= 8 else 4), f"only {exact} mixes compared exactly"


# ---------------------------------------------------------------- 2. random traffic, lockstep
@st.composite
def scenarios(draw, direction, acks=True):
    chans = direction.channels
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    rng = random.Random(seed)                           # message contents; Hypothesis shapes the rest
    counts = draw(st.tuples(*[st.integers(0, 16)] * 3), label="messages per channel")
    messages = {ch: [random_msg(rng, ch) for _ in range(n)] for ch, n in zip(chans, counts)}
    small = st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 70))
    step = st.fixed_dictionaries({
        "valid": st.fixed_dictionaries({ch: st.integers(0, 3).map(bool) for ch in chans}),
        "ready": st.booleans() | st.just(True),
        "pause": st.integers(0, 7).map(lambda v: v == 0),
        "crd": st.tuples(small, small, small),
        "acks": small if acks else st.just(0),      # acks=False: LLCRDs only for credits
    })
    cycles = draw(st.lists(step, max_size=50), label="cycles")
    # Keep the pending counters inside their 10 bits even if no flit ever returned anything
    # (overflow is a precondition the RTL asserts, not a case to test here).
    total = [0, 0, 0, 0]
    for c in cycles:
        adds = list(c["crd"]) + [c["acks"]]
        for i, n in enumerate(adds):
            adds[i] = min(n, COUNTER_MAX - total[i])
            total[i] += adds[i]
        c["crd"], c["acks"] = tuple(adds[:3]), adds[3]
    return {"messages": messages, "cycles": cycles}


def _lockstep(data, upstream, params, acks=True):
    """One drawn scenario through the RTL packer with ``params``, checked flit by flit against the model."""
    h = harness(upstream, **params)
    sc = data.draw(scenarios(h.direction, acks), label="scenario")
    flits, _ = h.run(sc)
    credits = Credits(*(sum(c["crd"][i] for c in sc["cycles"]) for i in range(3)))
    acks = sum(c["acks"] for c in sc["cycles"])
    check_stream(h.direction, flits, sc["messages"], credits, acks)


@given(data=st.data())
def test_random_traffic_matches_model(data):
    upstream = data.draw(st.booleans(), label="upstream")
    # Default queues, queues shallower than the per-flit maxima (a flit then takes what is there),
    # and deeper ones.
    params = data.draw(st.sampled_from([{}, {"depth": 1, "data_depth": 2}, {"depth": 6, "data_depth": 5}]),
                       label="params")
    _lockstep(data, upstream, params)


@given(data=st.data())
def test_random_traffic_with_wait_matches_model(data):
    """As above with the packer allowed to hold a partly filled flit (``wait`` > 0): the RTL holds and
    sends in exactly the decisions where the model does."""
    upstream = data.draw(st.booleans(), label="upstream")
    params = data.draw(st.sampled_from([{"wait": 1}, {"wait": 3}, {"wait": 8, "depth": 1, "data_depth": 2},
                                        {"wait": 5, "depth": 6, "data_depth": 5}]), label="params")
    _lockstep(data, upstream, params)


@given(data=st.data())
def test_random_traffic_with_credit_batch_matches_model(data):
    """As above with an idle packer gathering credits before an LLCRD (``credit_batch`` > 1; no acks
    handed in, so that only credits decide the LLCRDs): the RTL sends its LLCRDs in exactly the
    decisions where the model does."""
    upstream = data.draw(st.booleans(), label="upstream")
    params = data.draw(st.sampled_from([{"credit_batch": 2}, {"credit_batch": 8},
                                        {"credit_batch": 5, "wait": 3, "depth": 1, "data_depth": 2}]),
                       label="params")
    _lockstep(data, upstream, params, acks=data.draw(st.booleans(), label="acks"))


def _trickle(h, chan, n, gap):
    """``n`` messages of ``chan``, one offered every ``gap`` cycles, the sink always ready."""
    rng = random.Random(5)
    chans = h.direction.channels
    on = {"valid": {chan: True}, "ready": True, "pause": False, "crd": (0, 0, 0), "acks": 0}
    off = {"valid": {}, "ready": True, "pause": False, "crd": (0, 0, 0), "acks": 0}
    sc = {"messages": {chan: [random_msg(rng, chan) for _ in range(n)]},
          "cycles": ([on] + [off] * (gap - 1)) * n}
    flits, _ = h.run(sc)
    check_stream(h.direction, flits, sc["messages"], Credits(), 0)
    assert all(ch == chan or not sc["messages"].get(ch) for ch in chans)
    return flits


@pytest.mark.parametrize("upstream", [True, False])
def test_wait_fills_flits(upstream):
    """Requests trickling in one every other cycle: with ``wait`` = 4 the RTL packs them into fewer,
    fuller flits than with ``wait`` = 0 (a packer that ignored ``wait`` would send one flit per
    request; the lockstep check catches it too), and no more flits than the model's count."""
    chan = Direction.UPSTREAM.channels[0] if upstream else Direction.DOWNSTREAM.channels[1]
    eager = _trickle(harness(upstream), chan, 12, 2)
    patient = _trickle(harness(upstream, wait=4), chan, 12, 2)
    assert len(eager) == 12, f"wait=0: {len(eager)} flits for 12 messages trickling in"
    assert len(patient) <= 12 // 2, f"wait=4: {len(patient)} flits for 12 messages, expected <= 6"


def test_streaming_one_flit_per_cycle():
    """A stream of write-backs (the data-heaviest case) with the sink always ready: from the first
    flit on, a flit leaves in every cycle until the stream ends (and the lockstep check holds)."""
    h = harness(True)
    rng = random.Random(1)
    lines = [random_msg(rng, h.direction.data_channel) for _ in range(24)]
    chans = h.direction.channels
    sc = {"messages": {h.direction.data_channel: lines},
          "cycles": [{"valid": dict.fromkeys(chans, True), "ready": True, "pause": False,
                      "crd": (0, 0, 0), "acks": 0}] * 40}
    flits, _ = h.run(sc)
    assert h.transfers == list(range(h.transfers[0], h.transfers[0] + len(flits))), "an idle cycle"
    # accepted at edge 1, planned in cycle 1, decided in cycle 2, offered OUTPUT_STAGES cycles later
    assert h.transfers[0] <= 3 + FlitPacker.OUTPUT_STAGES
    check_stream(h.direction, flits, sc["messages"], Credits(), 0)


def test_a_stalled_port_holds_decided_max_flits():
    """The sink refuses flits for 30 cycles while write-backs stream in: the packer goes on deciding
    until its output stages, the port and the skid register are full (``DECIDED_MAX`` flits, which
    the link port's retry-buffer reserve counts), then waits, and the flits come out in order."""
    h = harness(True)
    rng = random.Random(3)
    lines = [random_msg(rng, h.direction.data_channel) for _ in range(16)]
    chans = h.direction.channels
    cyc = {"valid": dict.fromkeys(chans, True), "pause": False, "crd": (0, 0, 0), "acks": 0}
    sc = {"messages": {h.direction.data_channel: lines},
          "cycles": [{**cyc, "ready": False}] * 30 + [{**cyc, "ready": True}] * 30}
    flits, _ = h.run(sc)
    assert h.max_decided == FlitPacker.DECIDED_MAX, h.max_decided
    assert h.transfers[0] == 30, h.transfers[:3]
    # after the stall the port, then the skid register, then the stages: a flit in every cycle
    assert h.transfers[:8] == list(range(30, 38)), h.transfers[:8]
    check_stream(h.direction, flits, sc["messages"], Credits(), 0)


# ---------------------------------------------------------------- 3. elaboration
@pytest.mark.slow        # make test converts the whole device (both link ends, DCOH) for the system testbench
def test_converts_to_verilog():
    for upstream in (True, False):
        text = verilog.convert(FlitPacker(upstream), name="flit_packer")
        assert "module flit_packer" in text


@pytest.mark.parametrize("kwargs, name", [
    ({"depth": 0}, "depth"), ({"data_depth": 0}, "data_depth"), ({"counter_bits": 0}, "counter_bits"),
    ({"depth": 2.5}, "depth"), ({"wait": -1}, "wait"), ({"wait": 256}, "wait"), ({"wait": 1.5}, "wait"),
    ({"wait": True}, "wait"), ({"credit_batch": 0}, "credit_batch"), ({"credit_batch": 65}, "credit_batch"),
])
def test_bad_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        FlitPacker(True, **kwargs)
    with pytest.raises(ValueError, match="upstream"):
        FlitPacker("up")
