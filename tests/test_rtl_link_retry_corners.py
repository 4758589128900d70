"""Corners of Link Layer Retry in the loopback (hdl/link/loopback.py around two hdl/link/port.py ends).

* **Sequence-number wrap.**  A corrupted flit at every position of at least two wraps of the sequence
  space (``retry_depth`` = 32, packer queues of 4): the first transmission of the flit with TX
  sequence number *s* is corrupted for *s* in an arithmetic sweep whose step (5) is prime to the
  depth, so over 5 wraps every
  residue is hit once and the replays end at every distance from the wrap, the case where a replay
  pointer compared without its modulo keeps replaying and resends a flit.  Every message must arrive
  exactly once, in order; every injected error must be counted as a CRC error.
* **Ack timeliness.**  Sparse traffic, every sink ready, no errors: every retryable flit an end sends
  that needs a prompt ack (all but ack-only LLCRDs, see hdl/link/port.py "Ack policy") must be freed
  from its retry buffer within ``ack_timer + ACK_PIPELINE`` cycles of being offered on the wire.
* **Quiet link drains.**  After the traffic (with errors), a quiet link: every flit that carried
  messages or credits is acknowledged, so what stays in each retry buffer is only ack-only LLCRDs, at
  most ``AK_FLITS - 1`` of them (an ack-only LLCRD does not start the ack timer, or two quiet ends
  would acknowledge each other's acks forever), and the occupancy equals that count.
* **Ack-only LLCRDs never time out.**  Those LLCRDs stay unacknowledged on a quiet link for good, so
  the sender's ack timeout must leave them out (the packer's ``flit_lazy``): ends with a short
  ``ack_timeout`` stay quiet several timeouts long with such LLCRDs outstanding, and no link error.

The testbench learns a flit's TX sequence number from the sending port's ``wr_seq`` (it advances at
the edge that puts a new flit on the wire) and frees entries oldest first when the port's
``tx_occupancy`` falls, so it keeps its own copy of each retry buffer.  Seeds are in every message.
"""

import random
from collections import deque

import pytest

from hdl.link.loopback import LinkLoopback
from hdl.link.ports import PAYLOAD_BITS, direction_channels
from hdl.link.tx import AK_FLITS, FlitPacker
from cxl.control import is_ack_only_llcrd
from models.flit import random_msg, stream_payload as encode
from tb.reused_sim import ReusedSimulator

D2H = direction_channels(True)
H2D = direction_channels(False)
ROUTES = {ch: (ch.name.lower(), f"host_{ch.name.lower()}") for ch in D2H}
ROUTES.update({ch: (f"host_{ch.name.lower()}", ch.name.lower()) for ch in H2D})
MASK = (1 << PAYLOAD_BITS) - 1
DEPTH = 32
# Packer queues of 4: the 32-entry retry buffer (two wraps of the sequence space in a short run) must
# exceed the port's retry-buffer reserve by ``LinkPort.STREAM_ROOM`` (8), 18 + 8 at depth 4; the default
# 8-deep queues need 25 + 8.  The wrap and the ack timing do not depend on the queues' depth.
TX_DEPTH = 4
# Cycles from a flit offered on the wire to its ack freeing the sender's entry, beyond the ack timer:
# receiver input register and retire (3), ack hand-over to the packer (1), packer plan and decide (2),
# its output stages (FlitPacker.OUTPUT_STAGES), sender input register and retire (3), slack for a flit
# already being decided (5).
ACK_PIPELINE = 14 + FlitPacker.OUTPUT_STAGES


def is_lazy(flit):
    """True for an LLCRD that returns no credits (an ack-only LLCRD, which does not start the timer)."""
    return is_ack_only_llcrd(flit & MASK)


class Harness(ReusedSimulator):
    """Random traffic on all six channels, optional corruption by TX sequence number, then a quiet tail."""

    def __init__(self, **port_params):
        super().__init__(LinkLoopback(rx_depth=16, retry_depth=DEPTH, tx_depth=TX_DEPTH, **port_params))

    async def _bench(self, ctx):
        job = self.job
        if job is None:
            return
        dut, seed = self.dut, job["seed"]
        rng = random.Random(seed)
        pool = {ch: [encode(random_msg(random.Random(ch.value * 7 + k), ch)) for k in range(32)] for ch in D2H + H2D}
        send = {ch: [rng.choice(pool[ch]) for _ in range(job["n"].get(ch, 0))] for ch in D2H + H2D}
        got = {ch: 0 for ch in send}
        idx = {ch: 0 for ch in send}
        ins = {ch: getattr(dut, ROUTES[ch][0]) for ch in send}
        outs = {ch: getattr(dut, ROUTES[ch][1]) for ch in send}
        sides = {"up": dut.dev_port, "down": dut.host_port}
        corrupt = job.get("corrupt", {"up": set(), "down": set()})   # absolute TX sequence numbers
        # per wire: own copy of the sender's retry buffer: [abs seq, first offered cycle, lazy]
        buf = {w: deque() for w in sides}
        abs_seq = {w: 0 for w in sides}
        last_wr = {w: 0 for w in sides}
        last_occ = {w: 0 for w in sides}
        hit_now = {w: False for w in sides}
        latencies = {w: [] for w in sides}
        injected = {w: 0 for w in sides}
        quiet, cycle, tail = 0, 0, None
        total = sum(map(len, send.values()))
        while True:
            if tail is None and all(got[ch] == len(send[ch]) for ch in send):
                tail = cycle
            if tail is not None and quiet >= job.get("quiet", 200):
                break
            assert cycle < job["limit"], (f"seed {seed}: hang, {sum(got.values())} of {total} messages out "
                                          f"after {cycle} cycles")
            for ch in send:
                offer = idx[ch] < len(send[ch]) and rng.random() < job["p_valid"]
                ctx.set(ins[ch].valid, offer)
                if offer:
                    ctx.set(ins[ch].payload.as_value(), send[ch][idx[ch]])
                ctx.set(outs[ch].ready, rng.random() < job["p_ready"])
            moving = False
            for w, port in sides.items():
                wr = ctx.get(port.debug["wr_seq"])
                occ = ctx.get(port.tx_occupancy)
                written = (wr - last_wr[w]) % DEPTH
                assert written in (0, 1), (w, written)
                freed = last_occ[w] + written - occ
                wire = getattr(dut, f"{w}_wire")
                if written:
                    # the flit offered now was loaded at the edge that advanced wr_seq: a new flit
                    flit = ctx.get(wire.payload)
                    buf[w].append([abs_seq[w], cycle, is_lazy(flit)])
                    hit_now[w] = abs_seq[w] in corrupt[w]
                    abs_seq[w] += 1
                assert 0 <= freed <= len(buf[w]) - written, (f"seed {seed}: {w}: {freed} freed of {len(buf[w])}")
                for _ in range(freed):
                    s, t0, lazy = buf[w].popleft()
                    if not lazy:
                        latencies[w].append((cycle - t0, s))
                last_wr[w], last_occ[w] = wr, occ
                # corrupt only the first transmission of a chosen sequence number, while it is offered
                force = bool(hit_now[w] and ctx.get(wire.valid))
                ctx.set(getattr(dut, f"{w}_force"), force)
                if force and ctx.get(port.tx_flit.ready):      # taken at this edge, corrupted
                    injected[w] += 1
                    hit_now[w] = False
                moving |= bool(ctx.get(wire.valid))
            for ch in send:
                if ctx.get(outs[ch].valid) and ctx.get(outs[ch].ready):
                    v = ctx.get(outs[ch].payload.as_value())
                    k = got[ch]
                    assert k < len(send[ch]) and v == send[ch][k], (
                        f"seed {seed}: {ch.name} message {k} wrong, duplicated or reordered at cycle {cycle}")
                    got[ch] += 1
                if ctx.get(ins[ch].valid) and ctx.get(ins[ch].ready):
                    idx[ch] += 1
            await ctx.tick()
            quiet = 0 if moving else quiet + 1
            cycle += 1
        res = {"cycles": cycle, "latencies": latencies, "injected": injected,
               "left": {w: [tuple(e) for e in buf[w]] for w in sides},
               "occupancy": {w: ctx.get(sides[w].tx_occupancy) for w in sides},
               "sent_seq": dict(abs_seq),
               "link_error": {w: ctx.get(sides[w].link_error) for w in sides}}
        for side in ("dev", "host"):
            for c in ("retries", "crc_errors", "rule_errors", "flits_replayed"):
                res[f"{side}_{c}"] = ctx.get(getattr(dut, f"{side}_{c}"))
        res["wire_injected"] = {w: ctx.get(getattr(dut, f"{w}_injected")) for w in sides}
        self.result = res


@pytest.fixture(scope="module")
def harness():
    return Harness()


def _check_drained(res, seed):
    """Quiet link: only ack-only LLCRDs left, at most AK_FLITS - 1 per end, matching the occupancy."""
    for w, left in res["left"].items():
        assert res["occupancy"][w] == len(left), (f"seed {seed}: {w}: occupancy {res['occupancy'][w]}, "
                                                  f"{len(left)} flits not acknowledged")
        busy = [s for s, _, lazy in left if not lazy]
        assert not busy, f"seed {seed}: {w}: flits {busy} carried messages or credits and were never acknowledged"
        assert len(left) < AK_FLITS, f"seed {seed}: {w}: {len(left)} ack-only LLCRDs left"


@pytest.mark.parametrize("offset", [0, 2])
def test_error_at_every_sequence_position(harness, offset):
    """Corrupt first transmissions at sequence numbers offset, offset + 5, ... over > 2 wraps, each way."""
    seed = 31 + offset
    span = 5 * DEPTH                                   # 5 wraps: every residue mod 32 once
    corrupt = {"up": set(range(offset, span, 5)), "down": set(range(offset + 1, span, 5))}
    n = {D2H[0]: 120, D2H[1]: 120, D2H[2]: 100, H2D[0]: 120, H2D[1]: 140, H2D[2]: 100}
    res = harness.run({"seed": seed, "n": n, "p_valid": 0.9, "p_ready": 0.9, "corrupt": corrupt,
                       "limit": 20_000, "quiet": 150})
    print(res["sent_seq"], res["injected"], res["cycles"])
    for w in ("up", "down"):
        assert res["sent_seq"][w] > span, f"seed {seed}: only {res['sent_seq'][w]} flits on {w}: widen the traffic"
        assert res["injected"][w] == len(corrupt[w]) == res["wire_injected"][w], (seed, w, res["injected"])
        # a residue class hit once per wrap: both ends of the wrap, D - 1 and 0 (= D, 2D, ...), included
        assert {s % DEPTH for s in corrupt[w]} == set(range(DEPTH))
    assert res["host_crc_errors"] == res["injected"]["up"], res
    assert res["dev_crc_errors"] == res["injected"]["down"], res
    assert res["dev_rule_errors"] == res["host_rule_errors"] == 0, res
    _check_drained(res, seed)


def test_acks_within_timer_bound(harness):
    """Sparse traffic both ways, all sinks ready: every flit that needs a prompt ack is freed in time."""
    seed = 41
    n = {D2H[0]: 12, D2H[2]: 6, H2D[1]: 12, H2D[2]: 6}
    res = harness.run({"seed": seed, "n": n, "p_valid": 0.02, "p_ready": 1.0, "limit": 20_000, "quiet": 150})
    bound = harness.dut.dev_port.ack_timer + ACK_PIPELINE
    for w, lat in res["latencies"].items():
        assert len(lat) >= 10, f"seed {seed}: {w}: only {len(lat)} flits acknowledged"
        late = [(c, s) for c, s in lat if c > bound]
        assert not late, f"seed {seed}: {w}: (cycles, seq) acknowledged after more than {bound} cycles: {late}"
        print(w, "max ack latency", max(c for c, _ in lat), "of", len(lat), "flits")
    _check_drained(res, seed)


def test_ack_only_llcrds_left_on_a_quiet_link_do_not_time_out():
    """Traffic, then a quiet link for several ack timeouts with ack-only LLCRDs still in the retry
    buffers: they never get an ack, and must not end in an ACK_TIMEOUT link error."""
    timeout = 64                                       # the least above ack_timer + retry_timeout (48)
    h = Harness(ack_timeout=timeout)
    for seed in (51, 52):
        n = {D2H[0]: 6, D2H[2]: 3, H2D[0]: 6, H2D[1]: 6}
        res = h.run({"seed": seed, "n": n, "p_valid": 0.1, "p_ready": 1.0, "limit": 20_000, "quiet": 4 * timeout})
        _check_drained(res, seed)
        assert any(res["left"].values()), f"seed {seed}: no ack-only LLCRD left outstanding: the case is not reached"
        assert res["link_error"] == {"up": 0, "down": 0}, (
            f"seed {seed}: link error with only ack-only LLCRDs outstanding: {res['link_error']}, left {res['left']}")
