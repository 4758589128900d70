"""Link ends with retry, credits and acks (hdl/link/port.py) in the loopback top (hdl/link/loopback.py).

Random messages go into all six channels (three each way) with random gaps, come out with random
backpressure, and must come out identical and in per-channel order: nothing lost, duplicated or
reordered.  The RTL's ``Assert``s are live in simulation (credits never negative or above the pool,
resume only with an empty unpacker), so any violation fails the test; neither end may report a link
error (which over-acknowledgement, a credit overflow or a timeout would raise).

Errors: (b) patterns driven through the wires' ``force`` inputs by a testbench that watches the flits
(a single corrupted flit, back-to-back errors, a corrupted replayed flit, a corrupted RETRY.Req and
RETRY.Ack, both directions at once); (c) a bit-error-rate sweep through the RTL injectors' thresholds;
a rule error (CRC-good malformed flit) on a bare ``LinkPort``, and one on a wire between two ports
with good flits right behind it (each message exactly once).  Every run has a cycle bound (no hang).

One loopback simulator is built per module (elaboration costs seconds) and ``reset()`` between runs.
Seeds are printed in the assertion messages.
"""

import copy
import random

import pytest
from amaranth.hdl import Elaboratable, Module, Shape
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hdl.link.loopback import LinkLoopback, flit_error_probability
from hdl.link.port import CREDIT_ROUND_TRIP, LinkPort, RETRY_KINDS
from hdl.link.retry import LinkRetry
from hdl.link.tx import FlitPacker
from hdl.link.ports import PAYLOAD_BITS, channel_shape, direction_channels
from tb.reused_sim import ReusedSimulator
from hdl.link.rx import CONTROL_TABLES
from models.flit import FLIT_BYTES, Direction, Unpacker, control, encode_control, random_msg, seal
from models.flit import stream_payload as encode

D2H = direction_channels(True)
H2D = direction_channels(False)
# (top-level input, top-level output) stream names per channel
ROUTES = {ch: (ch.name.lower(), f"host_{ch.name.lower()}") for ch in D2H}
ROUTES.update({ch: (f"host_{ch.name.lower()}", ch.name.lower()) for ch in H2D})
MASK = (1 << PAYLOAD_BITS) - 1
# cycles from a flit's corruption on a wire to its CRC check in the receiving port (the port's pre-check
# stage), with margin
SETTLE_CYCLES = 4




def retry_kind(flit):
    """'RETRY.Req' etc. if the 528-bit flit's payload is a RETRY flit, else None (the port's rule)."""
    p = flit & MASK
    for kind in RETRY_KINDS:
        fixed, fmask, _, _ = CONTROL_TABLES[kind]
        if p & ~fmask & MASK == fixed:
            return kind
    return None


_POOL = {}


def messages(ch, n, rng):
    """n random message payloads of ``ch`` (a cached pool of random messages, sampled)."""
    if ch not in _POOL:
        r = random.Random(ch.value)
        _POOL[ch] = [encode(random_msg(r, ch)) for _ in range(64)]
    return [rng.choice(_POOL[ch]) for _ in range(n)]


def _count_transfers(ctx, send, ins, outs, idx, got, seed, cycle):
    """This cycle's handshakes: count the messages handed in, and check each one delivered is the next
    one sent on its channel (nothing wrong, duplicated or reordered)."""
    for ch in send:
        if ctx.get(ins[ch].valid) and ctx.get(ins[ch].ready):
            idx[ch] += 1
        if ctx.get(outs[ch].valid) and ctx.get(outs[ch].ready):
            v = ctx.get(outs[ch].payload.as_value())
            k = len(got[ch])
            assert k < len(send[ch]) and v == send[ch][k], (
                f"seed {seed}: {ch.name} message {k} wrong/duplicated/reordered at cycle {cycle}")
            got[ch].append(v)


class Harness(ReusedSimulator):
    def __init__(self, **params):
        super().__init__(LinkLoopback(**{"rx_depth": 16, **params}))

    async def _bench(self, ctx):
        job = self.job
        if job is None:
            return
        dut = self.dut
        rng = random.Random(job["seed"])
        send = {ch: messages(ch, job["n"].get(ch, 0), rng) for ch in D2H + H2D}
        got = {ch: [] for ch in send}
        idx = {ch: 0 for ch in send}
        p_valid, p_ready = job.get("p_valid", 0.7), job.get("p_ready", 0.6)
        for w in ("up", "down"):
            ctx.set(getattr(dut, f"{w}_threshold"), job.get(f"{w}_threshold", 0))
        corrupt = job.get("corrupt")          # callable(wire, number, flit, state) -> bool
        state = {"up": {}, "down": {}}
        decided = {"up": {}, "down": {}}
        total = sum(len(v) for v in send.values())
        limit = job.get("limit", 400 + 12 * total)
        ins = {ch: getattr(dut, ROUTES[ch][0]) for ch in send}
        outs = {ch: getattr(dut, ROUTES[ch][1]) for ch in send}
        cycle = 0
        while True:
            done = all(len(got[ch]) == len(send[ch]) for ch in send)
            if done:
                break
            assert cycle < limit, (f"seed {job['seed']}: hang, {sum(map(len, got.values()))} of {total} "
                                   f"messages out after {cycle} cycles")
            for ch in send:
                offer = idx[ch] < len(send[ch]) and rng.random() < p_valid
                ctx.set(ins[ch].valid, offer)
                if offer:
                    ctx.set(ins[ch].payload.as_value(), send[ch][idx[ch]])
                ctx.set(outs[ch].ready, rng.random() < p_ready)
            if corrupt is not None:
                for w in ("up", "down"):
                    wire = getattr(dut, f"{w}_wire")
                    force = False
                    if ctx.get(wire.valid):
                        num = ctx.get(getattr(dut, f"{w}_flits"))
                        if num not in decided[w]:
                            decided[w][num] = bool(corrupt(w, num, ctx.get(wire.payload), state[w]))
                        force = decided[w][num]
                    ctx.set(getattr(dut, f"{w}_force"), force)
            _count_transfers(ctx, send, ins, outs, idx, got, job["seed"], cycle)
            if "trace" in job:
                job["trace"](ctx, dut, cycle)
            await ctx.tick()
            cycle += 1
        # A flit corrupted in the last cycles may still be on its way to a port's CRC check (the port's
        # pre-check stage): let it arrive, corrupting nothing more, before counting.  (The thresholds
        # are set again by the next job that uses them.)
        for w in ("up", "down"):
            ctx.set(getattr(dut, f"{w}_force"), False)
            ctx.set(getattr(dut, f"{w}_threshold"), 0)
        await ctx.tick().repeat(job.get("settle", SETTLE_CYCLES))
        res = {"cycles": cycle}
        for side in ("dev", "host"):         # credits each end holds again (all, once the link is quiet)
            port = getattr(dut, f"{side}_port")
            res[f"{side}_credits"] = {k: ctx.get(getattr(port.tx_credits, k)) for k in port.credits}
        for side in ("dev", "host"):
            for c in ("retries", "crc_errors", "rule_errors", "flits_sent", "flits_replayed", "link_error"):
                res[f"{side}_{c}"] = ctx.get(getattr(dut, f"{side}_{c}"))
        for w in ("up", "down"):
            res[f"{w}_injected"] = ctx.get(getattr(dut, f"{w}_injected"))
            res[f"{w}_flits"] = ctx.get(getattr(dut, f"{w}_flits"))
        self.result = res


@pytest.fixture(scope="module")
def harness():
    return Harness()


def mix(n_each):
    return {ch: n_each for ch in D2H + H2D}


def check_counts(res, seed):
    errs = res["up_injected"] + res["down_injected"]
    crc = res["dev_crc_errors"] + res["host_crc_errors"]
    assert crc == errs, f"seed {seed}: {errs} flits corrupted on the wires, {crc} CRC errors counted: {res}"
    if errs:
        assert res["dev_retries"] + res["host_retries"] >= 1, f"seed {seed}: errors but no retry: {res}"
    assert res["dev_rule_errors"] + res["host_rule_errors"] == 0, f"seed {seed}: {res}"
    assert res["dev_link_error"] == res["host_link_error"] == 0, f"seed {seed}: link error: {res}"


# ---------------------------------------------------------------- (a) no errors
@pytest.mark.parametrize("seed", [1, 2])
def test_no_errors_random_traffic(harness, seed):
    res = harness.run({"seed": seed, "n": mix(40)})
    check_counts(res, seed)
    assert res["dev_retries"] == res["host_retries"] == 0
    assert res["dev_flits_replayed"] == res["host_flits_replayed"] == 0


def test_full_rate_no_backpressure():
    """Streaming data one way, everything always ready, into receive queues (the sender's credit pools)
    deeper than a credit's round trip (``CREDIT_ROUND_TRIP``): close to one flit per cycle.  (With the
    harness's 16-deep queues the stream is bound by its 16 data credits per round trip instead.)"""
    assert 32 > CREDIT_ROUND_TRIP
    res = Harness(rx_depth=32).run({"seed": 5, "n": {D2H[2]: 160}, "p_valid": 1.0, "p_ready": 1.0})
    check_counts(res, 5)
    # 160 lines need 170 flits (17 per 16 lines, models.flit.optimum).
    assert res["up_flits"] >= 170
    assert res["cycles"] <= 170 * 1.1 + 20, res


def test_credit_round_trip_on_an_idle_link():
    """One D2H Req on an idle loopback, every consumer ready: from the cycle the device end takes it to
    the cycle its credit is back in the device's pool, at most ``CREDIT_ROUND_TRIP`` cycles (the figure
    ``default_credit_batch`` sizes batches by; each register added on the path adds a cycle here)."""
    dut = LinkLoopback(rx_depth=32)
    ch, port = D2H[0], dut.dev_port
    inp, out = (getattr(dut, name) for name in ROUTES[ch])
    msg = messages(ch, 1, random.Random(3))[0]
    got = {}

    async def bench(ctx):
        ctx.set(out.ready, 1)
        await ctx.tick().repeat(40)                   # the link comes up, the pools are full
        full = ctx.get(port.tx_credits.req)
        ctx.set(inp.valid, 1)
        ctx.set(inp.payload.as_value(), msg)
        for cycle in range(200):
            if ctx.get(inp.valid) and ctx.get(inp.ready):
                got["handed"] = cycle
            if ctx.get(out.valid):
                assert ctx.get(out.payload.as_value()) == msg
                got["taken"] = cycle
            await ctx.tick()
            ctx.set(inp.valid, 0)
            if "taken" in got and ctx.get(port.tx_credits.req) == full:
                got["back"] = cycle + 1
                return
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got.get("back") is not None, f"the credit never came back: {got}"
    assert got["back"] - got["handed"] <= CREDIT_ROUND_TRIP, got


def test_credit_batch_gathers_llcrds_without_slowing_the_sender():
    """Lines streaming up into 32-deep receive queues, where the host end gathers its credit returns
    (``credit_batch`` 8 by default there: ``default_credit_batch``).  At full rate its idle packer sends
    at most half the LLCRDs of the eager rule (``credit_batch=1``) and the stream takes no more cycles;
    with a slow consumer (credits freed long after their flits were acknowledged, so no ack carries
    the last ones) the quiet timer still returns every credit: once the link is quiet the device holds
    its whole pool again.  Every line arrives once and in order (the harness checks)."""
    eager = Harness(rx_depth=32, credit_batch=1)
    batched = Harness(rx_depth=32)
    assert batched.dut.host_port.credit_batch == 8 and eager.dut.host_port.credit_batch == 1
    runs = {}
    for p_ready in (1.0, 0.3):
        job = {"seed": 7, "n": {D2H[2]: 160}, "p_valid": 1.0, "p_ready": p_ready, "settle": 40}
        for name, h in (("eager", eager), ("batched", batched)):
            res = runs[name, p_ready] = h.run(job)
            check_counts(res, job["seed"])
            assert res["dev_credits"] == h.dut.dev_port.credits, (name, p_ready, res)
    e, b = runs["eager", 1.0], runs["batched", 1.0]
    assert b["down_flits"] * 2 <= e["down_flits"], (b, e)
    assert b["cycles"] <= e["cycles"] + 2, (b, e)


def test_pack_wait_fills_flits(harness):
    """Requests trickling into the device end (one every few cycles, one way): with the packers' wait
    (``pack_wait`` = 4, through the loopback's port parameters) every request still comes out once and
    in order, in fewer flits on the up wire than with wait 0 (a port that dropped ``pack_wait`` would
    send about one flit per request)."""
    job = {"seed": 21, "n": {D2H[0]: 60}, "p_valid": 0.4, "p_ready": 1.0}
    eager = Harness(pack_wait=0).run(job)
    patient = Harness(pack_wait=4).run(job)
    for res in (eager, patient):
        check_counts(res, job["seed"])
    assert eager["up_flits"] >= 50, eager
    assert patient["up_flits"] <= eager["up_flits"] * 2 // 3, (patient, eager)


def test_default_wait_costs_a_quiet_link_nothing(harness):
    """The default packer wait holds a flit only right after a protocol flit: a lone message on a quiet
    link (here one each way, right after reset) arrives in as many cycles as with the eager packer (a
    packer whose window started open at reset would hold each of them ``pack_wait`` cycles)."""
    job = {"seed": 4, "n": {D2H[0]: 1, H2D[0]: 1}, "p_valid": 1.0, "p_ready": 1.0}
    eager = Harness(pack_wait=0).run(job)
    default = harness.run(job)
    for res in (eager, default):
        check_counts(res, job["seed"])
    assert default["cycles"] == eager["cycles"], (default, eager)


@pytest.mark.parametrize("value", [-1, 256, 1.5, True])
def test_bad_pack_wait(value):
    with pytest.raises(ValueError, match="pack_wait"):
        LinkPort(True, pack_wait=value)


@pytest.mark.parametrize("value", [0, 65, 2.0, True])
def test_bad_credit_batch(value):
    with pytest.raises(ValueError, match="credit_batch"):
        LinkPort(True, credit_batch=value)


RETRY_PARAMS = dict(depth=16, reserve=4, ack_timer=4, retry_timeout=8, retry_limit=4, ack_timeout=64, ack_add_bits=10)


@pytest.mark.parametrize("name, value", [("depth", 2), ("depth", 24), ("depth", 512), ("reserve", 15),
                                         ("reserve", -1), ("reserve", True), ("ack_timer", 0),
                                         ("retry_timeout", 1.5), ("ack_add_bits", 3)])
def test_bad_retry_parameter_names_itself(name, value):
    """The retry block (hdl/link/retry.py) rejects a bad parameter at elaboration, naming it."""
    with pytest.raises(ValueError, match=name):
        LinkRetry(**{**RETRY_PARAMS, name: value})


# ---------------------------------------------------------------- (b) error patterns
def nth(numbers):
    numbers = set(numbers)
    return lambda w, num, flit, st: w == "up" and num in numbers


def after_kind(first, kind, offset, wire_kind):
    """Corrupt up-wire flit ``first``; then, on ``wire_kind``, the flit ``offset`` after the first ``kind``
    flit seen there (offset 0: that flit itself)."""
    def f(w, num, flit, st):
        if w == "up" and num == first:
            return True
        if w != wire_kind:
            return False
        if "at" not in st and retry_kind(flit) == kind:
            st["at"] = num
        return "at" in st and num == st["at"] + offset and not st.setdefault("done", False) \
            and not st.update(done=True)
    return f


PATTERNS = {
    "single": nth([20]),
    "back_to_back": nth([20, 21, 22]),
    "during_replay": after_kind(20, "RETRY.Ack", 2, "up"),        # a replayed flit
    "retry_req": after_kind(20, "RETRY.Req", 0, "down"),           # the host's RETRY.Req
    "retry_ack": after_kind(20, "RETRY.Ack", 0, "up"),             # the device's RETRY.Ack
    "both_ways": lambda w, num, flit, st: num == 20,
    "burst_each_way": lambda w, num, flit, st: num in (10, 11, 30, 31, 32, 33, 50),
}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_error_patterns(harness, name):
    seed = 11
    res = harness.run({"seed": seed, "n": mix(40), "corrupt": PATTERNS[name]})
    check_counts(res, seed)
    assert res["up_injected"] + res["down_injected"] >= 1, res
    assert res["dev_flits_replayed"] + res["host_flits_replayed"] >= 1, res
    print(name, res)


# ---------------------------------------------------------------- (c) bit error rates
# (BER, messages per channel): at 1e-3 a flit is hit with p = 0.41, so the link crawls (most replays
# are hit again) and a small mix already gives thousands of flits.
BERS = ((1e-6, 700), (1e-5, 700), (1e-4, 700), (1e-3, 20))


# ~115 s in amaranth.sim: `make regress` (pytest -m slow) runs it; make test has the device-through-link
# runs at BER 2e-4 and 1e-3 and the traffic checker at BER 1e-3, and make bench the Verilator BER runs
# (>= 10^6 flits per rate).
@pytest.mark.slow
def test_ber_sweep(harness):
    """>= 10^4 flits over the sweep (both wires, replays and control flits included).  At 1e-6
    (p_flit = 5.3e-4) about a thousand flits per wire see about one error: that rate mostly checks the
    error-free path; the higher rates retry many times.  Every message must come out once, in order."""
    total_flits, report = 0, {}
    for i, (ber, n) in enumerate(BERS):
        thr = round(flit_error_probability(ber) * 2**32)
        seed = 100 + i
        res = harness.run({"seed": seed, "n": mix(n), "p_valid": 0.9, "p_ready": 0.9,
                           "up_threshold": thr, "down_threshold": thr, "limit": 40_000})
        check_counts(res, seed)
        total_flits += res["up_flits"] + res["down_flits"]
        report[ber] = res
        print(f"BER {ber:g}: {res}")
    print(f"total flits {total_flits}")
    assert total_flits >= 10_000, f"only {total_flits} flits"
    for ber in (1e-4, 1e-3):
        assert report[ber]["dev_retries"] + report[ber]["host_retries"] >= 5, report[ber]


# ---------------------------------------------------------------- malformed input on a bare port
def test_rule_error_retry_no_hang():
    """A CRC-good flit that breaks a rule (a reserved header bit) is counted, a RETRY.Req for it goes
    out, the port discards until a RETRY.Ack, then takes the replayed flits."""
    dut = LinkPort(True)
    result = {}

    async def bench(ctx):
        bad = seal(1 << 1)                          # protocol flit, header bit 1 (reserved) set
        good = seal(encode_control(control("LLCRD")))   # an empty LLCRD: retryable, returns nothing
        ack = seal(encode_control(control("RETRY.Ack", eseq=0)))
        to_int = lambda b: int.from_bytes(b, "little")
        script = [to_int(bad), None, None, None, to_int(good), to_int(ack), to_int(good)]
        sent_req, goods = None, 0
        for cycle in range(300):
            f = script.pop(0) if script else None
            ctx.set(dut.rx_flit.valid, f is not None)
            if f is not None:
                ctx.set(dut.rx_flit.payload, f)
            ctx.set(dut.tx_flit.ready, 1)
            if ctx.get(dut.tx_flit.valid):
                k = retry_kind(ctx.get(dut.tx_flit.payload))
                if k == "RETRY.Req" and sent_req is None:
                    sent_req = cycle
            goods += ctx.get(dut.rx_good)
            await ctx.tick()
        result.update(rule=ctx.get(dut.rule_errors), req=sent_req, goods=goods,
                      waiting=ctx.get(dut.rx_waiting), retries=ctx.get(dut.retries))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert result["rule"] == 1, result
    assert result["req"] is not None, result
    assert result["waiting"] == 0, result          # resumed after the Ack
    assert result["goods"] == 1, result            # the LLCRD before the Ack dropped, the one after taken


# ---------------------------------------------------------------- malformed flit between two ports
class _Pair(Elaboratable):
    """Two ``LinkPort``s: device -> host over a wire the testbench carries (so it can put any flit on
    it, here a CRC-good malformed one), host -> device joined directly.  The eager packer
    (``pack_wait=0``): a flit goes as soon as a message waits, so with every source offering a message
    per cycle a flit with messages follows the malformed one in the next cycle (with the default wait
    the device holds flits until they are full, here every 3-4 cycles)."""

    def __init__(self):
        self.dev, self.host = LinkPort(True, pack_wait=0), LinkPort(False, pack_wait=0)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dev, m.submodules.host = self.dev, self.host
        wiring.connect(m, self.host.tx_flit, self.dev.rx_flit)
        return m


_PAIR = {}


def _pair_run(job):
    if not _PAIR:
        top = _Pair()
        sim = Simulator(top)
        sim.add_clock(1e-8)
        box = {}

        async def bench(ctx):
            if "job" in box:
                box["result"] = await _pair_bench(ctx, top, box["job"])
        sim.add_testbench(bench)
        _PAIR.update(top=top, sim=sim, box=box, fresh=True)
    box, sim = _PAIR["box"], _PAIR["sim"]
    box.clear()
    box["job"] = job
    if not _PAIR["fresh"]:
        sim.reset()
    _PAIR["fresh"] = False
    sim.run()
    return box["result"]


async def _pair_bench(ctx, top, job):
    dev, host = top.dev, top.host
    rng = random.Random(job["seed"])
    send = {ch: messages(ch, job["n"][ch], rng) for ch in D2H + H2D}
    ins = {ch: getattr(dev if ch in D2H else host, ch.name.lower()) for ch in send}
    outs = {ch: getattr(host if ch in D2H else dev, ch.name.lower()) for ch in send}
    got = {ch: [] for ch in send}
    idx = {ch: 0 for ch in send}
    ref = Unpacker(Direction.UPSTREAM)  # the clean up-wire stream, until the first malformed flit
    target, hits, pre, wire = None, 0, None, []   # wire: (cycle, flit as sent, flit as carried)
    tail = None
    for cycle in range(4000):
        if tail is None and all(len(got[ch]) == len(send[ch]) for ch in send):
            tail = cycle + 60                       # keep going: a late duplicate must show
        if cycle == tail:
            break
        for ch in send:
            offer = idx[ch] < len(send[ch]) and rng.random() < job["p_valid"]
            ctx.set(ins[ch].valid, offer)
            if offer:
                ctx.set(ins[ch].payload.as_value(), send[ch][idx[ch]])
            ctx.set(outs[ch].ready, 1)
        # The up wire: the flit as sent, or its malformed twin (reserved header bit 1 set, re-sealed).
        valid, flit = ctx.get(dev.tx_flit.valid), ctx.get(dev.tx_flit.payload)
        carried = flit
        if valid and flit == target and hits < job["times"]:
            carried = int.from_bytes(seal((flit & MASK) | 1 << 1), "little")
        ctx.set(host.rx_flit.valid, valid)
        ctx.set(host.rx_flit.payload, carried)
        ready = ctx.get(host.rx_flit.ready)
        ctx.set(dev.tx_flit.ready, ready)
        if valid and ready:
            if carried != flit:
                hits += 1
            elif target is None and retry_kind(flit) is None:
                before = copy.deepcopy(ref)
                r = ref.receive(flit.to_bytes(FLIT_BYTES, "little"))
                # A protocol flit with messages, no data header and no chunk owed before it: whatever
                # follows it is then decoded by the unpacker alike before and after it.
                if len(wire) >= 6 and r.kind == "protocol" and r.messages and before.owed == 0 \
                        and ref.owed == 0:
                    target, pre = flit, before
                    carried = int.from_bytes(seal((flit & MASK) | 1 << 1), "little")
                    hits += 1
                    # this flit already went out as sent: replace it now (the host samples this edge)
                    ctx.set(host.rx_flit.payload, carried)
                    assert ctx.get(host.rx_flit.ready)
            wire.append((cycle, flit, carried))
        _count_transfers(ctx, send, ins, outs, idx, got, job["seed"], cycle)
        await ctx.tick()
    else:
        raise AssertionError(f"seed {job['seed']}: hang, {sum(map(len, got.values()))} messages out")
    # The malformed flit was followed on the very next cycle by a good flit with messages that the
    # unpacker, in its state before the bad flit, would have delivered (the case that used to duplicate).
    k = next(i for i, (_, f, c) in enumerate(wire) if f == target and c != f)
    (c0, _, _), (c1, nxt, _) = wire[k], wire[k + 1]
    follows = (c1 == c0 + 1 and retry_kind(nxt) is None
               and pre.receive(nxt.to_bytes(FLIT_BYTES, "little")).messages)
    res = {c: (ctx.get(getattr(dev, c)), ctx.get(getattr(host, c)))
           for c in ("retries", "crc_errors", "rule_errors", "flits_replayed")}
    res.update(hits=hits, follows=bool(follows), waiting=ctx.get(host.rx_waiting))
    return res


@pytest.mark.parametrize("times", [1, 2])
def test_rule_error_between_ports_no_duplicates(times):
    """A CRC-good malformed flit (the device's flit with a reserved header bit set, re-sealed) on the
    up wire, with the next good flit carrying messages right behind it: the host counts a rule error,
    sends a RETRY.Req, drops the flit behind the bad one (unpacker ``discard``) and takes the replay,
    so every message arrives exactly once and in order.  ``times=2``: the replayed copy is malformed
    again (a second episode)."""
    n = {D2H[0]: 60, D2H[1]: 60, D2H[2]: 12, H2D[0]: 20, H2D[1]: 20, H2D[2]: 12}
    res = _pair_run({"seed": 21, "n": n, "p_valid": 1.0, "times": times})
    assert res["hits"] == times, res
    assert res["follows"], f"the flit after the malformed one does not exercise the case: {res}"
    dev_r, host_r = res["rule_errors"]
    assert (dev_r, host_r) == (0, times), res
    assert res["crc_errors"] == (0, 0), res
    assert res["retries"][1] >= times, res              # the host's RETRY.Req(s)
    assert res["flits_replayed"][0] >= 2 * times, res    # the bad flit and the one behind it, each time
    assert res["waiting"] == 0, res


# The retry-buffer entries a port keeps free for draining its packer (LinkPort.reserve) against the
# flits the golden packer needs to drain a full packer (models/flit/drain.py).  When the port stops
# taking messages, one flit has just been written, so reserve - 1 entries can still be written before
# the buffer's last-but-one limit; up to FlitPacker.DECIDED_MAX flits the packer has already decided
# sit in its output stages and skid register and need entries too (tests/test_rtl_link_tx.py measures
# that bound).  So the reserve must be at least the drain + 1 + DECIDED_MAX.
DRAIN_MARGIN = 1 + FlitPacker.DECIDED_MAX


@pytest.mark.parametrize("tx_depth", range(1, 11))
def test_reserve_covers_the_worst_drain(tx_depth):
    from models.flit.drain import worst_drain
    for upstream in (True, False):
        port = LinkPort(upstream, tx_depth=tx_depth, retry_depth=64)
        direction = Direction.UPSTREAM if upstream else Direction.DOWNSTREAM
        flits, state = worst_drain(direction, tx_depth)
        assert port.reserve >= flits + DRAIN_MARGIN, \
            f"tx_depth={tx_depth} {direction.value}: reserve {port.reserve} < {flits} flits to drain {state} " \
            f"+ {DRAIN_MARGIN}"


def test_link_end_harness_delivers_the_generated_messages():
    """The synthesis top ``link_end`` (hdl/link/end_harness.py): two harnesses, device end and host end,
    flit to flit.  Each received channel's fold must be the fold of the first k messages its peer's
    generator builds, for some k > 0 (hdl.link.traffic.message_value), and neither end reports a link
    error: the harness is wired so that the port's messages reach the fold unchanged and in order."""
    from hdl.link.end_harness import LinkEndHarness
    from hdl.link.traffic import channel_seeds, message_value, xorshift32
    dev, host = LinkEndHarness(True), LinkEndHarness(False)
    top = Module()
    top.submodules.dev, top.submodules.host = dev, host
    wiring.connect(top, dev.tx_flit, host.rx_flit)
    wiring.connect(top, host.tx_flit, dev.rx_flit)
    folds = {}

    async def bench(ctx):
        await ctx.tick().repeat(300)
        assert not ctx.get(dev.link_error) and not ctx.get(host.link_error)
        for end in (dev, host):
            for ch in end.received:
                folds[ch] = ctx.get(getattr(end, f"{ch.name.lower()}_fold"))
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

    def fold_of(ch, n):
        """The fold after each of the first n messages of channel ``ch``."""
        fold, content, width, out = 0, channel_seeds(ch)[0], Shape.cast(channel_shape(ch)).width, []
        for seq in range(n):
            value = message_value(ch, seq, content)
            fold = ((fold << 1) | (fold >> 31)) & 0xFFFFFFFF
            for i in range(0, width, 32):
                fold ^= (value >> i) & 0xFFFFFFFF
            out.append(fold)
            content = xorshift32(content)
        return out
    for ch, got in folds.items():
        assert got in fold_of(ch, 300), f"{ch.name}: fold {got:#x} is not that of any prefix of the messages sent"
