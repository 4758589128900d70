"""Two link ends' Link Layer Retry over wires that corrupt flits, with flits as sequence tags: the harness
of formal/proof_link_retry_unbounded.py and its variants.

Each end is the RTL :class:`hdl.link.retry.LinkRetry` (the LinkPort's retry bookkeeping, unchanged)
and, around it, small abstract stand-ins for the LinkPort's wide parts, each keeping the contract the
block relies on in the port:

* **Flits.** A flit on the wire is its kind (a retryable flit, RETRY.Ack or RETRY.Req), for a retryable
  flit its ghost *tag* (the number of retryable flits its sender made before it, modulo ``2 * depth``:
  what the checker compares) and the acks it carries, and for a RETRY flit its Eseq (a RETRY.Ack's tag
  is the tag its replay starts with, for reading traces; no receiver reads it).  No payload: the block
  reads none.
* **Packer.** Offers a new flit whenever it pleases (``pk_valid`` free); the flit carries any number of
  acks up to what the end has handed its packer (``ack_add``) and not yet sent: the real packer sends 8
  in a protocol flit's Ak or its count in an LLCRD, a choice among these.  ``pk_lazy`` (an ack-only
  LLCRD) is free: it only moves the ack timers.
* **Retry buffer.** ``depth`` entries of (tag, acks), written at ``wr_seq`` with ``send_new``, read at
  ``rd_addr`` into a register (the port's memory: a synchronous read port, transparent for the write);
  an entry's tag is its index with a lap bit above it, and only the lap bit is stored.
* **Output register**, then the **wire**: a flit moves from the output register to the peer's
  pre-check stage when the stage takes it (``~valid | rx_ready``, as in the port) and the wire does not
  stall (free); a free ``corrupt`` bit makes the peer's CRC check fail (every other field of a
  corrupted flit is free, as a bit error leaves the payload undefined for the receiver).  The wire
  never drops or duplicates a flit (implicit sequence numbers cannot see those; the broken variant's
  wire drops).
* **Pre-check stage**: one register, as in the port: valid, CRC verdict, kind, tag, acks, Eseq.
* **Unpacker**: one input register and one registered status, as hdl/link/rx.py: it takes a flit when
  empty or retiring; a held flit retires when ``discard`` is high, when it breaks a rule (free: a
  CRC-good flit with a rule error, which the port retries too; never with ``rule_errors=False``), or
  when its consumers have room (free);
  one cycle later ``up_done`` and ``up_good`` or ``up_bad`` (a rule error), with the flit's acks and
  tag; a discarded flit retires with neither.  ``up_lazy`` is free.
* **Link error**: ``stopped`` is sticky and may be set at any cycle (free), which covers every cycle at
  which the block's own causes or the port's credit causes could set it.
* **Ghosts** (read only by formal/link_retry_invariants.py, never by a block): a RETRY.Req carries its
  sender's expected tag and made tag as it sent it (``floor`` and ``mark``), and the RETRY.Ack that
  answers it carries the same floor (``ack_floor`` while it is owed).

The checker of each direction counts the good flits its receiver retires and Asserts that each one's tag
is the next one its sender made: no flit is lost, duplicated or reordered, across any number of
retries.  Since messages, credits and acks travel only inside retryable flits and take effect only
from a good retire (hdl/link/port.py), that is the link's exactly-once, in-order delivery.  A second
Assert: the acks a sender receives never exceed its outstanding flits (``cause_ack_overflow``), i.e.
acks are conserved across replays (a replayed flit repeats its acks; only one copy may count).
``invariants=True`` also asserts formal/link_retry_invariants.py's invariants, which make both
inductive (formal/proof_link_retry_unbounded.py).
"""

import enum

from amaranth.asserts import AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Elaboratable, Module, Mux, Signal

from formal.common import no_reset
from formal.link_retry_invariants import add_invariants
from hdl.link.retry import LinkRetry

__all__ = ["LinkRetryPair", "Kind", "PARAMS", "params_text"]

# The smallest sizes at which every rule acts: sequence numbers wrap at 4 (at most 3 flits
# outstanding), a reserve of 1, Req re-sends and ack hand-overs after 1 cycle.  The link-error limits
# are 1 too, but the harness stops an end at any cycle anyway (below), which covers every cycle at which
# they could.
PARAMS = dict(depth=4, reserve=1, ack_timer=1, retry_timeout=1, retry_limit=1, ack_timeout=1)


def params_text(params=PARAMS):
    """LinkRetry's parameters as the proofs' descriptions name them: "depth 4, reserve 1, ..."."""
    return ", ".join(f"{k} {v}" for k, v in params.items())


class Kind(enum.IntEnum):
    DATA = 0                # a retryable flit (protocol, all-data or LLCRD)
    ACK = 1                 # RETRY.Ack
    REQ = 2                 # RETRY.Req


class _Flit:
    """The abstract flit's fields as registers named ``prefix_*``."""

    def __init__(self, prefix, tag_bits, ack_bits, seq_bits, with_valid=True):
        self.valid = Signal(name=f"{prefix}_valid") if with_valid else None
        self.crc_ok = Signal(name=f"{prefix}_crc_ok")
        self.kind = Signal(Kind, name=f"{prefix}_kind")
        self.tag = Signal(tag_bits, name=f"{prefix}_tag")
        self.acks = Signal(ack_bits, name=f"{prefix}_acks")
        self.eseq = Signal(seq_bits, name=f"{prefix}_eseq")    # a correct sender's Eseq is below depth
        # ghosts, read only by the invariants (formal/link_retry_invariants.py): a RETRY.Req's and a
        # RETRY.Ack's *floor* (the flits its receiver had retired when it sent the Req) and a Req's
        # *mark* (the flits its sender had made then)
        self.floor = Signal(tag_bits, name=f"{prefix}_floor")
        self.mark = Signal(tag_bits, name=f"{prefix}_mark")


class LinkRetryPair(Elaboratable):
    """Ends ``a`` and ``b`` (``self.ends``), each a LinkRetry with its abstract packer, buffer, output
    register and unpacker; a wire each way.  ``drop``: the wires may lose a flit (the broken
    variant).  ``params``: LinkRetry's (default :data:`PARAMS`)."""

    Kind = Kind

    def __init__(self, drop=False, params=None, invariants=False, rule_errors=True):
        self.params = dict(PARAMS if params is None else params)
        self.drop = drop
        # rule_errors=False: CRC-good flits never break a rule, and a receiver in NORMAL must then never
        # get a RETRY.Ack it cannot place (Asserted; formal/proof_link_retry_no_rule_errors_unbounded.py)
        self.rule_errors = rule_errors
        # invariants: also Assert formal/link_retry_invariants.py's, which make the property inductive
        self.invariants = invariants
        self.ends = {n: LinkRetry(ack_add_bits=4, **self.params) for n in "ab"}
        D = self.params["depth"]
        self.tag_bits = (D - 1).bit_length() + 1    # tags modulo 2 * depth
        self.ack_bits = (D - 1).bit_length()        # acks in one abstract flit: up to depth - 1, the most outstanding
        # what the checkers and the variants read
        self.made = {}          # end -> its next new flit's tag (its wr_seq and its lap)
        self.expected = {}      # end -> the tag its receiver must retire next
        self.pending = {}       # end -> acks handed to its packer, not yet in a flit
        self.stopped = {}
        self.pre, self.hold, self.stat = {}, {}, {}     # end -> its pre-check stage, unpacker input, status
        self.out = {}           # end -> its output register's fields (valid: the block's out_valid)
        self.lap = {}           # end -> the lap bit of its next new flit's tag
        self.buf_lap, self.buf_acks = {}, {}    # end -> its retry buffer's entries (Arrays of depth)
        self.rd = {}            # end -> (index, lap, acks) of its retry buffer's read register
        self.good, self.bad, self.done = {}, {}, {}     # end -> its unpacker's registered status
        self.ack_floor = {}     # end -> the floor of the RETRY.Ack it owes (a ghost, as _Flit.floor)
        self.ack_start = {}     # end -> the tag of the flit the replay of the RETRY.Ack it owes starts with

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        D = self.params["depth"]
        TB, AB, SB = self.tag_bits, self.ack_bits, (D - 1).bit_length()
        ends = self.ends
        for n, e in ends.items():
            # elaborated here, not by Fragment.get, so that covers can read ``e.debug``
            e._MustUse__silence = True
            m.submodules[f"llr_{n}"] = e.elaborate(platform)

        out, pre, hold, stat = {}, {}, {}, {}
        for n in "ab":
            out[n] = _Flit(f"{n}_out", TB, AB, SB, with_valid=False)      # valid is the block's out_valid
            pre[n] = _Flit(f"{n}_pre", TB, AB, SB)                         # this end's pre-check stage
            hold[n] = _Flit(f"{n}_hold", TB, AB, SB)                       # its unpacker's input register
            stat[n] = _Flit(f"{n}_stat", TB, AB, SB, with_valid=False)     # the status of the flit retired last
            self.made[n] = Signal(TB, name=f"{n}_made")
            self.expected[n] = Signal(TB, name=f"{n}_expected")
            self.pending[n] = Signal(AB + 1, name=f"{n}_pending")
            self.stopped[n] = Signal(name=f"{n}_stopped")
        self.pre, self.hold, self.stat, self.out = pre, hold, stat, out

        for n, peer in (("a", "b"), ("b", "a")):
            e, f = ends[n], ends[peer]
            o, pr, h, st = out[n], pre[n], hold[n], stat[n]

            # ---------------------------------------------------------------- link error
            # any cycle may stop the end: that covers every cycle at which the block's own causes (or the
            # port's credit causes) could, so they need not be connected
            with m.If(AnySeq(1)):
                m.d.sync += self.stopped[n].eq(1)
            m.d.comb += [e.stopped.eq(self.stopped[n]), e.withhold_acks.eq(0)]

            # ---------------------------------------------------------------- packer
            carry = Signal(AB, name=f"{n}_carry")           # acks the offered flit carries
            m.d.comb += [carry.eq(AnySeq(AB)), Assume(carry <= self.pending[n]),
                         e.pk_valid.eq(AnySeq(1)), e.pk_lazy.eq(AnySeq(1))]
            m.d.sync += self.pending[n].eq(self.pending[n] + e.ack_add - Mux(e.send_new, carry, 0))

            # ---------------------------------------------------------------- retry buffer
            # A tag is its flit's sequence number (the buffer index, ``wr_seq`` for the next new flit)
            # with one more bit above it, the lap: so the buffer stores only each entry's lap bit (and
            # its acks), and ``made`` is ``wr_seq`` with the sender's lap.  Nothing is lost, and the
            # proof need not learn that a tag's low bits are its index.
            lap = self.lap[n] = Signal(name=f"{n}_lap")
            m.d.comb += self.made[n].eq(Cat(e.wr_seq, lap))
            with m.If(e.send_new & (e.wr_seq == D - 1)):
                m.d.sync += lap.eq(~lap)
            buf_lap = Array(Signal(name=f"{n}_buf_lap{i}") for i in range(D))
            buf_acks = Array(Signal(AB, name=f"{n}_buf_acks{i}") for i in range(D))
            rd_idx, rd_lap, rd_acks = Signal(SB, name=f"{n}_rd_idx"), Signal(name=f"{n}_rd_lap"), \
                Signal(AB, name=f"{n}_rd_acks")
            rd_tag = Cat(rd_idx, rd_lap)
            self.buf_lap[n], self.buf_acks[n], self.rd[n] = buf_lap, buf_acks, (rd_idx, rd_lap, rd_acks)
            with m.If(e.send_new):
                m.d.sync += [buf_lap[e.wr_seq].eq(lap), buf_acks[e.wr_seq].eq(carry)]
            # synchronous read, transparent for the write of the same cycle
            m.d.sync += rd_idx.eq(e.rd_addr)
            with m.If(e.send_new & (e.wr_seq == e.rd_addr)):
                m.d.sync += [rd_lap.eq(lap), rd_acks.eq(carry)]
            with m.Else():
                m.d.sync += [rd_lap.eq(buf_lap[e.rd_addr]), rd_acks.eq(buf_acks[e.rd_addr])]

            # ---------------------------------------------------------------- output register
            ack_floor = self.ack_floor[n] = Signal(TB, name=f"{n}_ack_floor")
            # an Ack's tag (ghost, never read by the receiver): the tag of the flit its replay starts with,
            # ``wr_seq - rp`` flits behind the next new one
            ack_start = self.ack_start[n] = Signal(TB, name=f"{n}_ack_start")
            m.d.comb += ack_start.eq(self.made[n] - ((e.wr_seq - e.debug["rp"]) % D))
            with m.If(e.debug["req_ok"]):
                m.d.sync += ack_floor.eq(pr.floor)
            with m.If(e.send_ack):
                m.d.sync += [o.kind.eq(Kind.ACK), o.eseq.eq(e.ack_eseq), o.tag.eq(ack_start), o.floor.eq(ack_floor)]
            with m.Elif(e.send_req):
                m.d.sync += [o.kind.eq(Kind.REQ), o.eseq.eq(e.req_eseq),
                             o.floor.eq(self.expected[n]), o.mark.eq(self.made[n])]
            with m.Elif(e.send_rep):
                m.d.sync += [o.kind.eq(Kind.DATA), o.tag.eq(rd_tag), o.acks.eq(rd_acks)]
            with m.Elif(e.send_new):
                m.d.sync += [o.kind.eq(Kind.DATA), o.tag.eq(self.made[n]), o.acks.eq(carry)]

            # ---------------------------------------------------------------- wire into the peer
            fp = pre[peer]
            peer_takes, stall, corrupt = Signal(name=f"{n}_peer_takes"), Signal(name=f"{n}_stall"), \
                Signal(name=f"{n}_corrupt")
            m.d.comb += [stall.eq(AnySeq(1)), corrupt.eq(AnySeq(1))]
            in_ready = Signal(name=f"{peer}_in_ready")
            m.d.comb += [in_ready.eq(~fp.valid | f.rx_ready),
                         e.tx_ready.eq(in_ready & ~stall),
                         peer_takes.eq(in_ready & ~stall)]
            moves = Signal(name=f"{n}_wire_moves")
            m.d.comb += moves.eq(peer_takes & e.out_valid & ~self.stopped[n])
            arrive = moves
            if self.drop:
                # the broken wire: may lose a flit on its way
                lost = Signal(name=f"{n}_lost")
                m.d.comb += lost.eq(AnySeq(1))
                arrive = moves & ~lost
            with m.If(in_ready):
                m.d.sync += fp.valid.eq(arrive)
                with m.If(corrupt):
                    m.d.sync += [fp.crc_ok.eq(0), fp.kind.eq(AnySeq(2)), fp.tag.eq(AnySeq(TB)),
                                 fp.acks.eq(AnySeq(AB)), fp.eseq.eq(AnySeq(SB))]
                with m.Else():
                    m.d.sync += [fp.crc_ok.eq(1), fp.kind.eq(o.kind), fp.tag.eq(o.tag), fp.acks.eq(o.acks),
                                 fp.eseq.eq(o.eseq), fp.floor.eq(o.floor), fp.mark.eq(o.mark)]

            # ---------------------------------------------------------------- receiver: pre-check into the block
            m.d.comb += [e.rx_valid.eq(pr.valid), e.rx_crc_ok.eq(pr.crc_ok),
                         e.rx_is_req.eq(pr.kind == Kind.REQ), e.rx_is_ack.eq(pr.kind == Kind.ACK),
                         e.rx_is_other.eq(0),
                         e.rx_req_eseq.eq(pr.eseq), e.rx_req_nretry.eq(AnySeq(5)), e.rx_ack_eseq.eq(pr.eseq)]

            # ---------------------------------------------------------------- unpacker
            rule_err, room = Signal(name=f"{n}_rule_error"), Signal(name=f"{n}_room")
            m.d.comb += [rule_err.eq(AnySeq(1) if self.rule_errors else 0), room.eq(AnySeq(1))]
            if not self.rule_errors:
                # in NORMAL, a CRC-good RETRY.Ack whose start is not among the flits received since the
                # last resume (the block then counts it in retry_ignored and waits for a replay)
                m.d.comb += Assert(~(e.retry_ignored & pr.crc_ok & (pr.kind == Kind.ACK) & ~e.waiting & ~e.up_bad),
                                   f"{n}: a RETRY.Ack it cannot place, without any rule error")
            retire = Signal(name=f"{n}_retire")
            m.d.comb += [retire.eq(h.valid & (e.up_bad | rule_err | room)),
                         e.up_ready.eq(~h.valid | retire)]
            with m.If(e.up_ready):
                m.d.sync += [h.valid.eq(e.up_valid), h.tag.eq(pr.tag), h.acks.eq(pr.acks)]
            commit = Signal(name=f"{n}_commit")
            m.d.comb += commit.eq(retire & ~e.up_bad)
            good_r, bad_r = Signal(name=f"{n}_good"), Signal(name=f"{n}_bad")
            m.d.sync += [good_r.eq(commit & ~rule_err), bad_r.eq(commit & rule_err), st.tag.eq(h.tag),
                         st.acks.eq(Mux(commit & ~rule_err, h.acks, 0))]
            done_r = Signal(name=f"{n}_done")
            self.good[n], self.bad[n], self.done[n] = good_r, bad_r, done_r
            m.d.sync += done_r.eq(retire)
            m.d.comb += [e.up_done.eq(done_r), e.up_good.eq(good_r), e.up_bad.eq(bad_r),
                         e.up_acks.eq(st.acks), e.up_lazy.eq(AnySeq(1))]

            # ---------------------------------------------------------------- checker
            with m.If(e.up_good):
                m.d.sync += self.expected[n].eq(self.expected[n] + 1)
                m.d.comb += Assert(st.tag == self.expected[n],
                                   f"{n}: a good flit that is not the next one its sender made "
                                   "(lost, duplicated or reordered)")
            m.d.comb += Assert(~e.cause_ack_overflow, f"{n}: acks above the flits outstanding")
        if self.invariants:
            add_invariants(m, self)
        return m
