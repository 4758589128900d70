"""Faults at one link end (hdl/link/port.py) and on the wire (hdl/link/loopback.py ``WireInjector``).

* **Bad input per kind**: a bare device-end ``LinkPort`` gets CRC-good flits that each break one rule
  (reserved header bit, byte enable, reserved slot format, illegal opcode, bad control flit), a flit
  with a bad CRC, a RETRY.Idle (never sent by this link) and a stale RETRY.Req and RETRY.Ack.  Each
  must raise exactly its own ``rx_errors`` counter by one (the model's ``Unpacker`` names the same
  rule), the port must ask for a replay where the flit was retryable or where a stale RETRY.Ack leaves
  it unable to place the replay that follows, and resume when answered.
* **Link errors, never a hang**: a peer that never answers (``ACK_TIMEOUT``), a RETRY.Req that is
  never answered (``RETRY_LIMIT``), more acks or credits than outstanding (``ACK_OVERFLOW``,
  ``CREDIT_OVERFLOW``), more messages than credits (``RX_OVERFLOW``): the port reports the cause,
  then sends nothing and takes no messages.
* **Wire faults in the loopback**: a cut wire, a host that withholds acks or credits, a dropped and a
  duplicated flit: every run ends (all messages delivered, or a reported link error) within its cycle
  bound; a cut or a withheld ack or credit ends in the expected link error with nothing delivered
  wrong before it.
* **The injector's patterns**: bursts span exactly ``burst_len`` bits in the CRC's reading order and
  none of length <= 16 escapes; ``MULTI`` flips ``nbits`` bits.
"""

import random

import pytest
from amaranth.sim import Simulator

from hdl.link.loopback import FaultMode, LinkLoopback, WireInjector
from hdl.link.port import RX_ERROR_KINDS, LinkErrorCause, LinkPort, default_credits
from hdl.link.ports import direction_channels
from cxl.flit import MAX_PER_FLIT
from cxl.messages import CODECS, H2DReqOpcode
from models.flit import (FLIT_BYTES, Direction, FlitError, Unpacker, control, decode_control,
                         encode_control, pack, random_msg, seal)
from tb.reused_sim import ReusedSimulator

D2H = direction_channels(True)
H2D = direction_channels(False)
MASK = (1 << 512) - 1
to_int = lambda b: int.from_bytes(b, "little")                         # noqa: E731
_BAD_OPCODE = next(v for v in range(8) if v not in {m.value for m in H2DReqOpcode})

# kind -> 512-bit payload of a CRC-good flit that breaks exactly that rule (device end receives H2D)
BAD_FLITS = {
    "reserved": 1 << 1,                         # header bit 1
    "be": 1 << 3,                               # byte enable
    "format": 7 << 5,                           # slot 0 format H7: reserved downstream
    "opcode": (1 | _BAD_OPCODE << 1) << 32,     # a valid H2D Req in slot 0 with no legal opcode
    "control": 1 | (3 << 32),                   # a control flit with a reserved LLCTRL
}
# the model's name for the rule each flit breaks
MODEL_FIELD = {"reserved": "reserved", "be": "BE", "format": "Slot0", "opcode": "Slot0", "control": "LLCTRL"}


def _retry(flit):
    p = flit & MASK
    try:
        c = decode_control(p)
    except FlitError:
        return None
    return c if c.kind.startswith("RETRY") else None


def test_bad_flits_are_the_rules_the_model_names():
    for kind, p in BAD_FLITS.items():
        with pytest.raises(FlitError) as e:
            Unpacker(Direction.DOWNSTREAM).receive(seal(p))
        assert e.value.field == MODEL_FIELD[kind], (kind, e.value)


def _bare_port_run(dut, script, cycles, on_cycle=None):
    """Feed ``script`` (a list of 528-bit flits or None per cycle; callables get (ctx, state)) to
    ``dut.rx_flit``, keep ``tx_flit`` ready, answer every RETRY.Req with its RETRY.Ack when
    ``state["answer"]``; return the per-cycle log and the final counters."""
    state = {"answer": True, "reqs": [], "sent": [], "after_error": 0}

    async def bench(ctx):
        queue = list(script)
        for cycle in range(cycles):
            f = queue.pop(0) if queue else None
            if callable(f):
                f = f(ctx, state)
            ctx.set(dut.rx_flit.valid, f is not None)
            if f is not None:
                ctx.set(dut.rx_flit.payload, f)
            ctx.set(dut.tx_flit.ready, 1)
            if on_cycle:
                on_cycle(ctx, state, cycle)
            if ctx.get(dut.tx_flit.valid):
                flit = ctx.get(dut.tx_flit.payload)
                state["sent"].append(flit)
                c = _retry(flit)
                if c is not None and c.kind == "RETRY.Req":
                    state["reqs"].append((cycle, c.fields["eseq"]))
                    if state["answer"]:
                        queue[:0] = [None, to_int(seal(encode_control(control("RETRY.Ack", eseq=c.fields["eseq"]))))]
                if ctx.get(dut.link_error):
                    state["after_error"] += 1
            await ctx.tick()
        state["counts"] = {k: ctx.get(getattr(dut.rx_errors, k)) for k in RX_ERROR_KINDS}
        state.update(waiting=ctx.get(dut.rx_waiting), link_error=ctx.get(dut.link_error),
                     cause=ctx.get(dut.link_error_cause), rule=ctx.get(dut.rule_errors),
                     crc=ctx.get(dut.crc_errors))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return state


def test_bad_input_counted_per_kind_no_hang():
    dut = LinkPort(True)
    good = to_int(seal(encode_control(control("LLCRD"))))
    crc_bad = to_int(seal(0)) ^ (1 << 100)
    script = []
    order = list(BAD_FLITS) + ["crc", "retry_unused", "retry_ignored_req", "retry_ignored_ack"]
    for kind in order:
        if kind in BAD_FLITS:
            f = to_int(seal(BAD_FLITS[kind]))
        elif kind == "crc":
            f = crc_bad
        elif kind == "retry_unused":
            f = to_int(seal(encode_control(control("RETRY.Idle"))))
        elif kind == "retry_ignored_req":
            f = to_int(seal(encode_control(control("RETRY.Req", eseq=40))))   # nothing sent: not buffered
        else:
            f = to_int(seal(encode_control(control("RETRY.Ack", eseq=40))))   # answers no request
        script += [f] + [None] * 40 + [good] + [None] * 20
    res = _bare_port_run(dut, script, len(script) + 40)
    counts = res["counts"]
    want = {k: 0 for k in RX_ERROR_KINDS}
    for k in BAD_FLITS:
        want[k] = 1
    want.update(crc=1, retry_unused=1, retry_ignored=2)
    assert counts == want, f"per-kind counts {counts}, expected {want}"
    assert res["rule"] == len(BAD_FLITS) and res["crc"] == 1, res
    # every retryable bad flit (the rule breakers and the CRC error) asked for a replay, and so did the
    # stale RETRY.Ack (the receiver cannot place the replay it announces: hdl/link/port.py); each answered
    assert len(res["reqs"]) == len(BAD_FLITS) + 2, res["reqs"]
    assert res["waiting"] == 0 and res["link_error"] == 0, res


def _message(ch, seed=0):
    msg = random_msg(random.Random(seed), ch)
    v = CODECS[msg.chan].encode(msg.fields)
    if msg.data is not None:
        v |= int.from_bytes(msg.data, "little") << CODECS[msg.chan].width
    return v


def test_silent_peer_ends_in_ack_timeout():
    """A message goes out; nothing ever comes back: ACK_TIMEOUT, then the port is silent and closed."""
    timeout = 300
    dut = LinkPort(True, ack_timeout=timeout)
    rsp = getattr(dut, D2H[1].name.lower())
    seen = {"ready_after": 0, "error_at": None}

    def drive(ctx, state, cycle):
        ctx.set(rsp.valid, 1)
        ctx.set(rsp.payload.as_value(), _message(D2H[1]))
        if ctx.get(dut.link_error):
            seen["error_at"] = seen["error_at"] or cycle
            seen["ready_after"] += ctx.get(rsp.ready)

    res = _bare_port_run(dut, [], timeout + 200, on_cycle=drive)
    assert res["link_error"] and res["cause"] == LinkErrorCause.ACK_TIMEOUT, res
    assert seen["error_at"] is not None and seen["error_at"] <= timeout + 40, seen
    assert res["after_error"] == 0, "the port kept sending after its link error"
    assert seen["ready_after"] == 0, "the port took messages after its link error"


def test_unanswered_retry_ends_in_retry_limit():
    dut = LinkPort(True, retry_limit=4, retry_timeout=8)
    res = _bare_port_run(dut, [to_int(seal(0)) ^ 1], 200,
                         on_cycle=lambda ctx, st, c: st.update(answer=False))
    assert res["link_error"] and res["cause"] == LinkErrorCause.RETRY_LIMIT, res
    assert len(res["reqs"]) == 4, res["reqs"]          # four Reqs, each unanswered for retry_timeout


@pytest.mark.parametrize("fields, cause", [({"acks": 255}, LinkErrorCause.ACK_OVERFLOW),
                                           ({"rsp_crd": 7}, LinkErrorCause.CREDIT_OVERFLOW)])
def test_peer_overflow_is_a_link_error(fields, cause):
    """More acks (or credits) than outstanding: reported, not an assertion failure."""
    dut = LinkPort(True)
    res = _bare_port_run(dut, [None, to_int(seal(encode_control(control("LLCRD", **fields))))], 40)
    assert res["link_error"] and res["cause"] == cause, res


@pytest.mark.parametrize("extra", (0, 4))
def test_messages_beyond_credits_are_an_rx_overflow(extra):
    """The receiver never waits for room (hdl/link/port.py, "Receiver"): a peer sending as many H2D Rsp as
    this end's default credits grant, with nobody taking them, leaves them all queued and no error; 4 more
    than that end in ``RX_OVERFLOW`` (never a hang, the wire never held back), and the messages within
    the credits still come out, in order, once taken."""
    dut = LinkPort(True)
    rsp_ch = H2D[1]
    cap = MAX_PER_FLIT[rsp_ch] * dut.rx_depth
    assert default_credits(False, dut.rx_depth)["rsp"] == cap     # the host end's default pool for it
    rng = random.Random(9)
    msgs = [random_msg(rng, rsp_ch) for _ in range(cap + extra)]
    # then LLCRDs with nothing in them, so that a receiver that waited for room would hold the wire back
    flits = [to_int(f) for f in pack(Direction.DOWNSTREAM, msgs)] + [to_int(seal(encode_control(control("LLCRD"))))] * 3
    take_from = len(flits) + 60
    seen = {"got": [], "not_ready": 0}
    port = getattr(dut, rsp_ch.name.lower())

    def drive(ctx, state, cycle):
        seen["not_ready"] += cycle < take_from and not ctx.get(dut.rx_flit.ready)
        ctx.set(port.ready, cycle >= take_from)
        if cycle >= take_from and ctx.get(port.valid):
            seen["got"].append(ctx.get(port.payload).as_value().value)

    res = _bare_port_run(dut, flits, take_from + cap + 40, on_cycle=drive)
    want = [CODECS[rsp_ch].encode(m.fields) for m in msgs[:cap]]
    assert seen["not_ready"] == 0, "the receiver held the wire back"
    if extra:
        assert res["link_error"] and res["cause"] == LinkErrorCause.RX_OVERFLOW, res
    else:
        assert not res["link_error"], res
    assert seen["got"] == want, (len(seen["got"]), cap)


# ---------------------------------------------------------------- the loopback with wire faults
# Cycles without a message handed in or delivered after which a run without a link error ends (longer
# than the loop's ack and credit timeouts, 600 cycles, so either would have fired by then).
QUIET_CYCLES = 1500


class Loop(ReusedSimulator):
    def __init__(self):
        super().__init__(LinkLoopback(rx_depth=16, retry_depth=64, ack_timeout=600, credit_timeout=600))

    async def _bench(self, ctx):
        job = self.job
        if job is None:
            return
        dut, rng = self.dut, random.Random(job["seed"])
        routes = {ch: (ch.name.lower(), f"host_{ch.name.lower()}") for ch in D2H}
        routes.update({ch: (f"host_{ch.name.lower()}", ch.name.lower()) for ch in H2D})
        send = {ch: [_message(ch, k) for k in range(job["n"])] for ch in D2H + H2D}
        got = {ch: 0 for ch in send}
        idx = {ch: 0 for ch in send}
        wrong = 0
        for w in ("up", "down"):
            ctx.set(getattr(dut, f"{w}_mode"), job.get("mode", FaultMode.BIT))
            ctx.set(getattr(dut, f"{w}_fault_at"), job.get(f"{w}_at", 0xFFFFFFFF))
            ctx.set(getattr(dut, f"{w}_threshold"), round(job.get("p_flit", 0.0) * 2**32))
            ctx.set(getattr(dut, f"{w}_burst_len"), job.get("burst_len", 16))
            ctx.set(getattr(dut, f"{w}_nbits"), job.get("nbits", 2))
            ctx.set(getattr(dut, f"{w}_retry_threshold"), round(job.get("retry_p", 0.0) * 2**32))
        error_at = None
        moved_at = 0                       # the last cycle a message was handed in or delivered
        quiet = False
        for cycle in range(job["limit"]):
            if cycle == job.get("withhold_at"):
                for k in ("withhold_acks", "withhold_credits"):
                    ctx.set(getattr(dut, f"host_{k}"), job.get(k, 0))
            down = ctx.get(dut.dev_link_error) | ctx.get(dut.host_link_error)
            if down and error_at is None:
                error_at = cycle
            if all(got[ch] == len(send[ch]) for ch in send) or (error_at is not None and cycle > error_at + 1500):
                break
            if error_at is None and cycle > moved_at + QUIET_CYCLES:
                # Nothing moved for longer than either timeout: with every message handed in, the link
                # has nothing left to send (a message lost where no check can see it: "quiet"); with a
                # message still waiting to be taken, the link is stuck without saying so: a hang.
                if all(idx[ch] == len(send[ch]) for ch in send):
                    quiet = True
                    break
                raise AssertionError(f"seed {job['seed']}: hang: messages wait to be taken, nothing moved for "
                                     f"{QUIET_CYCLES} cycles and no link error (cycle {cycle})")
            for ch in send:
                src, snk = (getattr(dut, n) for n in routes[ch])
                ctx.set(src.valid, idx[ch] < len(send[ch]))
                if idx[ch] < len(send[ch]):
                    ctx.set(src.payload.as_value(), send[ch][idx[ch]])
                ctx.set(snk.ready, rng.random() < 0.8)
                if ctx.get(snk.valid) and ctx.get(snk.ready):
                    moved_at = cycle
                    k = got[ch]
                    wrong += not (k < len(send[ch]) and ctx.get(snk.payload.as_value()) == send[ch][k])
                    got[ch] += 1
                if ctx.get(src.valid) and ctx.get(src.ready):
                    moved_at = cycle
                    idx[ch] += 1
            await ctx.tick()
        else:
            raise AssertionError(f"seed {job['seed']}: hang: neither done nor a link error in {job['limit']} cycles")
        self.result = {"cycles": cycle, "wrong": wrong, "quiet": quiet, "delivered": sum(got.values()),
                       "total": sum(map(len, send.values())), "error_at": error_at,
                       "dev": (ctx.get(dut.dev_link_error), ctx.get(dut.dev_link_error_cause)),
                       "host": (ctx.get(dut.host_link_error), ctx.get(dut.host_link_error_cause)),
                       "injected": ctx.get(dut.up_injected) + ctx.get(dut.down_injected),
                       "rule": ctx.get(dut.dev_rule_errors) + ctx.get(dut.host_rule_errors),
                       "crc": ctx.get(dut.dev_crc_errors) + ctx.get(dut.host_crc_errors),
                       "escaped": ctx.get(dut.up_escaped) + ctx.get(dut.down_escaped),
                       "retries": ctx.get(dut.dev_retries) + ctx.get(dut.host_retries)}


@pytest.fixture(scope="module")
def loop():
    return Loop()


@pytest.mark.parametrize("job", [
    {"mode": FaultMode.BURST, "burst_len": 16, "p_flit": 0.05},
    {"mode": FaultMode.BURST, "burst_len": 32, "p_flit": 0.05},
    {"mode": FaultMode.MULTI, "nbits": 4, "p_flit": 0.05},
    # RETRY flits hit with 0.25: a Req/Ack round then fails with p = 0.44, so 600 cycles (18 rounds)
    # without an ack (the ack timeout here) has p ~ 4e-7; at 0.5 it has p ~ 6e-3 and seed 13 hits it
    {"mode": FaultMode.BIT, "p_flit": 0.05, "retry_p": 0.25},
], ids=["burst16", "burst32", "multi4", "retry_handshake"])
def test_crc_visible_faults_recovered(loop, job):
    """Bursts, multi-bit errors and corrupted RETRY flits: each counted as a CRC error and retried;
    every message once, in order; no link error (the long Verilator runs: bench/link_verilator.py)."""
    res = loop.run({"seed": 13, "n": 60, "limit": 20_000, **job})
    assert res["injected"] >= 5 and res["escaped"] == 0, res
    assert res["crc"] == res["injected"] and res["retries"] > 0 and res["rule"] == 0, res
    assert res["wrong"] == 0 and res["delivered"] == res["total"], res
    assert res["dev"][0] == res["host"][0] == 0 and res["error_at"] is None, res


@pytest.mark.parametrize("job, side, cause", [
    ({"mode": FaultMode.CUT, "up_at": 40}, "dev", LinkErrorCause.ACK_TIMEOUT),
    # enough traffic after the acks stop to fill the 64-entry retry buffer (the messages still to send
    # then wait for it, and its oldest flit's ack times out)
    ({"withhold_acks": 1, "withhold_at": 60, "n": 200}, "dev", LinkErrorCause.ACK_TIMEOUT),
    ({"withhold_credits": 1, "withhold_at": 60}, "dev", LinkErrorCause.CREDIT_TIMEOUT),
], ids=["cut", "no_acks", "no_credits"])
def test_silent_or_withholding_peer_is_a_link_error(loop, job, side, cause):
    res = loop.run({"seed": 7, "n": 60, "limit": 6000, **job})
    err, got = res[side]
    assert err and got & cause, f"{job}: expected {cause!r} at the {side} end: {res}"
    assert res["wrong"] == 0, f"{job}: messages delivered wrong before the link error: {res}"
    assert res["delivered"] < res["total"], res


@pytest.mark.parametrize("mode, at", [(FaultMode.DROP, 30), (FaultMode.DUP, 57)], ids=["drop", "dup"])
def test_dropped_or_duplicated_flit_never_hangs(loop, mode, at):
    """Invisible to CRC and implicit sequence numbers: the run must still end: every message delivered,
    a link error, or a quiet link (every message handed in, nothing left to send) -- never a sender
    stuck without a link error (the loop raises that as a hang).  A quiet link that lost a message is
    the case no check of the 68B link layer can see (docs/link_layer.md, "Faults")."""
    res = loop.run({"seed": 9, "n": 60, "limit": 8000, "mode": mode, "up_at": at})
    assert res["injected"] == 1, res
    assert res["delivered"] == res["total"] or res["error_at"] is not None or res["quiet"], res
    print(mode.name, at, res)


# ---------------------------------------------------------------- the injector's patterns
def test_injector_patterns():
    dut = WireInjector(seed=5)
    out = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.threshold, 2**32 - 1)
        ctx.set(dut.mask_escapes, 0)
        rng = random.Random(5)
        for mode, length, nbits in [(FaultMode.BURST, L, 0) for L in (1, 2, 9, 15, 16)] + \
                                   [(FaultMode.MULTI, 0, n) for n in (1, 3, 8)]:
            ctx.set(dut.mode, mode)
            ctx.set(dut.burst_len, length)
            ctx.set(dut.nbits, nbits)
            for _ in range(40):
                v = rng.getrandbits(8 * FLIT_BYTES)
                ctx.set(dut.i.payload, v)
                out.append((mode, length, nbits, ctx.get(dut.o.payload) ^ v))
                await ctx.tick()
        out.append(("escaped", ctx.get(dut.escaped)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert out.pop() == ("escaped", 0)          # no burst <= 16 (and no <= 8 bits here) escapes
    order = list(range(511, -1, -1)) + list(range(527, 511, -1))   # flit bit read j-th by the CRC
    for mode, length, nbits, e in out:
        bits = [j for j, b in enumerate(order) if e >> b & 1]
        if mode == FaultMode.BURST:
            assert bits and bits[-1] - bits[0] + 1 == length, (length, bits)
        else:
            assert 0 < len(bits) <= nbits and len(bits) % 2 == nbits % 2, (nbits, bits)
