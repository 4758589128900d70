"""Host<->device channels of the golden model: latency, per-channel credits, and the ordering rule.

Each device has one :class:`Link`.  A direction keeps its in-flight messages in send order; any ready
message may be delivered (the model does not promise in-order channels), except that a snoop (H2D Req)
never passes an earlier H2D Rsp (GO, GO_WritePull, ...) to the same line.
Ref: docs/sources.md §1.1 ("a GO sent in one cycle cannot be passed by a snoop sent in a later cycle").

Credits are counted at the sender per channel; the receiver returns one when it consumes a message.
In timed mode the return takes the link latency; in untimed (exploration) mode it is immediate.
Invariant: available + in flight + returns in flight == initial, per channel (``check_credits``).
"""

from heapq import heappop, heappush
from collections import deque

from cxl.messages import Channel, CODECS

__all__ = ["Msg", "Link", "WakeTimes", "encode", "decode"]

# The enum members hot code uses, as module constants (``_<enum>_<member>``): in the compiled build a
# module constant is one cached lookup, where an enum's attribute goes through its metaclass.
_Ch_D2H_DATA, _Ch_D2H_REQ, _Ch_D2H_RSP = Channel.D2H_DATA, Channel.D2H_REQ, Channel.D2H_RSP
_Ch_H2D_DATA, _Ch_H2D_REQ, _Ch_H2D_RSP = Channel.H2D_DATA, Channel.H2D_REQ, Channel.H2D_RSP
CHANNELS = tuple(Channel)
INF = float("inf")      # iterating the enum class itself is slow in the hot loop
_ALL_CHANNELS = (1 << len(CHANNELS)) - 1
# a mask of channel bits -> the channel numbers it holds, lowest first (Link.check_changed)
_CHANNELS_IN = [tuple(c for c in range(len(CHANNELS)) if (m >> c) & 1) for m in range(_ALL_CHANNELS + 1)]


class Msg:
    """One model message.  ``chan`` its channel; ``op`` the opcode enum member (None for data headers);
    ``uid`` the CQID or UQID the header carries; ``line`` the line address (carried on the wire by
    requests and snoops; for responses and data it is the model's own note of the line, used for the
    ordering rule and checking); ``rsp_data`` the H2D Rsp RspData field; ``data`` the line value a data
    message carries, or, on an ItoMWr/WrInv request, the value the device is going to write (ghost
    bookkeeping); ``bogus`` the D2H Data Bogus bit.

    A value: equal and hashed by its fields (:meth:`fields`; never assign one: the compiled build makes
    them read-only, :meth:`replace` makes a changed copy), printed as
    ``Msg(chan=..., op=..., ...)``.  A class rather than a ``NamedTuple``, so that the compiled build
    (models/link.pxd) makes it an extension type whose fields the handlers read as C fields."""
    __slots__ = ("chan", "op", "uid", "line", "rsp_data", "data", "bogus")

    def __init__(self, chan, op, uid, line, rsp_data=0, data=None, bogus=False):
        self.chan = chan
        self.op = op
        self.uid = uid
        self.line = line
        self.rsp_data = rsp_data
        self.data = data
        self.bogus = bogus

    def fields(self):
        return (self.chan, self.op, self.uid, self.line, self.rsp_data, self.data, self.bogus)

    def replace(self, **changes):
        """A copy with the fields named in ``changes`` replaced (a ``TypeError`` names a field it lacks)."""
        f = dict(zip(self.__slots__, self.fields()))
        bad = set(changes) - set(f)
        if bad:
            raise TypeError(f"Msg has no field {', '.join(sorted(bad))}")
        f.update(changes)
        return Msg(**f)

    def __eq__(self, other):
        if not isinstance(other, Msg):
            return NotImplemented
        return self.fields() == other.fields()

    def __ne__(self, other):
        if not isinstance(other, Msg):
            return NotImplemented
        return self.fields() != other.fields()

    def __hash__(self):
        return hash(self.fields())

    def __repr__(self):
        return (f"Msg(chan={self.chan!r}, op={self.op!r}, uid={self.uid!r}, line={self.line!r}, "
                f"rsp_data={self.rsp_data!r}, data={self.data!r}, bogus={self.bogus!r})")


def encode(msg):
    """The header's wire encoding (the integer of its cxl.messages layout)."""
    c = msg.chan
    if c is _Ch_D2H_REQ:
        f = dict(opcode=msg.op, cqid=msg.uid, nt=0, addr=msg.line)
    elif c is _Ch_D2H_RSP:
        f = dict(opcode=msg.op, uqid=msg.uid)
    elif c is _Ch_D2H_DATA:
        f = dict(uqid=msg.uid, chunk_valid=0, bogus=int(msg.bogus), poison=0)
    elif c is _Ch_H2D_REQ:
        f = dict(opcode=msg.op, addr=msg.line, uqid=msg.uid)
    elif c is _Ch_H2D_RSP:
        f = dict(opcode=msg.op, rsp_data=msg.rsp_data, rsp_pre=0, cqid=msg.uid)
    else:
        f = dict(cqid=msg.uid, chunk_valid=0, poison=0, go_err=0)
    return CODECS[c].encode(f)


def decode(chan, value, line=0, data=None):
    """Inverse of :func:`encode`; ``line``/``data`` supply what the header does not carry."""
    f = CODECS[chan].decode(value)
    if chan is _Ch_D2H_REQ:
        return Msg(chan, f["opcode"], f["cqid"], f["addr"])
    if chan is _Ch_D2H_RSP:
        return Msg(chan, f["opcode"], f["uqid"], line)
    if chan is _Ch_D2H_DATA:
        return Msg(chan, None, f["uqid"], line, data=data, bogus=bool(f["bogus"]))
    if chan is _Ch_H2D_REQ:
        return Msg(chan, f["opcode"], f["uqid"], f["addr"])
    if chan is _Ch_H2D_RSP:
        return Msg(chan, f["opcode"], f["cqid"], line, rsp_data=f["rsp_data"])
    return Msg(chan, None, f["cqid"], line, data=data)


def msg_order(m):
    """A total order on messages, for canonical state keys."""
    return (m.chan, -1 if m.op is None else m.op.value, m.uid, m.line, m.rsp_data,
            -1 if m.data is None else m.data, m.bogus)


class WakeTimes:
    """The cycles at which something in the timed model is due, which its cycle loop visits
    (``models.system.drive``): a heap of times that the links' and coalescers' timers push to, each
    time kept once however many timers name it (more than half of the pushes name a time already
    pending).  ``heap[0]`` is the earliest; :meth:`pop` takes it."""
    __slots__ = ("heap", "pending")

    def __init__(self):
        self.heap = []
        self.pending = set()

    def push(self, t):
        if t not in self.pending:
            self.pending.add(t)
            heappush(self.heap, t)

    def pop(self):
        t = heappop(self.heap)
        self.pending.discard(t)
        return t


class Link:
    def __init__(self, cfg, timed):
        self.latency = cfg.link_latency
        self.initial = cfg.credits
        self.timed = timed
        self.flight = {True: [], False: []}        # upstream?: [[ready_at, msg, extra], ...] in send
                                                    # order; ready_at None: still waiting for a credit
        # Per-channel lists indexed by the Channel value.
        self.credits = [cfg.credits] * len(CHANNELS)
        self.returns = []                           # (ready_at, chan) (timed mode only), oldest first
        self.in_flight = [0] * len(CHANNELS)        # counted as they go; check_credits(full) recounts
        self.returning = [0] * len(CHANNELS)
        self.waiting = [deque() for _ in CHANNELS]  # entries of ``flight`` still waiting for a credit
        self.wake = None                            # timed mode: the WakeTimes the simulator visits
        self.next_due = INF                         # timed mode: nothing to do here before this cycle
        self.changed = _ALL_CHANNELS                # bit c: a counter of channel c moved since the last
                                                    # check_changed() (all of them: nothing checked yet)

    # -- sending ----------------------------------------------------------------------------------
    def send(self, msg, now, extra=0):
        """Queue ``msg``.  It joins the ordered in-flight list at once (so ordering against later
        messages holds even while it waits), but moves only once it has a credit."""
        c = msg.chan
        credits = self.credits
        if credits[c] > 0 and not self.waiting[c]:     # self._launch(entry, now), inline
            credits[c] -= 1
            self.in_flight[c] += 1
            self.changed |= 1 << c
            t = now + self.latency + extra
            self.flight[c <= _Ch_D2H_DATA].append([t, msg, extra])
            if self.wake is not None:
                self.wake.push(t)
                if t < self.next_due:
                    self.next_due = t
        else:
            entry = [None, msg, extra]
            self.flight[c <= _Ch_D2H_DATA].append(entry)
            self.waiting[c].append(entry)

    def _launch(self, entry, now):
        c = entry[1].chan
        self.credits[c] -= 1
        self.in_flight[c] += 1
        self.changed |= 1 << c
        entry[0] = t = now + self.latency + entry[2]
        if self.wake is not None:
            self.wake.push(t)
            if t < self.next_due:
                self.next_due = t

    def _credit_back(self, chan, now):
        self.credits[chan] += 1
        self.changed |= 1 << chan
        if self.timed:
            self.returning[chan] -= 1
        q = self.waiting[chan]
        while q and self.credits[chan] > 0:
            self._launch(q.popleft(), now)

    def consumed(self, chan, now):
        """The receiver took a message off ``chan``: its credit goes back to the sender."""
        self.in_flight[chan] -= 1
        self.changed |= 1 << chan
        if self.timed:
            t = now + self.latency
            self.returns.append((t, chan))     # the latency is fixed, so this stays sorted by time
            self.returning[chan] += 1
            if self.wake is not None:
                self.wake.push(t)
                if t < self.next_due:
                    self.next_due = t
        else:
            self._credit_back(chan, now)

    def tick_credits(self, now):
        returns = self.returns
        while returns and returns[0][0] <= now:
            chan = returns[0][1]
            del returns[0]
            self._credit_back(chan, now)

    # -- delivery ---------------------------------------------------------------------------------
    @staticmethod
    def blocked(flight, i):
        """Ordering rule: a snoop may not pass an earlier H2D Rsp to the same line."""
        msg = flight[i][1]
        if msg.chan is not _Ch_H2D_REQ:
            return False
        for j in range(i):
            m = flight[j][1]
            if m.chan is _Ch_H2D_RSP and m.line == msg.line:
                return True
        return False

    def deliverable(self, upstream, now=None):
        """Indices of messages that may be delivered now (``now=None``: ignore time)."""
        flight = self.flight[upstream]
        return [i for i, (t, _, _) in enumerate(flight)
                if t is not None and (now is None or t <= now) and not self.blocked(flight, i)]

    def next_time(self):
        m = self.returns[0][0] if self.returns else INF
        for f in self.flight.values():
            for e in f:
                t = e[0]
                if t is not None and t < m:
                    m = t
        return None if m == INF else m

    def busy(self):
        return bool(self.flight[True] or self.flight[False] or self.returns or any(self.waiting))

    # -- invariants and state ---------------------------------------------------------------------
    def check_changed(self):
        """:meth:`check_credits` if a counter of some channel moved since the last call, looking only at
        those channels (counters move only in ``send``, ``_launch``, ``_credit_back`` and ``consumed``,
        which set the channel's bit in ``changed``; a channel whose counters did not move still holds
        the totals that passed last time).  A failure raises what ``check_credits`` raises."""
        moved = self.changed
        if moved:
            self.changed = 0
            initial, credits, in_flight, returning = self.initial, self.credits, self.in_flight, self.returning
            for c in _CHANNELS_IN[moved]:
                a, f, r = credits[c], in_flight[c], returning[c]
                if a + f + r != initial or a < 0:
                    self.check_credits()     # raises, naming the (lowest) channel that is off

    def check_credits(self, full=False):
        """available + in flight + returning == initial, per channel.  ``full`` also recounts the
        in-flight and returning lists against the running counters."""
        for c in CHANNELS:
            total = self.credits[c] + self.in_flight[c] + self.returning[c]
            if total != self.initial or self.credits[c] < 0:
                raise AssertionError(f"credit conservation broken on {c.name}: available {self.credits[c]} "
                                     f"+ in flight {self.in_flight[c]} + returning {self.returning[c]} "
                                     f"= {total} != {self.initial}")
            if full:
                n = sum(1 for t, m, _ in self.flight[c <= _Ch_D2H_DATA] if m.chan is c and t is not None)
                r = sum(1 for _, rc in self.returns if rc is c)
                if (n, r) != (self.in_flight[c], self.returning[c]):
                    raise AssertionError(f"{c.name}: {n} in flight and {r} returning, but the counters "
                                         f"say {self.in_flight[c]} and {self.returning[c]}")

    def key(self):
        """Canonical: order matters only between an H2D Rsp and a later snoop to the same line, so
        the key keeps that order per line and sorts everything else."""
        down_order = {}
        rest = []
        for t, m, _ in self.flight[False]:
            if m.chan is _Ch_H2D_DATA:
                rest.append((m, t is None))
            else:
                down_order.setdefault(m.line, []).append((m, t is None))
        order = lambda mw: (msg_order(mw[0]), mw[1])
        return (tuple(sorted(((m, t is None) for t, m, _ in self.flight[True]), key=order)),
                tuple(sorted(rest, key=order)),
                tuple(sorted((l, tuple(v)) for l, v in down_order.items())),
                tuple(self.credits), tuple(tuple(e[1] for e in q) for q in self.waiting))
