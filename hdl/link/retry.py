"""The bookkeeping of Link Layer Retry for one link end: sequence numbers, acks, the receiver's WAIT state
and the sender's replay, without any flit's payload.

:class:`hdl.link.port.LinkPort` keeps every wide part (the pre-check stage that registers an incoming
flit with its CRC verdict and RETRY-kind matches, the retry buffer's memory, the 528-bit output
register, the RETRY flits' encoding) and hands this block only what the retry rules read: whether the
pre-checked flit is CRC-good and which RETRY kind it is with its Eseq fields; the unpacker's status of
each retired flit; whether the packer offers a flit and whether it is an ack-only LLCRD.  The block
answers with what the port does with them: forward the flit to the unpacker or drop it, take it from
the pre-check stage, what to put on the wire next (``send_ack`` / ``send_req`` / ``send_rep`` /
``send_new``, one-cycle strobes of the output register's load), the retry buffer's addresses, the
RETRY flits' fields, the acks handed to the packer, and the occupancy rules.  The rules themselves are
described in hdl/link/port.py ("Link Layer Retry as implemented", "Link errors"); splitting them off
lets formal/proof_link_retry_unbounded.py check them for two ends over an abstract wire, where
flits are sequence tags rather than 528-bit payloads.

Ports (all ``In``/``Out`` of the component; ``D`` = ``depth``, ``seq`` = ``log2(D)`` bits):

Receiver side: ``rx_valid``, ``rx_crc_ok``, ``rx_is_req``, ``rx_is_ack``, ``rx_is_other`` (RETRY.Idle
or RETRY.Frame), ``rx_req_eseq`` / ``rx_req_nretry`` (a RETRY.Req's fields), ``rx_ack_eseq`` (a
RETRY.Ack's) -> ``rx_ready`` (the pre-check stage hands its flit on), ``up_valid`` (forward it to the
unpacker, whose ``up_ready`` is an input).  From the unpacker, one cycle after it retires a flit:
``up_done``, ``up_good``, ``up_bad`` (a rule or CRC error: the port drives the unpacker's ``discard``
with it), ``up_acks`` (flits the flit acknowledges, read only with ``up_good``: the port wires the
unpacker's ``acks_if_good``, so the verdict comes last in the occupancy's logic), ``up_lazy`` (it is
an LLCRD returning no credits).  ``ack_add`` (to the packer: received flits to acknowledge).

Sender side: ``pk_valid`` (the packer offers a flit), ``pk_lazy`` (it is an LLCRD returning no
credits), ``tx_ready`` (the wire takes the output register) -> ``pk_ready``, ``out_valid`` (the output
register holds a flit), ``send_ack`` / ``send_req`` / ``send_rep`` / ``send_new`` (what the output
register loads at this edge: a RETRY.Ack, a RETRY.Req, the retry buffer's read data, the packer's
flit), the same choice without the wire's ``tx_ready`` for the register's data select (``pick_ack`` /
``pick_ctl`` / ``pick_rep``: what the register takes if it loads; ``out_load``: it loads, whether or
not anything was chosen, since with nothing chosen ``out_valid`` is 0 and no one reads the payload),
``rd_addr`` (the retry buffer's read address, a registered read: the data is the entry at the
address of the cycle before), ``wr_seq`` (its write address: the next new flit's sequence number),
and the RETRY flits' fields: ``ack_eseq``, ``ack_nretry``, ``ack_empty``, ``num_free_buf`` (RETRY.Ack;
its WrPtr is ``wr_seq``), ``req_eseq``, ``req_nretry`` (RETRY.Req).

Status and errors: ``stopped`` (``In``: the port's sticky link error; the block then takes and drops
every flit and sends nothing), ``withhold_acks`` (``In``, a test knob), ``waiting`` (the receiver is in
WAIT), ``occ`` (retry-buffer entries not yet acknowledged), ``room`` (``occ < D - reserve``, a
register: new messages may enter the packer), ``crc_bad`` / ``retry_ignored`` / ``retry_unused``
(one-cycle pulses for the port's error counters), ``cause_retry_limit``, ``cause_ack_timeout``,
``cause_ack_overflow`` (this cycle's link-error causes of the retry rules).

Latency: none of its own: every output is a function of its registers and of this cycle's inputs,
and a flit passes through in the cycle the pre-check stage offers it (back-pressure: the unpacker's
``up_ready`` for a forwarded flit, nothing else; a resuming RETRY.Ack that comes while the unpacker
still holds flits is ignored, see ``resume_ok``).
"""

from amaranth.hdl import Assert, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.rx import ACK_BITS
from cxl.flit import AK_FLITS

SEQ_FIELD_BITS = 8          # Ref: docs/sources.md §2.5 (Eseq / WrPtr 8 b, wrap <= 256)
NUM_RETRY_BITS = 5          # Ref: docs/sources.md §2.5 (NUM_RETRY 5 b)

__all__ = ["LinkRetry", "SEQ_FIELD_BITS", "NUM_RETRY_BITS"]


class LinkRetry(wiring.Component):
    """LLR bookkeeping of one link end; see the module docstring.

    Parameters: ``depth`` (retry-buffer entries and the sequence numbers' modulus: a power of two,
    4..256; the link port allows 16..256), ``reserve`` (entries kept free: ``room`` is low while fewer
    are free; 0 <= reserve < depth - 1), ``ack_timer``, ``retry_timeout``, ``retry_limit``,
    ``ack_timeout`` (cycles or counts >= 1, hdl/link/port.py), ``ack_add_bits`` (width of ``ack_add``,
    the packer's counter)."""

    def __init__(self, *, depth, reserve, ack_timer, retry_timeout, retry_limit, ack_timeout, ack_add_bits):
        if depth not in (4, 8, 16, 32, 64, 128, 256):
            raise ValueError(f"depth={depth!r}: a power of two 4..256 (the 8-bit Eseq / WrPtr fields)")
        if isinstance(reserve, bool) or not (isinstance(reserve, int) and 0 <= reserve < depth - 1):
            raise ValueError(f"reserve={reserve!r}: must be an integer 0..{depth - 2} for depth={depth}")
        for name, v in (("ack_timer", ack_timer), ("retry_timeout", retry_timeout),
                        ("retry_limit", retry_limit), ("ack_timeout", ack_timeout), ("ack_add_bits", ack_add_bits)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r}: must be an integer >= 1")
        if (1 << ack_add_bits) <= AK_FLITS:
            raise ValueError(f"ack_add_bits={ack_add_bits}: too narrow for {AK_FLITS} acks")
        self.depth, self.reserve = depth, reserve
        self.ack_timer, self.retry_timeout = ack_timer, retry_timeout
        self.retry_limit, self.ack_timeout = retry_limit, ack_timeout
        seq = (depth - 1).bit_length()
        # Internal state by name (filled by ``elaborate``), for testbenches and proofs.
        self.debug = {}
        super().__init__({
            # receiver
            "rx_valid": In(1), "rx_crc_ok": In(1), "rx_is_req": In(1), "rx_is_ack": In(1), "rx_is_other": In(1),
            "rx_req_eseq": In(SEQ_FIELD_BITS), "rx_req_nretry": In(NUM_RETRY_BITS), "rx_ack_eseq": In(SEQ_FIELD_BITS),
            "rx_ready": Out(1), "up_valid": Out(1), "up_ready": In(1),
            "up_done": In(1), "up_good": In(1), "up_bad": In(1), "up_acks": In(range(1 << ACK_BITS)), "up_lazy": In(1),
            "ack_add": Out(ack_add_bits),
            # sender
            "pk_valid": In(1), "pk_lazy": In(1), "tx_ready": In(1), "pk_ready": Out(1), "out_valid": Out(1),
            "send_ack": Out(1), "send_req": Out(1), "send_rep": Out(1), "send_new": Out(1),
            "pick_ack": Out(1), "pick_ctl": Out(1), "pick_rep": Out(1), "out_load": Out(1),
            "rd_addr": Out(seq), "wr_seq": Out(seq),
            "ack_eseq": Out(seq), "ack_nretry": Out(NUM_RETRY_BITS), "ack_empty": Out(1),
            "num_free_buf": Out(range(depth + 1)), "req_eseq": Out(seq), "req_nretry": Out(NUM_RETRY_BITS),
            # status and errors
            "stopped": In(1), "withhold_acks": In(1),
            "waiting": Out(1), "occ": Out(range(depth + 1)), "room": Out(1, init=1),
            "crc_bad": Out(1), "retry_ignored": Out(1), "retry_unused": Out(1),
            "cause_retry_limit": Out(1), "cause_ack_timeout": Out(1), "cause_ack_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth
        seq_bits = (D - 1).bit_length()
        stopped = self.stopped

        # ============================================================ receiver: state
        waiting = self.waiting                  # WAIT: discard until the replay
        eseq = Signal(seq_bits)                 # the sequence number asked for
        next_seq = Signal(seq_bits)             # number of the next flit handed to the unpacker
        ret_seq = Signal(seq_bits)              # number of the next flit the unpacker retires (counted)
        inflight = Signal(range(4))             # handed to the unpacker, status not seen yet
        skip = Signal(range(D + 1))             # duplicate flits to drop after a late RETRY.Ack
        since_resume = Signal(range(D + 1))     # flits handed over since the last resume (saturating)
        # The flags that gate a new flit are written through their next values (``*_next``, comb, holding
        # by default), so that ``new_ready`` (below) can be a register worked out from them.
        def flag(name):
            cur, nxt = Signal(name=name), Signal(name=f"{name}_next")
            m.d.comb += nxt.eq(cur)
            m.d.sync += cur.eq(nxt)
            return cur, nxt

        req_pending, req_pending_next = flag("req_pending")
        req_timer = Signal(range(self.retry_timeout + 1))
        num_retry = Signal(NUM_RETRY_BITS)
        wait_timeouts = Signal(range(self.retry_limit + 1))     # unanswered RETRY.Req re-sends, this episode

        good_c, bad_c = self.up_good, self.up_bad
        m.d.sync += Assert(~bad_c | (inflight <= 2), "more than one flit behind a rule error")
        wait_eff = Signal()
        m.d.comb += wait_eff.eq(waiting | bad_c)

        crc_ok = self.rx_crc_ok
        is_retry = Signal()
        m.d.comb += is_retry.eq(self.rx_is_req | self.rx_is_ack | self.rx_is_other)
        is_data = Signal()                      # CRC good and not a RETRY flit: a retryable flit
        fwd_ok = Signal()
        m.d.comb += [is_data.eq(crc_ok & ~is_retry),
                     fwd_ok.eq(~wait_eff & (skip == 0) & ~stopped)]
        ack_field, req_field = self.rx_ack_eseq, self.rx_req_eseq
        ack_match = Signal()
        m.d.comb += ack_match.eq(crc_ok & self.rx_is_ack & (ack_field == eseq))
        # The pre-check stage hands its flit on in every cycle but one where a flit forwarded to the
        # unpacker waits for it (``up_ready``, 1 with the non-stalling unpacker the port builds: then
        # ``rx_ready`` is 1 and no load of the port's input registers waits on the retry rules).  A
        # resuming RETRY.Ack that comes while the unpacker still holds forwarded flits is taken and
        # ignored (``resume_ok``; the receiver stays in WAIT, and its next RETRY.Req brings another Ack).
        # Before, that Ack was held in the pre-check stage until the unpacker drained, so ``rx_ready``
        # depended on the flit's CRC verdict and RETRY match, and its net, the enable of ~2 000 input
        # register bits, was the link end's longest path (docs/link_layer.md, "RTL pipelining (Fmax)",
        # sixteenth round).
        resume_ok = Signal()
        m.d.comb += resume_ok.eq(ack_match & (inflight == 0))
        m.d.comb += [
            self.up_valid.eq(self.rx_valid & is_data & fwd_ok),
            self.rx_ready.eq(stopped | ~(is_data & fwd_ok) | self.up_ready),
        ]
        take, fwd = Signal(), Signal()
        # once stopped, flits are taken and dropped: none of them counts or acts
        m.d.comb += [take.eq(self.rx_valid & self.rx_ready & ~stopped), fwd.eq(take & is_data & fwd_ok)]
        got_req = Signal()
        got_ack = Signal()
        req_ok = Signal()
        m.d.comb += [self.crc_bad.eq(take & ~crc_ok),
                     got_req.eq(take & crc_ok & self.rx_is_req),
                     got_ack.eq(take & crc_ok & self.rx_is_ack)]

        # The counters add the late strobes by a select between sums made from the registers, not as
        # an adder's carry-in: ``fwd`` follows the pre-check stage's CRC verdict, and through the carry
        # chain of ``next_seq + fwd`` it was the link end's longest path with one placement
        # (docs/link_layer.md, "RTL pipelining (Fmax)").
        m.d.sync += [inflight.eq(Mux(fwd, Mux(self.up_done, inflight, inflight + 1),
                                     Mux(self.up_done, inflight - 1, inflight))),
                     next_seq.eq(Mux(fwd, next_seq + 1, next_seq)),
                     ret_seq.eq(Mux(good_c, ret_seq + 1, ret_seq))]
        with m.If(fwd):
            m.d.sync += since_resume.eq(Mux(since_resume == D, D, since_resume + 1))
        with m.If(take & is_data & ~wait_eff & (skip != 0)):
            m.d.sync += skip.eq(skip - 1)

        def start_wait(seq, episode_new):
            m.d.comb += req_pending_next.eq(1)
            m.d.sync += [waiting.eq(1), eseq.eq(seq), req_timer.eq(0), skip.eq(0),
                         num_retry.eq(0 if episode_new else Mux(num_retry == 31, 31, num_retry + 1))]

        diff = Signal(seq_bits)
        late_ack_ok = Signal()
        m.d.comb += diff.eq(next_seq - ack_field[:seq_bits])
        m.d.comb += late_ack_ok.eq((ack_field < D) & (diff <= since_resume))
        m.d.comb += self.cause_retry_limit.eq(wait_timeouts == self.retry_limit)
        with m.If(bad_c):
            start_wait(ret_seq, False)
            m.d.sync += num_retry.eq(Mux(waiting, Mux(num_retry == 31, 31, num_retry + 1), 0))
        with m.Elif(~waiting):
            with m.If(self.crc_bad):
                start_wait(next_seq, True)
            with m.Elif(got_ack):
                # The peer's replay restarts at the Ack's Eseq.  If that is a flit we have had since our
                # resume, drop the flits up to our place; otherwise we cannot place the stream that
                # follows (the Ack may answer an old Req of ours whose Eseq is behind our resume point),
                # so ask for a replay from our next flit, as after a CRC error.
                with m.If(late_ack_ok):
                    m.d.sync += skip.eq(diff)
                with m.Else():
                    start_wait(next_seq, True)
        with m.Else():                                      # WAIT
            with m.If(got_ack & resume_ok):
                m.d.sync += [waiting.eq(0), next_seq.eq(eseq), ret_seq.eq(eseq), skip.eq(0), wait_timeouts.eq(0),
                             since_resume.eq(0), Assert(inflight == 0, "resume with flits in the unpacker")]
                m.d.comb += req_pending_next.eq(0)
            with m.Elif(self.send_req):
                m.d.comb += req_pending_next.eq(0)
                m.d.sync += req_timer.eq(0)
            with m.Elif(~req_pending):
                with m.If(req_timer == self.retry_timeout - 1):
                    m.d.comb += req_pending_next.eq(1)
                    m.d.sync += [req_timer.eq(0),
                                 num_retry.eq(Mux(num_retry == 31, 31, num_retry + 1)),
                                 wait_timeouts.eq(Mux(wait_timeouts == self.retry_limit, wait_timeouts,
                                                      wait_timeouts + 1))]
                with m.Else():
                    m.d.sync += req_timer.eq(req_timer + 1)
        m.d.comb += [self.req_eseq.eq(eseq), self.req_nretry.eq(num_retry)]

        # ============================================================ receiver: acks to send
        ack_cnt = Signal(range(AK_FLITS + 1))
        ack_armed = Signal()
        ack_t = Signal(range(self.ack_timer + 1))
        hand = Signal()
        m.d.comb += [hand.eq((ack_cnt >= AK_FLITS) | (ack_armed & (ack_t >= self.ack_timer))),
                     self.ack_add.eq(Mux(hand & ~self.withhold_acks, ack_cnt, 0))]
        m.d.sync += [ack_cnt.eq(Mux(hand, 0, ack_cnt) + good_c),
                     ack_armed.eq((ack_armed & ~hand) | (good_c & ~self.up_lazy)),
                     ack_t.eq(Mux(hand | ~ack_armed, 0, Mux(ack_t == self.ack_timer, ack_t, ack_t + 1)))]

        # ============================================================ sender: output and replay
        occ = self.occ                          # retry-buffer entries not yet acknowledged
        occ_next = Signal(range(D + 1))
        wr_seq = self.wr_seq                    # sequence number of the next new flit
        tail = Signal(seq_bits)                 # sequence number of the oldest unacknowledged flit
        rp = Signal(seq_bits)                   # replay pointer
        replay_on, replay_on_next = flag("replay_on")
        ack_pending, ack_pending_next = flag("ack_pending")
        ack_eseq = self.ack_eseq
        ack_nretry = self.ack_nretry

        out_valid = self.out_valid
        load = Signal()
        m.d.comb += load.eq(~out_valid | self.tx_ready)
        # Replaying: ``replay_on`` alone.  Every use below is masked by ``~ack_pending``, and without an
        # ack pending ``replay_on`` implies ``rp != wr_seq`` (replay ends as ``rp`` reaches ``wr_seq``, and
        # no new flit moves ``wr_seq`` while replaying): an invariant of the unbounded proofs
        # (formal/link_retry_invariants.py, "replay on: pointer behind wr_seq") and an Assert here.  So
        # the pointer compare is out of the paths from ``wr_seq`` into the send choice and the port's
        # outgoing flit register (the link end's longest path with one placement; docs/link_layer.md,
        # twelfth round, which measured no Fmax change from it).
        replay_active = replay_on
        m.d.sync += Assert(~replay_on | ack_pending | (rp != wr_seq), "replaying with the pointer at wr_seq")
        # A new flit may go when no RETRY flit or replay is due and the buffer has a free entry:
        # ``new_ready``, a register worked out from the flags' next values and the occupancy's (as
        # ``room``, below), so the packer's ``flit.ready`` is one gate after flip-flops.  Worked out
        # from the flags and an occupancy compare in its cycle, it was four LUT levels and a carry chain
        # from ``req_pending`` to the packer's skid register, the link end's longest path with one
        # placement (docs/link_layer.md, "RTL pipelining (Fmax)").
        new_ready = Signal(init=1)
        m.d.sync += Assert(new_ready == (~ack_pending & ~req_pending & ~replay_on & (occ < D - 1)),
                           "new_ready out of step with the flags and the occupancy")
        sel_ack, sel_req, sel_rep, new_ok, sel_new = Signal(), Signal(), Signal(), Signal(), Signal()
        rep_due = Signal()                      # a replayed flit is next (before ``stopped``)
        rp_after_rep = Signal(seq_bits)
        m.d.comb += [
            sel_ack.eq(ack_pending & ~stopped),
            sel_req.eq(~ack_pending & req_pending & ~stopped),
            rep_due.eq(~ack_pending & ~req_pending & replay_active),
            sel_rep.eq(rep_due & ~stopped),
            new_ok.eq(new_ready & ~stopped),
            sel_new.eq(new_ok & self.pk_valid),
            self.pk_ready.eq(load & new_ok),
            self.send_ack.eq(load & sel_ack), self.send_req.eq(load & sel_req),
            self.send_rep.eq(load & sel_rep), self.send_new.eq(load & sel_new),
            # The output register's data select reads the choice alone and its enable ``load`` alone:
            # with the strobes as the select, the wire's ``tx_ready`` reached the select of all 528
            # bits through ``load``, and with the choice in the enable, ``ack_pending`` reached the
            # enable of all 528 bits through it (each the link end's longest path with one placement,
            # docs/link_layer.md "RTL pipelining (Fmax)").  With nothing chosen the register takes the
            # packer's payload and ``out_valid`` falls to 0, so no one reads it.
            self.pick_ack.eq(sel_ack), self.pick_ctl.eq(sel_ack | sel_req), self.pick_rep.eq(sel_rep),
            self.out_load.eq(load),
            self.ack_empty.eq(rp == wr_seq), self.num_free_buf.eq(D - 1 - occ),
            # The read address is the replay pointer after the edge.  Its select between ``rp + 1`` and
            # ``rp`` leaves out ``stopped`` (once stopped nothing is sent, so what is read no longer
            # matters) and takes ``load`` last: from ``stopped`` through the send choice it ran into
            # the retry buffer's address, the link end's longest path with one placement
            # (docs/link_layer.md, "RTL pipelining (Fmax)").
            rp_after_rep.eq(Mux(rep_due, rp + 1, rp)),
            self.rd_addr.eq(Mux(load, rp_after_rep, rp)),
        ]

        with m.If(load):
            m.d.sync += out_valid.eq(sel_ack | sel_req | sel_rep | sel_new)
            with m.If(sel_ack):
                m.d.comb += [ack_pending_next.eq(0), replay_on_next.eq(rp != wr_seq)]
            with m.Elif(sel_rep):
                m.d.sync += rp.eq(rp + 1)
                with m.If((rp + 1)[:seq_bits] == wr_seq):      # modulo the depth
                    m.d.comb += replay_on_next.eq(0)
            with m.Elif(sel_new):
                m.d.sync += wr_seq.eq(wr_seq + 1)

        # The peer's RETRY.Req: replay from its Eseq (must still be in the buffer).
        # In the window: ``wr_seq - Eseq <= occ`` modulo D, i.e. the Eseq lies from ``tail`` (kept as a
        # register, ``wr_seq - occ`` modulo D) to ``wr_seq``, a range that wraps past 0 when
        # ``wr_seq < occ``.  Three compares side by side instead of a subtraction and then a compare:
        # the subtraction's carry chain from ``wr_seq`` into the enable of ``ack_pending`` was the link
        # end's longest path with one placement (docs/link_layer.md, "RTL pipelining (Fmax)").
        in_window = Signal()
        req_seq = req_field[:seq_bits]
        from_tail, to_head, wraps = Signal(), Signal(), Signal()
        m.d.comb += [from_tail.eq(req_seq >= tail), to_head.eq(req_seq <= wr_seq), wraps.eq(wr_seq < occ),
                     in_window.eq((req_field < D) & Mux(wraps, from_tail | to_head, from_tail & to_head)),
                     req_ok.eq(got_req & in_window)]
        with m.If(req_ok):
            m.d.comb += ack_pending_next.eq(1)
            m.d.sync += [rp.eq(req_field[:seq_bits]), ack_eseq.eq(req_field[:seq_bits]),
                         ack_nretry.eq(self.rx_req_nretry)]

        # Acks free entries oldest first; more acks than outstanding flits (impossible from a correct
        # peer) free what there is and are reported.  The occupancy after the edge and ``room`` are
        # worked out for a good flit and for none, each with and without a new flit, from registers
        # (``occ`` and the unpacker's ``acks_if_good``); the verdict and ``send_new`` pick among them
        # last.  Computed in line, the verdict went through a compare, a subtraction and a compare
        # into ``room``: the link end's longest path with one placement (docs/link_layer.md).
        counted = Signal()                      # the retired flit's acks count
        m.d.comb += counted.eq(good_c & ~stopped)
        # ``occ - acks`` saturating at 0 from one subtraction: its sign is the overflow, and the
        # compares below read the difference itself (a negative one is below every limit), so no
        # chain of compare, select and subtraction lies in front of them.
        over_if_good = Signal()
        left_if_good = Signal(range(-(1 << ACK_BITS), D + 1))   # occ - acks, signed
        freed_if_good = Signal(range(D + 1))
        occ_if_good = Signal(range(D + 1))
        m.d.comb += [left_if_good.eq(occ - self.up_acks), over_if_good.eq(left_if_good < 0),
                     freed_if_good.eq(Mux(over_if_good, occ, self.up_acks)),
                     occ_if_good.eq(Mux(over_if_good, 0, left_if_good))]
        freed = Signal(range(D + 1))
        m.d.comb += [freed.eq(Mux(counted, freed_if_good, 0)),
                     self.cause_ack_overflow.eq(counted & over_if_good)]
        kept = Signal(range(D + 1))             # the occupancy after the acks, before a new flit
        m.d.comb += [kept.eq(Mux(counted, occ_if_good, occ)), occ_next.eq(kept + self.send_new)]
        # ``room`` is ``occ < D - reserve`` registered from the value ``occ`` takes at the edge, so the
        # path from the occupancy into the packer's queue enables starts at a flop (hdl/link/port.py).
        # ``kept + send_new < L`` is ``kept < L - send_new``: four compares, then two selects.
        def below_after_edge(limit):            # occ_next < limit
            return Mux(counted, Mux(self.send_new, left_if_good < limit - 1, left_if_good < limit),
                       Mux(self.send_new, occ < limit - 1, occ < limit))
        limit = D - self.reserve
        m.d.sync += [occ.eq(occ_next), self.room.eq(below_after_edge(limit)), tail.eq(tail + freed),
                     new_ready.eq(~ack_pending_next & ~req_pending_next & ~replay_on_next & below_after_edge(D - 1)),
                     Assert(self.room == (occ < limit), "room out of step with the occupancy"),
                     Assert(tail == (wr_seq - occ)[:seq_bits], "tail out of step with wr_seq and the occupancy")]

        # Ack timeout: the newest flit that needs an ack (not an ack-only LLCRD, which the peer
        # acknowledges only with later traffic) is still outstanding and no ack has come for
        # ``ack_timeout`` cycles.  ``since_needy`` = flits written since that flit, plus one.
        since_needy = Signal(range(D + 1), init=D)
        with m.If(self.send_new):
            m.d.sync += since_needy.eq(Mux(self.pk_lazy, Mux(since_needy == D, D, since_needy + 1), 1))
        ack_wait = Signal(range(self.ack_timeout + 1))
        needy_out = Signal()
        m.d.comb += needy_out.eq(since_needy <= occ)
        m.d.sync += ack_wait.eq(Mux(needy_out & (freed == 0),
                                    Mux(ack_wait == self.ack_timeout, ack_wait, ack_wait + 1), 0))
        m.d.comb += self.cause_ack_timeout.eq(ack_wait == self.ack_timeout)

        # ============================================================ error pulses
        ack_used = Signal()
        m.d.comb += ack_used.eq(Mux(waiting, resume_ok, late_ack_ok))
        m.d.comb += [self.retry_ignored.eq((got_req & ~in_window) | (got_ack & ~ack_used)),
                     self.retry_unused.eq(take & crc_ok & self.rx_is_other)]

        self.debug.update({"eseq": eseq, "next_seq": next_seq, "ret_seq": ret_seq, "skip": skip,
                      "inflight": inflight, "wr_seq": wr_seq, "rp": rp, "replay_on": replay_on,
                      "ack_pending": ack_pending, "req_pending": req_pending, "since_resume": since_resume,
                      "req_timer": req_timer, "num_retry": num_retry, "wait_timeouts": wait_timeouts,
                      "ack_cnt": ack_cnt, "ack_armed": ack_armed, "ack_t": ack_t,
                      "since_needy": since_needy, "ack_wait": ack_wait, "waiting": waiting, "occ": occ, "tail": tail,
                      "req_ok": req_ok})
        return m
