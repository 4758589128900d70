"""The retry rules' sender bookkeeping (hdl/link/retry.py) alone, against a few lines of Python.

The link tests reach the occupancy's edges only where their traffic happens to: the ``room`` limit with
a good flit and a new flit in the same cycle, a RETRY.Req whose window wraps past sequence number 0.
Here a ``LinkRetry`` of 8 or 16 entries is driven at random (the packer offering flits, the wire taking
them or not, good flits retiring with 0..depth+1 acks, RETRY.Reqs with any Eseq) so the occupancy runs
through its whole range and the sequence numbers wrap many times, and every cycle is checked:

- ``occ`` after each edge: + 1 for a new flit sent, - the acks of a good flit, at most what is
  outstanding (more is ``cause_ack_overflow``);
- ``room`` = ``occ < depth - reserve``;
- a RETRY.Req is taken exactly when its Eseq names one of the ``occ + 1`` sequence numbers up to
  ``wr_seq`` (modulo the depth), and otherwise counted in ``retry_ignored``.
"""

import random

import pytest
from amaranth.sim import Simulator

from hdl.link.retry import LinkRetry

CYCLES = 3000


def _run(depth, reserve, seed):
    dut = LinkRetry(depth=depth, reserve=reserve, ack_timer=4, retry_timeout=8, retry_limit=4,
                    ack_timeout=1 << 12, ack_add_bits=10)
    rng = random.Random(seed)
    seen = {"req_taken": 0, "req_ignored": 0, "wrapped_req_taken": 0, "full": 0, "overflow": 0}

    async def bench(ctx):
        occ_ref, wr_ref = 0, 0
        for cycle in range(CYCLES):
            good = rng.random() < 0.3
            acks = rng.choice([0, 0, 1, 2, rng.randrange(depth + 2)])
            req = rng.random() < 0.05
            eseq = rng.randrange(depth) if rng.random() < 0.9 else rng.randrange(depth, 256)
            ctx.set(dut.pk_valid, rng.random() < 0.8)
            ctx.set(dut.tx_ready, rng.random() < 0.8)
            ctx.set(dut.up_good, good)
            ctx.set(dut.up_acks, acks)
            # Every flit the wire brings is a good RETRY.Req, so nothing is forwarded to an unpacker.
            ctx.set(dut.rx_valid, req)
            ctx.set(dut.rx_crc_ok, 1)
            ctx.set(dut.rx_is_req, 1)
            ctx.set(dut.rx_req_eseq, eseq)
            assert ctx.get(dut.occ) == occ_ref and ctx.get(dut.wr_seq) == wr_ref, \
                f"seed {seed} cycle {cycle}: occ {ctx.get(dut.occ)} wr_seq {ctx.get(dut.wr_seq)}, " \
                f"expected {occ_ref} {wr_ref}"
            assert ctx.get(dut.room) == (occ_ref < depth - reserve), \
                f"seed {seed} cycle {cycle}: room {ctx.get(dut.room)} with occ {occ_ref}"
            if req:
                in_window = eseq < depth and (wr_ref - eseq) % depth <= occ_ref
                assert ctx.get(dut.retry_ignored) == (not in_window), \
                    f"seed {seed} cycle {cycle}: RETRY.Req Eseq {eseq} with wr_seq {wr_ref} occ {occ_ref}: " \
                    f"retry_ignored {ctx.get(dut.retry_ignored)}"
                seen["req_taken" if in_window else "req_ignored"] += 1
                seen["wrapped_req_taken"] += in_window and wr_ref < occ_ref and eseq > wr_ref
            over = good and acks > occ_ref
            assert ctx.get(dut.cause_ack_overflow) == over, f"seed {seed} cycle {cycle}: ack overflow"
            seen["overflow"] += over
            sent = ctx.get(dut.send_new)
            occ_ref += sent - (min(acks, occ_ref) if good else 0)
            wr_ref = (wr_ref + sent) % depth
            seen["full"] += occ_ref == depth - 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("depth,reserve,seed", [(8, 2, 1), (8, 5, 2), (16, 4, 3)])
def test_occupancy_room_and_req_window(depth, reserve, seed):
    seen = _run(depth, reserve, seed)
    # The run reached what it is for: a full buffer, wrapped windows, Reqs taken and ignored.
    assert seen["full"] and seen["wrapped_req_taken"] and seen["req_ignored"] and seen["overflow"], seen
