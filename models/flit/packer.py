"""TX side of the golden 68B-flit model: per-channel FIFOs in, flits out (:class:`Packer`, :func:`pack`).

Data: a data header (D2H/H2D DataHdr) announces one 64 B line, sent as four 16-byte chunks (chunk ``k`` =
line bytes ``16k .. 16k+15``) in G0 slots after the header, in header order.  With ``P`` chunks still owed
at the start of a flit: ``P >= 4`` makes it an all-data flit (four chunks and no header: no Type bit,
slot formats, credits or Ak); otherwise it is a header flit whose slots 1..P must be G0.  A chunk never
goes in slot 0 of a header flit.  Sz = 1 exactly when the flit carries a data header (64 B lines);
byte-enable slots (BE = 1) and 32 B transfers are not supported (CXL.cache data is a full line, facts
§1.1).  A control flit may not come while chunks are owed (they must roll over into the next flit).

Packing policy (:class:`Packer`), one flit at a time:

1. ``P >= 4`` chunks owed: all-data flit.
2. Otherwise, if any message or chunk is queued, a protocol flit: of every legal protocol flit (slot 0 any
   H-format, slots 1-3 G0 where a rule forces it -- a rollover chunk in slots 1..P, or the next slot for
   data after this flit's Data Header, CXL 1.1 / 3.x §4.2.5 -- else any G-format, or G0 while a chunk is
   owed; each format's positions take the next messages of their channels, within the per-flit maxima of
   facts §2.2), the one with the best *score*: the value of the messages it takes
   (``cxl.packing.MESSAGE_VALUE``, in quarter slots: a request 4, a GO 4, a Data Header 1, a D2H Rsp 1 and
   3 while no D2H Req is visible) minus 4 per slot that is not a data chunk.  A chunk costs nothing: it has
   to go in this flit or a later one anyway, so a slot goes to headers only where they are worth a slot,
   and on a tie the flit with fewer header slots wins (then the lower format codes).  Data still moves
   every flit (D2H data must make progress, facts §1.1): chunks owed roll over into the next flit, whose
   first slots (or an all-data flit) must take them.  A *priority channel* rotates REQ -> RSP -> DATA after
   every protocol flit, so a busy channel cannot starve the others: where the best flit would carry none of
   its visible messages, the best of the flits that carry one is sent instead. An empty slot is H0 / G1
   with every message invalid.
   The policy works on counts alone and is defined once, in :mod:`cxl.packing` (``plan_flit``), for
   this packer and the RTL's plan table; ``Packer.choose_slot0`` / ``Packer.choose_g`` read its plan,
   and :class:`models.flit.RandomPolicy` overrides them with a random legal choice.
3. Otherwise, if acks are waiting or a credit return is *ready* (below), an LLCRD control flit.
4. Otherwise nothing (the link would send idle flits; that is outside this model).

Waiting to fill (``wait`` = W >= 0): in rule 2 the packer may instead *hold* the protocol flit, send
nothing and let more messages join it, but only within W decisions of its last protocol flit: a link
that has just sent one is busy, and the next messages are likely to come soon; a link that has been
quiet for W decisions (or has just come out of reset) sends a lone message at once, so an idle link
pays no latency for the wait.  It holds exactly when all of these are true: fewer than W decisions
(held or not, any flit or none) have passed since its last protocol flit; no data chunk is owed
(chunks never wait); the flit is not *full* (one more message of some channel that has messages
queued, within the per-flit maxima, would make it carry more: :meth:`Packer.full`); and no link-layer
return is *due*: fewer than ``cxl.flit.ACKS_DUE`` (16) acks and, per credit class, fewer than
``cxl.flit.CREDITS_DUE`` (32) credits wait.  Otherwise it sends at once.  W = 0 never holds: the policy
above exactly.  A hold costs a message at most W decisions of latency, and none on a quiet link.

A GO and the snoop behind it (downstream only): an H2D Req joins a flit only when every H2D Rsp
queued before it has gone in an earlier flit.  CXL 3.x §3.2.5.2: a snoop sent after the GO of a request
to the same address must see that GO, and the link layer delivers the two in separate slots so that
their order is unambiguous; an H2D Rsp carries no address, so the packer keeps the order for every
H2D Req behind every earlier H2D Rsp, and keeps it by flits (a slot-level rule would let more Reqs join
a flit, at the cost of a per-slot eligibility in the RTL's plan table).  Each queued H2D Req remembers
how many H2D Rsps were pushed before it; the Reqs that may join the flit being built are the queue's
prefix whose Rsps have all been packed (:meth:`Packer.visible`).  Messages handed in together (one
cycle of the RTL) are pushed Rsps first: a GO and a snoop offered in the same cycle are taken as GO
first, the order the host means.  The wait rule's *full* test sees only that prefix (a Req that
cannot join does not keep a flit waiting, nor does it make it look full).

Credits and Ak: every protocol flit returns, per class (req, rsp, data), the largest encodable amount
(0, 1, 2, 4, ..., 64) not above what is waiting, and sets Ak when 8 or more received flits wait to be
acknowledged (Ak acknowledges 8).  An LLCRD returns the same credit amounts and acknowledges up to 255
flits.  The credits a flit carries belong to the channels of the *other* direction (the receiver returns
them).  All-data flits have no header, so they carry neither.

Batching credit returns on a quiet link (``credit_batch`` = B >= 1): a packer with nothing to send
returns credits in an LLCRD only when they are *ready*: some class has B or more waiting, or at least
B - 1 decisions have passed since its last flit with credit fields (protocol or LLCRD), so a packer
that has been quiet returns the first credit at once and then gathers what follows for up to B - 1
decisions.  Protocol flits still return whatever waits.  B = 1 is the eager rule (an LLCRD whenever a
credit waits).  Its use: the direction that has run out of messages while the other streams into it
would otherwise send an LLCRD for every flit or two it receives; the link port batches only where its
receive queues leave room for it (``hdl.link.port.LinkPort``, ``credit_batch``).

The RTL packer (hdl/link/tx.py) makes the same choices, bit for bit.

# Ref: docs/sources.md §2.1 (all-data flit and rollover, G0 never in slot 0), §2.2 (per-flit maxima),
#      §2.4 (credits); CXL 1.1 / CXL 3.x §4.2.5 (packing rules, docs/conformance.md).
"""

from collections import deque

from cxl.control import control, encode_control
from cxl.credits import CREDIT_CLASSES, CreditProtocol, Credits, credit_step, encode_credit
from cxl.flit import (ACKS_DUE, AK_FLITS, CREDITS_DUE, CHUNK_BYTES, check_credit_batch, check_pack_wait,
                      ORDERED_BEHIND, CHUNKS_PER_LINE, HEADER_BITS, MAX_PER_FLIT, S2M_NDR, SLOT_BITS, SLOTS,
                      Direction, encode_header)
from cxl.packing import flit_full, g0_forced, legal, plan_flit, slot_formats
from cxl.messages import CODECS, LINE_BYTES

from .crc import seal

__all__ = ["Packer", "pack"]


class Packer:
    """TX side of one direction: per-channel FIFOs in, flits out (policy in the module docstring).

    ``push`` queues a message, ``return_credits``/``acknowledge`` queue link-layer returns, and
    ``next_flit`` builds the next 66-byte flit (None when there is nothing to send).
    """

    def __init__(self, direction, wait=0, credit_batch=1):
        check_pack_wait(wait)
        self.credit_batch = check_credit_batch(credit_batch)
        self.crd_quiet = credit_batch - 1    # decisions since the last flit with credit fields, up to B - 1
        self.direction = Direction(direction)
        self.wait = wait
        self.since = wait              # decisions since the last protocol flit, up to ``wait`` (cold start)
        self.queues = {ch: deque() for ch in self.direction.channels}
        self.chunks = deque()          # 16-byte chunks owed by data headers already packed, in order
        self.credits = dict.fromkeys(CREDIT_CLASSES, 0)
        self.acks = 0
        self.priority = 0              # index into direction.channels; rotates per protocol flit
        self.hdr_slot = None           # while a protocol flit is built: its slot with Data Headers
        # GO before snoop (module docstring): per queued H2D Req, the H2D Rsps pushed before it; and
        # the H2D Rsps pushed and packed so far
        self.ordered = ORDERED_BEHIND.get(self.direction)      # (req channel, rsp channel) or None
        self.req_after = deque()
        self.rsp_pushed = 0
        self.rsp_packed = 0
        self.limit = self.visible()    # while a protocol flit is built: what may join it
        self.h_formats, self.g_formats, self.g0 = slot_formats(self.direction)    # each in code order
        self.plan = None               # while a protocol flit is built: cxl.packing's plan for it,
        self.on_plan = False           # and whether every slot so far follows it

    def push(self, msg):
        if Direction.of(msg.chan) is not self.direction:
            raise ValueError(f"{msg.chan.name} does not travel {self.direction.value}")
        self.queues[msg.chan].append(msg)
        if self.ordered is not None:
            req, rsp = self.ordered
            if msg.chan is req:
                self.req_after.append(self.rsp_pushed)
            elif msg.chan is rsp:
                self.rsp_pushed += 1

    def push_together(self, msgs):
        """Queue messages handed in together (in one cycle of the RTL): per channel in the given order,
        and the messages of a channel others may not overtake (H2D Rsp) before the others, so a GO
        and a snoop offered in the same cycle count as GO first (module docstring)."""
        first = self.ordered[1] if self.ordered is not None else None
        for msg in msgs:
            if msg.chan is first:
                self.push(msg)
        for msg in msgs:
            if msg.chan is not first:
                self.push(msg)

    def visible(self):
        """Per channel, how many of its queued messages may join the next protocol flit: all, but for an
        H2D Req only the queue's prefix whose earlier H2D Rsps have all been packed (GO before snoop)."""
        n = {ch: len(q) for ch, q in self.queues.items()}
        if self.ordered is not None:
            k = 0
            for after in self.req_after:
                if after > self.rsp_packed:
                    break
                k += 1
            n[self.ordered[0]] = k
        return n

    def return_credits(self, req=0, rsp=0, data=0):
        for name, n in (("req", req), ("rsp", rsp), ("data", data)):
            if n < 0:
                raise ValueError(f"cannot return {n} {name} credits")
            self.credits[name] += n

    def acknowledge(self, flits):
        """Note ``flits`` more correctly received flits to acknowledge."""
        if flits < 0:
            raise ValueError(f"cannot acknowledge {flits} flits")
        self.acks += flits

    @property
    def busy(self):
        """True while messages or data chunks are waiting."""
        return bool(self.chunks) or any(self.queues.values())

    def next_flit(self):
        if not self.busy or len(self.chunks) >= CHUNKS_PER_LINE or self._hold():
            self.since = min(self.since + 1, self.wait)
            if not self.busy and (self.acks or self._credits_ready()):
                self.crd_quiet = 0
                return seal(encode_control(self._llcrd()))
            self.crd_quiet = min(self.crd_quiet + 1, self.credit_batch - 1)
            if len(self.chunks) >= CHUNKS_PER_LINE:
                return seal(self._all_data())          # no header: no credit fields
            return None
        self.since = 0
        self.crd_quiet = 0
        return seal(self._protocol_flit())

    def _credits_ready(self):
        """Whether an idle packer returns its credits now (module docstring, "Batching credit returns")."""
        return any(n >= self.credit_batch or (n and self.crd_quiet >= self.credit_batch - 1)
                   for n in self.credits.values())

    def drain(self):
        """Every flit needed to send all that is queued and every credit and ack waiting (holds, and
        credits gathered with ``credit_batch`` > 1, end by themselves)."""
        flits = []
        while (flit := self.next_flit()) is not None or self.busy or self.acks or any(self.credits.values()):
            if flit is not None:
                flits.append(flit)
        return flits

    # -- waiting to fill a flit
    def _hold(self):
        """Whether to hold the protocol flit this decision (module docstring, "Waiting to fill")."""
        if self.since >= self.wait or self.chunks:
            return False
        if self.acks >= ACKS_DUE or any(n >= CREDITS_DUE for n in self.credits.values()):
            return False
        return not self.full()

    def full(self):
        """True when one more message of no channel that has messages queued (and is below its
        per-flit maximum) would join the protocol flit the packer would send now
        (``cxl.packing.flit_full``).  Idle channels do not count: a channel that streams at its
        per-flit maximum (2 snoops a flit) must not wait for traffic that is not there.  With four or
        more chunks owed the next flit is all data, which is full."""
        if len(self.chunks) >= CHUNKS_PER_LINE:
            return True
        return flit_full(self.direction, self._avail(), self.priority, len(self.chunks))

    def _avail(self):
        n = self.visible()
        return tuple(n[ch] for ch in self.direction.channels)

    # -- flit builders
    def _all_data(self):
        payload = 0
        for s in range(SLOTS):
            payload |= int.from_bytes(self.chunks.popleft(), "little") << (SLOT_BITS * s)
        return payload

    def _take_credits(self, protocol=CreditProtocol.CACHE):
        codes = {}
        for name in CREDIT_CLASSES:
            n = credit_step(self.credits[name])
            self.credits[name] -= n
            codes[name] = encode_credit(n, protocol)
        return codes

    def _llcrd(self):
        acks = min(self.acks, 255)
        self.acks -= acks
        codes = self._take_credits()
        return control("LLCRD", acks=acks, req_crd=codes["req"], rsp_crd=codes["rsp"],
                       data_crd=codes["data"])

    def _fill(self, fmt, counts):
        """What ``fmt`` would carry now: per position the next queued message of its channel (None if
        that channel is empty or at its per-flit maximum), and how many it takes per channel.  Positions
        are filled in order, so a slot is tightly packed; Data Headers go in only while no earlier slot
        of the flit has one (one slot of a flit carries Data Headers: CXL 1.1 / 3.x §4.2.5)."""
        taken = dict.fromkeys(self.direction.channels, 0)
        placed = []
        data_chan = self.direction.data_channel
        for item, _, _ in fmt.fields:
            if item == S2M_NDR or (item is data_chan and self.hdr_slot is not None):
                placed.append(None)
                continue
            k = taken[item]
            if k < self.limit[item] - counts[item] and counts[item] + k < MAX_PER_FLIT[item]:
                placed.append(self.queues[item][k])
                taken[item] = k + 1
            else:
                placed.append(None)
        return placed, taken

    def legal(self, formats, counts):
        """The formats that may be chosen now: an MDH format only if it would carry 2 or more Data
        Headers (CXL 1.1 / 3.x §4.2.5).  Never empty: H0 and G1 are not MDH formats."""
        data_chan = self.direction.data_channel
        return [f for f in formats if legal(f, self._fill(f, counts)[1][data_chan])]

    # -- the policy: two hooks, so that a test can swap in another legal policy and check the unpacker
    # (override both: the defaults read the plan ``cxl.packing.plan_flit`` made for the whole flit)
    def choose_slot0(self, counts, priority):
        """The H-format for slot 0 (``priority``: the channel whose priority counted, or None)."""
        return self.plan.slots[0].fmt

    def choose_g(self, slot, rollover, counts):
        """The format for G-slot ``slot``; ``rollover`` means a rule forces G0 (a rollover chunk, or the
        first chunk of this flit's Data Header)."""
        fmt = self.plan.slots[slot].fmt
        assert fmt.data or not rollover, f"plan has {fmt.name} in slot {slot}, where a rule forces G0"
        return fmt

    def _commit(self, fmt, placed, taken, counts, slot):
        """Pop what ``fmt`` carries, queue the chunks of its data headers; return the slot bits."""
        if taken[self.direction.data_channel]:
            self.hdr_slot = slot
        bits = 0
        for (item, offset, _), msg in zip(fmt.fields, placed):
            if msg is None:
                continue
            bits |= CODECS[item].encode(msg.fields) << offset
            if msg.data is not None:
                self.chunks.extend(msg.data[i:i + CHUNK_BYTES] for i in range(0, LINE_BYTES, CHUNK_BYTES))
        for ch, n in taken.items():
            for _ in range(n):
                self.queues[ch].popleft()
            counts[ch] += n
        if self.ordered is not None:
            req, rsp = self.ordered
            for _ in range(taken[req]):
                self.req_after.popleft()
            self.rsp_packed += taken[rsp]
        return bits

    def _place(self, fmt, counts, slot):
        """Commit the messages ``fmt`` takes in ``slot``; while the flit follows its plan, they are the
        plan's counts (the greedy fill by counts and the fill of the queues agree)."""
        placed, taken = self._fill(fmt, counts)
        if self.on_plan:
            want = self.plan.slots[slot].taken
            assert tuple(taken[ch] for ch in self.direction.channels) == want, \
                f"slot {slot} ({fmt.name}) takes {taken}, the plan {want}"
        return self._commit(fmt, placed, taken, counts, slot)

    def _protocol_flit(self):
        counts = dict.fromkeys(self.direction.channels, 0)
        self.plan = plan_flit(self.direction, self._avail(), self.priority, len(self.chunks))
        priority = self.plan.priority
        self.priority = (self.priority + 1) % len(self.direction.channels)
        rollover = len(self.chunks)               # owed at the start: slots 1..rollover must be G0
        self.hdr_slot = None                      # the slot of this flit that carries Data Headers
        self.limit = self.visible()               # what may join this flit (GO before snoop), fixed for it
        header = {"type": 0}
        fmt = self.choose_slot0(counts, priority)
        self.on_plan = fmt is self.plan.slots[0].fmt     # every slot so far as planned
        header["slot0"] = fmt.code
        assert fmt in self.legal([fmt], counts), f"policy chose {fmt.name} for too few Data Headers"
        payload = self._place(fmt, counts, 0) << HEADER_BITS
        for s in range(1, SLOTS):
            # Forced G0: a rollover chunk, or the next slot for data after this flit's Data Header.
            forced = g0_forced(s, rollover, self.hdr_slot)
            fmt = self.choose_g(s, forced, counts)
            header[f"slot{s}"] = fmt.code
            self.on_plan = self.on_plan and fmt is self.plan.slots[s].fmt
            if fmt.data:
                assert self.chunks, "policy chose G0 with no data chunk owed"
                payload |= int.from_bytes(self.chunks.popleft(), "little") << (SLOT_BITS * s)
            else:
                assert not forced, "policy broke the rollover or next-data-slot rule"
                assert fmt in self.legal([fmt], counts), f"policy chose {fmt.name} for too few Data Headers"
                payload |= self._place(fmt, counts, s) << (SLOT_BITS * s)
        header["sz"] = int(counts[self.direction.data_channel] > 0)   # data headers are 64 B lines
        if self.acks >= AK_FLITS:                                   # Ak acknowledges 8 flits
            header["ak"] = 1
            self.acks -= AK_FLITS
        codes = self._take_credits()
        header.update(req_crd=codes["req"], rsp_crd=codes["rsp"], data_crd=codes["data"])
        return payload | encode_header(header)


def pack(direction, messages, credits=Credits(), acks=0, wait=0):
    """Pack ``messages`` (FlitMsg, queued in list order: per channel, and between an H2D Rsp and an H2D
    Req, which the Req may not overtake) plus credit returns and acks."""
    packer = Packer(direction, wait)
    for msg in messages:
        packer.push(msg)
    packer.return_credits(*credits)
    packer.acknowledge(acks)
    return packer.drain()
