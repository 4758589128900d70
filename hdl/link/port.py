"""One end of a CXL 2.0 68B-flit link: TX packer, RX unpacker, credits, acks and Link Layer Retry.

``LinkPort(upstream, ...)`` is the link layer of one side.  ``upstream=True`` is the device end (sends
D2H, receives H2D), ``False`` the host end (sends H2D, receives D2H).  It wraps a
:class:`hdl.link.tx.FlitPacker` (its TX direction) and a :class:`hdl.link.rx.FlitUnpacker` (the other
direction) and adds, around them and without changing them:

* **TX credits**: one :class:`hdl.dcoh.qos.CreditCounter` per sent channel (pool ``credits[cls]``);
  a message enters the packer only while its channel has a credit; credits come back in the credit
  fields of the flits this end receives.  ``Assert``: never negative (the counter's own asserts), never
  above the pool.
* **RX credit return**: when this end's consumer takes a message from an output stream, 1 is added to
  the packer's ``crd_*`` for that class (sent in the next protocol flit or an LLCRD).
* **Acks**: every good retryable received flit is counted; the count is handed to the packer's
  ``ack_add`` (Ak in protocol flits, 8 at a time, or an LLCRD when idle) when it reaches 8 or when
  ``ack_timer`` cycles have passed since the first un-handed flit that needs a prompt ack.
* **Retry buffer**: an ``amaranth.lib.memory.Memory`` of ``retry_depth`` flits; every flit the packer
  sends (protocol, all-data, LLCRD: all retryable) is written at the TX sequence number and stays until
  the peer acknowledges it (acks free entries oldest first).  New flits wait while ``retry_depth - 1``
  entries are in use, and new *messages* stop entering the packer while fewer than ``reserve`` =
  ``ceil(7 * tx_depth / 4) + 6 + FlitPacker.DECIDED_MAX`` entries are free: enough to drain the
  packer's queues and owed chunks and then send an LLCRD.  The golden packer's worst drain of a full
  packer (``models/flit/drain.py``) is 7, 12, 15 and 19 flits at depths 1, 4, 6 and 8 (at most
  ``ceil(7 * tx_depth / 4) + 5`` for depths 1 to 10), and the reserve must exceed it by
  1 + DECIDED_MAX (the flit written as the port stops taking messages, and the flits already decided
  in the packer's output stages and its skid register), which
  ``tests/test_rtl_link_port.py::test_reserve_covers_the_worst_drain`` checks for depths 1 to 10.  So an
  end whose buffer is nearly full still gets its pending acks out (in Ak or the packer's LLCRD, always
  at legal points of the flit stream), and two nearly full ends cannot deadlock waiting for each
  other's acks.  Without this rule both ends of a link at BER 1e-3 deadlocked with full buffers and the
  acks stuck inside the packers (seen in the BER test).
* **LLR** (below).

Ports (channel names lower case, shapes from :mod:`hdl.link.ports`): ``In`` streams for the three
channels this end sends (``d2h_req``, ``d2h_rsp``, ``d2h_data`` on the device end; ``h2d_*`` on the
host end), ``Out`` streams for the three it receives; ``tx_flit: Out(flit_stream())`` and
``rx_flit: In(flit_stream())`` (528-bit flits, payload 511:0, CRC 527:512).
Counters (32 bits, wrap): ``retries`` (RETRY.Req flits sent), ``crc_errors`` (received flits with a
bad CRC), ``rule_errors`` (CRC-good flits the unpacker rejected; the flit behind one, dropped unseen,
is not counted), ``flits_sent`` (every flit handed to the wire, control and replays included),
``flits_replayed``.  Status: ``rx_waiting`` (the receiver discards and waits for a replay),
``rx_good`` (one-cycle pulse per good retryable flit the unpacker retired and delivered),
``tx_occupancy`` (retry-buffer entries in use), ``tx_credits`` (available credits per class).
``rx_errors`` (32-bit counters, wrap, one per kind of bad input from the peer): ``crc`` and every rule
of :class:`hdl.link.rx.RxError` by its lower-case name (``type``, ``reserved``, ``be``, ``format``,
``rollover``, ``no_data``, ``padding``, ``ndr``, ``invalid``, ``opcode``, ``max``, ``sz``, ``control``),
``retry_ignored`` (a good RETRY.Req whose Eseq is not in the retry buffer, or a RETRY.Ack that answers
no request of this end) and ``retry_unused`` (RETRY.Idle / RETRY.Frame, which this link never sends).
``self.debug`` (set by ``elaborate``) names internal state signals for testbenches.

Link errors (no hang)
---------------------
A peer that stays silent or breaks the protocol must end in a reported error, not a stuck link.
``link_error`` (sticky) goes high and ``link_error_cause`` (a :class:`LinkErrorCause` bit set) says why:
``RETRY_LIMIT``: ``retry_limit`` RETRY.Reqs of one episode each went unanswered for
``retry_timeout`` cycles; ``ACK_TIMEOUT``: a
flit that needs an ack (any retryable flit but an ack-only LLCRD) was outstanding for ``ack_timeout``
cycles with no ack arriving; ``CREDIT_TIMEOUT``: a message waited ``credit_timeout`` cycles with no
credit for its channel; ``ACK_OVERFLOW``: the peer acknowledged more flits than were outstanding;
``CREDIT_OVERFLOW``: it returned more credits than were in flight (both impossible from a correct peer:
a duplicated flit on the wire, say; the excess is ignored); ``RX_OVERFLOW``: a received flit carried a
message for which this end had no room, so the peer sent beyond the credits this end grants (the
message is lost: the receiver never waits for room, below; reported a cycle after the receiver's
move stage finds it).  From the cycle after the error the port
**stops**: it sends nothing more, takes no new messages and drops every received flit (messages
already in the unpacker's queues still come out), so nothing is delivered from a link whose state is
no longer trusted.  The thresholds are assumptions (facts §2.5 names LL_REPLAY_COUNT, [S, low
reliability], without a value); the defaults sit far above anything a working link reaches (at BER
1e-3 a Req/Ack round trip fails with p ~ 0.65, so 64 failures in a row have p ~ 1e-12).

Fault knobs for testbenches (``In(1)``, 0 in normal use): ``withhold_acks`` (this end stops handing
acks to its packer) and ``withhold_credits`` (it stops returning credits): a misbehaving peer, as seen
from the other end.

Link Layer Retry as implemented
-------------------------------
Sequence numbers are implicit: both ends count retryable flits from 0 at reset, modulo
``retry_depth`` (a power of two <= 256); they are only carried in RETRY flits.  RETRY.* flits are
built here, never written to the retry buffer and never counted; every other flit is retryable.

Receiver (``rx_flit`` side).  The unpacker never waits for room in its output lanes
(``FlitUnpacker(stall=False)``, hdl/link/rx.py "Never waiting for room"): a peer that keeps to its
credits (the default pools, :func:`default_credits`, are exactly what the lanes hold) never sends a
message this end cannot take, as in CXL, where a receiver cannot hold the link back.  So the wire is
never held back (``rx_flit.ready`` is 1), and no clock enable of the ~2 000 input and pre-decode
register bits waits on the lanes' levels or on the retry rules.
Each incoming flit's CRC is checked here first (in a register stage in
front of the receiver: one cycle), and RETRY flits are recognised by their exact bit pattern in the same
stage, so neither a CRC-bad nor a RETRY flit ever reaches the unpacker (a RETRY flit may arrive while data
chunks are owed, which the unpacker would reject).  Both verdicts are the unpacker's own, worked out
in the first half of its pre-decode into registers loaded with this stage (hdl/link/rx.py, "Early
pre-decode").
* NORMAL: a CRC-good non-RETRY flit goes to the unpacker and gets the next expected sequence number.
  A CRC error -> WAIT with ``eseq`` = that flit's sequence number.  A rule error (a CRC-good flit
  that breaks a format rule) is reported by the unpacker two cycles after it took the flit, when it may
  already hold the next one: the rule-error pulse goes to the unpacker's ``discard`` input, which
  drops that one flit unseen (no messages, no state change, no credits or acks, not counted for
  sequence numbers), and the receiver enters WAIT with ``eseq`` = the bad flit's number in the same
  cycle, so nothing behind the bad flit is forwarded before the replay.  The replay then starts with
  the bad flit's number and re-sends the dropped flit too: every message is delivered exactly once.
* WAIT: every flit is discarded except RETRY flits; a RETRY.Req is sent (Eseq = ``eseq``, NUM_RETRY =
  re-sends in this episode) and re-sent every ``retry_timeout`` cycles until a RETRY.Ack echoing
  ``eseq`` arrives; then the receiver resumes at ``eseq`` (the peer replays from there).  An Ack that
  comes while the unpacker still holds flits forwarded before the WAIT is ignored (counted in
  ``retry_ignored``): the receiver stays in WAIT, drops the replay, and its next RETRY.Req (after
  ``retry_timeout``) brings another Ack.  It used to be held in the pre-check stage until the unpacker
  drained, which made ``rx_flit.ready`` depend on the flit's CRC verdict (docs/link_layer.md, "RTL
  pipelining (Fmax)", sixteenth round).
* A RETRY.Ack that arrives in NORMAL (the answer to a re-sent Req after the first Ack was already
  taken) announces a replay from its echoed Eseq: the receiver drops that many already-received flits
  (``next_seq - Eseq``) before forwarding again, so a duplicate Req never duplicates messages.  That
  holds while the Eseq is one of the flits received since the last resume; an Ack whose Eseq lies
  elsewhere (an old Req's answer: a rule error moved this end's Eseq back after it had sent a Req,
  and it resumed on the answer to a later Req with that same Eseq) leaves the receiver unable to place
  the replay that follows, so it enters WAIT with ``eseq = next_seq`` as after a CRC error (and counts
  the Ack in ``retry_ignored``).  Ignoring such an Ack, as this port once did, delivered a replayed
  flit twice: found with formal/proof_link_retry_unbounded.py's harness.
* A good RETRY.Req (in any state) asks the TX side to replay; one whose Eseq is no longer in the retry
  buffer (a duplicate Req whose flits were acknowledged in the meantime) is ignored.

Transmitter (``tx_flit`` side), one output register, priority: RETRY.Ack (answer to the peer's Req)
> RETRY.Req (this receiver's) > replay from the retry buffer > a new flit from the packer.  On the
peer's RETRY.Req(Eseq): the replay pointer is set to Eseq, a RETRY.Ack (echoed Eseq and NUM_RETRY,
WrPtr = TX sequence number, Empty = nothing to replay, NumFreeBuf) is sent, then every buffered flit
from Eseq up to the newest is sent again, bit for bit; a Req that arrives during a replay restarts it.
New flits wait until the replay is done.

Simplifications versus the spec (each a decision of this model):
* No RETRY.Frame flits before the Ack and no RETRY.Idle: the Ack itself marks where the replay starts.
  # Ref: docs/sources.md §2.5 (RETRY.Idle/Req/Ack/Frame encodings; their sequencing
  #      is not in the facts).
* No PHY re-initialisation: NUM_PHY_REINIT is always 0; a RETRY.Req is re-sent every
  ``retry_timeout`` cycles (a fixed timeout, assumption; LL_REPLAY_TIMER/LL_REPLAY_COUNT are [S, low
  reliability] in facts §2.5) until ``retry_limit`` of them went unanswered, then the port reports a
  link error and stops (see "Link errors").  NUM_RETRY counts re-sends within one episode and
  saturates at 31.
* Sequence numbers wrap at ``retry_depth`` (facts §2.5 [S]: "wrapping at the retry-buffer depth");
  the 8-bit Eseq/WrPtr fields carry them zero-extended.  At most ``retry_depth - 1`` flits are
  outstanding, so a distance between two sequence numbers is never ambiguous.
* Ack policy: hand over at 8 pending (facts §2.1: Ak = 8 flits [S]) or after ``ack_timer`` cycles
  (facts §2.4: an Ack/CRD flush timer exists; its value here is an assumption).  An LLCRD that returns
  no credits (an ack-only LLCRD) is counted and acknowledged but does not start the timer; otherwise
  two quiet ends would acknowledge each other's ack-only LLCRDs forever.  So a quiet link can leave up
  to 7 ack-only LLCRDs unacknowledged in each retry buffer (acked with the next traffic).
* RETRY flits are recognised by pattern before the unpacker: an all-data flit whose 512 bits happen to
  equal a RETRY flit (slots 1-3 all zero and slot 0 exactly a RETRY encoding) would be taken for one.
* Viral, IDE, INIT.Param and CXL.mem credits are not handled (received CXL.mem credits are ignored).

# Ref: docs/sources.md §2.1 (Ak = 8 flits), §2.3 (CRC), §2.4 (credit fields,
#      exponential encoding, 10-bit counters, Ack/CRD flush timer), §2.5 (RETRY encodings and payloads,
#      RETRY flits are the only non-retryable ones, implicit sequence numbers, 8-bit wrap value).
"""

import enum

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.dcoh.qos import CreditCounter
from hdl.link.crc import FlitCRC
from hdl.link.ports import FLIT_BITS, PAYLOAD_BITS, channel_stream, direction_channels, flit_stream
from hdl.link.rx import CONTROL_KIND_NAMES, FlitUnpacker, RxError
from hdl.link.retry import LinkRetry
from hdl.link.tx import FlitPacker
from cxl.control import CONTROL_KINDS, control, encode_control
from cxl.credits import CREDIT_CLASSES
from cxl.flit import DEFAULT_PACK_WAIT, MAX_CREDIT_BATCH, MAX_PER_FLIT, check_credit_batch, check_pack_wait

__all__ = ["LinkPort", "COUNTERS", "RETRY_KINDS", "RX_ERROR_KINDS", "LinkErrorCause", "default_credits",
           "default_credit_batch", "CREDIT_ROUND_TRIP", "rx_errors_signature"]

RETRY_KINDS = ("RETRY.Idle", "RETRY.Req", "RETRY.Ack", "RETRY.Frame")   # facts §2.5: not retryable
MAX_POOL = 1023             # Ref: docs/sources.md §2.4 (10-bit credit counters)
# Per-kind counters of bad input from the peer: the unpacker's rule codes, CRC, and two RETRY kinds.
RX_ERROR_KINDS = tuple(e.name.lower() for e in RxError if e is not RxError.NONE) + ("retry_ignored", "retry_unused")
RX_ERROR_BITS = 32
# The port's 32-bit event counters (module docstring, "Counters"), by name.
COUNTERS = ("retries", "crc_errors", "rule_errors", "flits_sent", "flits_replayed")
# Cycles from a message handed to the sending end to its credit being back at the sender, through two
# link ports (the packer's plan and four output stages, the wire, the peer's CRC pre-check and unpacker
# with its move stage, its consumer; the credit back the same way): 23 on an idle loopback
# (tests/test_rtl_link_port.py::test_credit_round_trip_on_an_idle_link, which checks it stays within
# this figure), a little more under load (docs/link_layer.md "Batching credit returns").  A property of
# this RTL, not of the specification.
CREDIT_ROUND_TRIP = 24


class LinkErrorCause(enum.IntFlag):
    """Why a port stopped (bits of ``link_error_cause``); see the module docstring."""
    RETRY_LIMIT = 1
    ACK_TIMEOUT = 2
    CREDIT_TIMEOUT = 4
    ACK_OVERFLOW = 8
    CREDIT_OVERFLOW = 16
    RX_OVERFLOW = 32


def rx_errors_signature():
    """The ``rx_errors`` port: one counter per kind in :data:`RX_ERROR_KINDS`."""
    return wiring.Signature({k: Out(RX_ERROR_BITS) for k in RX_ERROR_KINDS})


def default_credits(upstream, rx_depth):
    """Credits per class for the channels an end sends: what the peer's unpacker can buffer
    (``MAX_PER_FLIT`` lanes of ``rx_depth`` entries for req/rsp, one lane for data; see rx.py)."""
    peer_rx = direction_channels(upstream)
    return {cls: (1 if cls == "data" else MAX_PER_FLIT[ch]) * rx_depth
            for cls, ch in zip(CREDIT_CLASSES, peer_rx)}


def default_credit_batch(rx_depth):
    """The packer's ``credit_batch`` for an end whose smallest receive pool is ``rx_depth`` (the data lane):
    the largest power of two (credit fields return 1, 2, 4, ... 64: a batch leaves nothing behind) that
    still leaves the sender a round trip's worth of credits (``rx_depth - CREDIT_ROUND_TRIP``); 1, the
    eager rule, when the pool holds no more than a round trip (gathering would then slow the sender)."""
    room = min(rx_depth - CREDIT_ROUND_TRIP, MAX_CREDIT_BATCH)
    return 1 << (room.bit_length() - 1) if room >= 1 else 1


def _field(value, kind, name):
    """The bits of control field ``name`` of ``kind`` in payload ``value`` (pieces concatenated)."""
    pieces = sorted(CONTROL_KINDS[kind][2][name])
    return Cat(*(value[offset:offset + width] for _, offset, width in pieces))


def _place(m, target, kind, values):
    """Drive control fields of ``kind`` into ``target`` (the fixed bits are set by the caller)."""
    for name, v in values.items():
        for shift, offset, width in CONTROL_KINDS[kind][2][name]:
            v = Cat(v, Const(0, shift + width))                 # zero-extend narrower values
            m.d.comb += target[offset:offset + width].eq(v[shift:shift + width])


class LinkPort(wiring.Component):
    """One link end; see the module docstring.

    Parameters: ``upstream`` (True: device end), ``retry_depth`` (retry-buffer entries, a power of two,
    16..256), ``credits`` ({"req", "rsp", "data"}: credit pools of the sent channels; default: what the
    peer's unpacker buffers, :func:`default_credits`), ``ack_timer`` (cycles), ``retry_timeout``
    (cycles between RETRY.Req re-sends), ``rx_depth`` (unpacker lane depth), ``tx_depth`` (packer queue
    depth; 8 by default: with the default ``pack_wait`` a 4-deep packer has too few lines queued to fill
    a header flit with Data Headers, 0.961 of the streaming optimum against 0.996, and at 8 rather than
    6 the paced mixed workload reaches 0.976 of its bound rather than 0.959, bench/link_bench.py);
    ``retry_limit``, ``ack_timeout``, ``credit_timeout``: see "Link errors"; ``pack_wait``: the packer's
    ``wait`` (hdl/link/tx.py: decisions a partly filled protocol flit may be held; default
    ``cxl.flit.DEFAULT_PACK_WAIT``, 3); ``credit_batch``: the packer's (credits an idle packer gathers
    before an LLCRD; default :func:`default_credit_batch` of ``rx_depth``: 1 up to 25 entries)."""

    # Retry-buffer entries beyond the reserve, at least.  Assumption: one ack batch (8 flits, the Ak
    # granule) of room for new traffic, so that a buffer mostly kept for draining still lets a link
    # stream.
    STREAM_ROOM = 8

    def __init__(self, upstream, *, retry_depth=64, credits=None, ack_timer=16, retry_timeout=32,
                 rx_depth=8, tx_depth=8, retry_limit=64, ack_timeout=4096, credit_timeout=8192,
                 pack_wait=DEFAULT_PACK_WAIT, credit_batch=None):
        if not isinstance(upstream, bool):
            raise ValueError(f"upstream={upstream!r}: must be True (device end) or False (host end)")
        if retry_depth not in (16, 32, 64, 128, 256):
            raise ValueError(f"retry_depth={retry_depth!r}: a power of two 16..256 (facts §2.5: 8-bit "
                             "wrap value; at least 2 x Ak = 8 flits so acks can keep up)")
        if credits is None:
            credits = default_credits(upstream, rx_depth)
        if set(credits) != set(CREDIT_CLASSES) or not all(1 <= v <= MAX_POOL for v in credits.values()):
            raise ValueError(f"credits={credits!r}: need req/rsp/data pools of 1..{MAX_POOL}")
        for name, v in (("ack_timer", ack_timer), ("retry_timeout", retry_timeout),
                        ("retry_limit", retry_limit), ("ack_timeout", ack_timeout),
                        ("credit_timeout", credit_timeout)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r}: must be an integer >= 1")
        self.upstream = upstream
        self.retry_depth = retry_depth
        self.credits = dict(credits)
        self.ack_timer = ack_timer
        self.retry_timeout = retry_timeout
        self.retry_limit, self.ack_timeout, self.credit_timeout = retry_limit, ack_timeout, credit_timeout
        if ack_timeout <= ack_timer + retry_timeout:
            raise ValueError(f"ack_timeout={ack_timeout}: must exceed ack_timer + retry_timeout "
                             f"({ack_timer + retry_timeout}), or a working link would time out")
        self.rx_depth, self.tx_depth = rx_depth, tx_depth
        self.pack_wait = check_pack_wait(pack_wait, "pack_wait")
        self.credit_batch = check_credit_batch(default_credit_batch(rx_depth) if credit_batch is None else credit_batch)
        # Entries kept free for draining the packer (see elaborate): its queues and owed lines, in
        # flits, plus the LLCRD after them, plus the flit written as messages stop and the flits
        # already decided in the packer's output stages and skid register.  The drain term, ceil(7 * tx_depth / 4) + 5,
        # bounds the golden packer's worst drain (7 messages' and chunks' slots per queue depth, 4
        # slots a flit, the owed lines and the LLCRD), which the tests check for depths 1 to 10
        # (module docstring).
        self.reserve = (7 * tx_depth + 3) // 4 + 5 + 1 + FlitPacker.DECIDED_MAX
        if self.reserve + self.STREAM_ROOM > retry_depth:
            raise ValueError(f"retry_depth={retry_depth} too small for tx_depth={tx_depth}: need at least "
                             f"{self.reserve + self.STREAM_ROOM} entries")
        self.tx_chans = direction_channels(upstream)
        self.rx_chans = direction_channels(not upstream)
        members = {ch.name.lower(): In(channel_stream(ch)) for ch in self.tx_chans}
        members.update({ch.name.lower(): Out(channel_stream(ch)) for ch in self.rx_chans})
        members.update(tx_flit=Out(flit_stream()), rx_flit=In(flit_stream()))
        for name in COUNTERS:
            members[name] = Out(32)
        members.update(rx_errors=Out(rx_errors_signature()), link_error=Out(1),
                       link_error_cause=Out(len(LinkErrorCause)),
                       withhold_acks=In(1), withhold_credits=In(1))
        members.update(rx_waiting=Out(1), rx_good=Out(1), tx_occupancy=Out(range(retry_depth + 1)),
                       tx_credits=Out(wiring.Signature({cls: Out(range(credits[cls] + 1))
                                                        for cls in CREDIT_CLASSES})))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        D = self.retry_depth
        m.submodules.packer = pk = FlitPacker(self.upstream, depth=self.tx_depth, data_depth=self.tx_depth,
                                              wait=self.pack_wait, credit_batch=self.credit_batch)
        # ``early``: the unpacker works out the first half of its pre-decode from the flit the pre-check
        # stage below takes, into registers loaded with that stage (hdl/link/rx.py, "Early pre-decode").
        # ``stall=False``: the peer's credits, not a room check, keep the lanes from overflowing (module
        # docstring, "Receiver"); an overflow is the peer's error (``RX_OVERFLOW``).
        m.submodules.unpacker = up = FlitUnpacker(not self.upstream, depth=self.rx_depth, early=True, stall=False)

        # ============================================================ RX: pre-check of every flit
        # A pipeline stage in front of the receiver: the flit is registered together with its CRC
        # verdict and its RETRY-kind matches (latency 1).  ``rxf`` below is that stage, a stream of the
        # same shape as ``rx_flit``; ``rx_flit`` is taken whenever the stage is empty or hands its flit
        # on in this cycle (``rxf.ready``), so a flit per cycle still passes.  Without the stage the
        # CRC's XOR tree and the 512-bit pattern compares sat in front of the whole retry logic, from
        # the wire to the clock enable of its counters (the port's critical path, docs/synth.md).  The
        # verdict and the matches are the unpacker's first-half registers, loaded with this stage from
        # the same flit (``early_crc_bad``, ``early_ctl_hits``): one CRC tree and one set of compares
        # serve both.
        rxf = flit_stream().create()
        m.d.comb += [self.rx_flit.ready.eq(~rxf.valid | rxf.ready),
                     up.early_payload.eq(self.rx_flit.payload), up.early_load.eq(self.rx_flit.ready)]
        with m.If(self.rx_flit.ready):
            m.d.sync += [rxf.valid.eq(self.rx_flit.valid), rxf.payload.eq(self.rx_flit.payload)]
        crc_ok = ~up.early_crc_bad
        hit = {kind: up.early_ctl_hits[CONTROL_KIND_NAMES.index(kind)] for kind in RETRY_KINDS}
        p = rxf.payload[:PAYLOAD_BITS]

        # ============================================================ LLR bookkeeping
        # Sequence numbers, acks, the receiver's WAIT and the sender's replay: hdl/link/retry.py.  This
        # port keeps the wide parts (pre-check stage, retry buffer, output register, RETRY encodings).
        m.submodules.retry = llr = LinkRetry(depth=D, reserve=self.reserve, ack_timer=self.ack_timer,
                                             retry_timeout=self.retry_timeout, retry_limit=self.retry_limit,
                                             ack_timeout=self.ack_timeout, ack_add_bits=len(pk.ack_add))
        stopped = self.link_error               # sticky: after a link error nothing goes in or out
        cause = {c: Signal(name=f"cause_{c.name.lower()}") for c in LinkErrorCause}   # this cycle
        llcrd_idx = CONTROL_KIND_NAMES.index("LLCRD")
        # An LLCRD that returns no credits (an ack-only LLCRD): received, it does not arm the ack timer;
        # sent, it does not need an ack in time (hdl/link/retry.py).  The packer says which of its
        # flits are such LLCRDs (``flit_lazy``, from its plan).
        m.d.comb += [
            llr.rx_valid.eq(rxf.valid), llr.rx_crc_ok.eq(crc_ok),
            llr.rx_is_req.eq(hit["RETRY.Req"]), llr.rx_is_ack.eq(hit["RETRY.Ack"]),
            llr.rx_is_other.eq(hit["RETRY.Idle"] | hit["RETRY.Frame"]),
            llr.rx_req_eseq.eq(_field(p, "RETRY.Req", "eseq")),
            llr.rx_req_nretry.eq(_field(p, "RETRY.Req", "num_retry")),
            llr.rx_ack_eseq.eq(_field(p, "RETRY.Ack", "eseq")),
            rxf.ready.eq(llr.rx_ready),
            up.flit.valid.eq(llr.up_valid), up.flit.payload.eq(rxf.payload), llr.up_ready.eq(up.flit.ready),
            # A rule error (or a CRC error, which the pre-check keeps from the unpacker) drops the one flit
            # the unpacker may already hold behind the bad one: see rx.py "Discard" for the timing.  The
            # dropped flit retires with ``discarded`` (neither good nor bad), so it is never counted.
            llr.up_done.eq(up.done), llr.up_good.eq(up.good), llr.up_bad.eq(up.rule_error | up.crc_error),
            up.discard.eq(llr.up_bad),
            llr.up_acks.eq(up.acks_if_good),
            llr.up_lazy.eq(up.ctl_valid & (up.ctl.kind == llcrd_idx)
                           & (up.credits.as_value() == 0) & (up.mem_credits.as_value() == 0)),
            pk.ack_add.eq(llr.ack_add),
            llr.pk_valid.eq(pk.flit.valid), pk.flit.ready.eq(llr.pk_ready), pk.pause.eq(0),
            llr.pk_lazy.eq(pk.flit_lazy),
            llr.tx_ready.eq(self.tx_flit.ready),
            llr.stopped.eq(stopped), llr.withhold_acks.eq(self.withhold_acks),
            cause[LinkErrorCause.RETRY_LIMIT].eq(llr.cause_retry_limit),
            cause[LinkErrorCause.ACK_TIMEOUT].eq(llr.cause_ack_timeout),
            cause[LinkErrorCause.ACK_OVERFLOW].eq(llr.cause_ack_overflow),
        ]
        good_c = up.good

        # Received messages out; each one taken returns one credit to the peer.
        for cls, ch in zip(CREDIT_CLASSES, self.rx_chans):
            src, dst = getattr(up, cls), getattr(self, ch.name.lower())
            m.d.comb += [dst.valid.eq(src.valid), dst.payload.eq(src.payload), src.ready.eq(dst.ready),
                         getattr(pk, f"crd_{cls}").eq(dst.valid & dst.ready & ~self.withhold_credits)]

        # New messages enter the packer only while the retry buffer has more than ``reserve`` free
        # entries: the packer can then always drain its queues and owed chunks and send an LLCRD
        # with its pending acks, so two nearly full ends still acknowledge each other (no deadlock).
        # ``room`` is that comparison registered (hdl/link/retry.py), so the path from the occupancy
        # register into the packer's queue enables starts at a flop (it was the LinkPort's critical
        # path: occupancy -> compare -> credit gate -> the packer's data-queue clock enables).
        intake = Signal()
        m.d.comb += intake.eq(llr.room & ~stopped)

        # TX credits: spent by messages entering the packer, returned by the peer's credit fields.  A
        # return above what is in flight (impossible from a correct peer) is cut to it and reported.
        starved, returned, over = [], [], []
        for cls, ch in zip(CREDIT_CLASSES, self.tx_chans):
            pool = self.credits[cls]
            cc = m.submodules[f"credits_{cls}"] = CreditCounter(pool)
            src, dst = getattr(self, ch.name.lower()), getattr(pk, cls)
            ok = (cc.available != 0) & intake
            ret = Signal(range(pool + 65), name=f"ret_{cls}")
            m.d.comb += ret.eq(Mux(good_c, getattr(up.credits, cls), 0))
            m.d.comb += [dst.valid.eq(src.valid & ok), dst.payload.eq(src.payload),
                         src.ready.eq(dst.ready & ok), cc.take.eq(src.valid & src.ready),
                         cc.ret.eq(Mux(ret > cc.in_flight, cc.in_flight, ret)),
                         getattr(self.tx_credits, cls).eq(cc.available),
                         Assert(cc.available <= pool, f"{cls} credits above the pool")]
            starved.append(src.valid & (cc.available == 0))
            returned.append(ret != 0)
            over.append(ret > cc.in_flight)
        # The receiver's overflow comes from its lanes' levels through its move stage's logic: it is
        # registered here, so the link error follows it a cycle later (from the lanes' levels into
        # ``link_error`` it was the link end's longest path with one placement, docs/link_layer.md,
        # "RTL pipelining (Fmax)").  The flits behind the one that overflowed are in the unpacker
        # already and complete either way.
        rx_overflow = Signal()
        m.d.sync += rx_overflow.eq(up.overflow)
        credit_wait = Signal(range(self.credit_timeout + 1))
        starving = Signal()
        m.d.comb += starving.eq(Cat(*starved).any() & ~Cat(*returned).any())
        m.d.sync += credit_wait.eq(Mux(starving, Mux(credit_wait == self.credit_timeout, credit_wait,
                                                     credit_wait + 1), 0))
        m.d.comb += [cause[LinkErrorCause.CREDIT_TIMEOUT].eq(credit_wait == self.credit_timeout),
                     cause[LinkErrorCause.CREDIT_OVERFLOW].eq(Cat(*over).any()),
                     cause[LinkErrorCause.RX_OVERFLOW].eq(rx_overflow)]

        # ============================================================ TX: retry buffer and output
        # Every new flit is written at its sequence number; a replay reads them back in order (a
        # registered read: ``rd_addr`` is one ahead while a replay advances).
        m.submodules.rbuf = mem = Memory(shape=FLIT_BITS, depth=D, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=(wr,))
        m.d.comb += [rd.addr.eq(llr.rd_addr), rd.en.eq(1),
                     wr.addr.eq(llr.wr_seq), wr.data.eq(pk.flit.payload), wr.en.eq(llr.send_new)]

        # Control flits built here: RETRY.Ack and RETRY.Req, CRC computed on the spot.
        ack_p, req_p = Signal(PAYLOAD_BITS), Signal(PAYLOAD_BITS)
        m.d.comb += [ack_p.eq(encode_control(control("RETRY.Ack"))),
                     req_p.eq(encode_control(control("RETRY.Req")))]
        _place(m, ack_p, "RETRY.Ack", {"empty": llr.ack_empty, "num_retry": llr.ack_nretry,
                                       "wrptr": llr.wr_seq, "eseq": llr.ack_eseq,
                                       "num_free_buf": llr.num_free_buf})
        _place(m, req_p, "RETRY.Req", {"eseq": llr.req_eseq, "num_retry": llr.req_nretry})
        ctl_p = Signal(PAYLOAD_BITS)
        m.d.comb += ctl_p.eq(Mux(llr.pick_ack, ack_p, req_p))
        m.submodules.ctl_crc = ccrc = FlitCRC()
        m.d.comb += ccrc.payload.eq(ctl_p)

        # The data select reads the retry rules' choice (``pick_*``), the enable ``out_load`` (their
        # ``load``, from ``out_valid`` and the wire's ``tx_ready`` alone; hdl/link/retry.py).
        out_payload = Signal(FLIT_BITS)
        with m.If(llr.out_load):
            m.d.sync += out_payload.eq(Mux(llr.pick_ctl, Cat(ctl_p, ccrc.crc),
                                           Mux(llr.pick_rep, rd.data, pk.flit.payload)))

        cause_now = Signal(len(LinkErrorCause))
        m.d.comb += cause_now.eq(Cat(*(cause[c] for c in LinkErrorCause)))
        # Loaded in every cycle until the first cause (both are 0 until then), so the enable is the
        # sticky ``stopped`` alone: with ``cause_now != 0`` in the enable, the OR of every cause (the
        # receiver's overflow from its lanes' levels among them) drove the enable of all the cause
        # bits, the link end's longest path with one placement (docs/link_layer.md, "RTL pipelining
        # (Fmax)").
        with m.If(~stopped):
            m.d.sync += [self.link_error.eq(cause_now != 0), self.link_error_cause.eq(cause_now)]

        # ============================================================ counters and status
        with m.If(self.tx_flit.valid & self.tx_flit.ready):
            m.d.sync += self.flits_sent.eq(self.flits_sent + 1)
        with m.If(llr.send_req):
            m.d.sync += self.retries.eq(self.retries + 1)
        with m.If(llr.send_rep):
            m.d.sync += self.flits_replayed.eq(self.flits_replayed + 1)
        with m.If(llr.crc_bad):
            m.d.sync += self.crc_errors.eq(self.crc_errors + 1)
        with m.If(llr.up_bad):
            m.d.sync += self.rule_errors.eq(self.rule_errors + 1)
        # Internal state by name, for testbenches and waveform-free debugging (filled as the block elaborates).
        self.debug = llr.debug
        # bad input per kind (CRC errors never reach the unpacker: the pre-check counts them)
        bumps = {"crc": llr.crc_bad, "retry_ignored": llr.retry_ignored, "retry_unused": llr.retry_unused}
        for e in RxError:
            if e not in (RxError.NONE, RxError.CRC):
                bumps[e.name.lower()] = llr.up_bad & (up.error == e)
        for k in RX_ERROR_KINDS:
            ctr = getattr(self.rx_errors, k)
            with m.If(bumps[k]):
                m.d.sync += ctr.eq(ctr + 1)
        m.d.comb += [self.tx_flit.valid.eq(llr.out_valid & ~stopped), self.tx_flit.payload.eq(out_payload),
                     self.rx_waiting.eq(llr.waiting), self.rx_good.eq(good_c), self.tx_occupancy.eq(llr.occ)]
        return m
