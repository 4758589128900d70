"""The packers' slot policy for a protocol flit, by counts: which format goes in each slot and how many
messages of each channel it takes.  One definition for the golden packer (``models.flit.Packer``, which
places the messages by it) and the RTL packer (``hdl.link.tx.FlitPacker``, which enumerates it at
elaboration into its plan table); a policy of this project, not of the specification (the rules it keeps
are CXL 1.1 / CXL 3.x §4.2.5's; docs/link_layer.md, "Packing policy" and "Choosing slot formats").

The choice depends only on a few numbers, never on message contents: per channel ``avail``, the messages
that may join the flit (queued, and for an H2D Req not behind an unsent H2D Rsp: ``cxl.flit.ORDERED_BEHIND``),
counted up to the per-flit maximum (``cxl.flit.MAX_PER_FLIT``); the rotating priority channel's index; and
the data chunks owed at the start of the flit (0..3; 4 or more make an all-data flit instead).  Messages are
placed greedily: a format's positions of a channel take the next queued messages of that channel, so a
format placed after ``base`` messages of ``ch`` were taken takes ``min(positions, avail - base)`` of them.

Policy: the *whole* protocol flit with the best score, among every legal one.

* Candidates: slot 0 any H-format; slots 1-3 G0 where a rule forces it (a rollover chunk in slots
  1..owed; the next slot for data after the flit's Data Header slot), otherwise any G-format, or G0
  while a chunk is owed.  Data Headers go in one slot of a flit only, and an MDH format only when it
  carries two or more (CXL 1.1 / 3.x §4.2.5); every plan is checked against these rules when it is
  first made.
* Score, in quarter slots: the value of the messages the flit takes (:data:`MESSAGE_VALUE`) minus
  :data:`SLOT_COST` for every slot that is not a data chunk.  A chunk costs nothing: it has to go in a
  G0 slot of this flit or of a later one (or a quarter of an all-data flit) anyway, so a slot is worth
  spending on headers only where they are worth a slot.  The highest score wins; on a tie the flit
  with fewer header slots, then the one with the lower format codes (slot 0's first, G0 = 0).
* The rotating priority channel (REQ -> RSP -> DATA after every protocol flit) counts only where the
  best flit would carry none of its visible messages: then the best flit among those that carry one
  wins, so a channel with a message visible gets into one of every three protocol flits.

``flit_full`` is the packers' *full* test for waiting to fill a flit: one more message of no channel that
has messages (and is below its per-flit maximum) would make the planned flit carry more.
"""

from functools import lru_cache
from typing import NamedTuple

from cxl.flit import CHUNKS_PER_LINE, MAX_PER_FLIT, SLOT_FORMATS, SLOTS, Direction
from cxl.messages import Channel

__all__ = ["SlotPlan", "FlitPlan", "MESSAGE_VALUE", "LONE_RSP_VALUE", "SLOT_COST", "slot_formats", "positions",
           "legal", "g0_forced", "plan_flit", "flit_full"]


# What a message is worth to the packers' choice of a flit, and what a slot that is not a data chunk costs,
# in quarter slots (a policy of this project, not of the specification; an assumption tuned on the workloads
# of models/flit/efficiency.py, docs/link_layer.md "Choosing slot formats").  A request takes a slot
# position of its own in every format that carries one, so it is worth a slot.  A Data Header shares a slot
# four at a time, and so does a D2H Rsp beside a request (G1: Req + 2 Rsp): worth a quarter.  A D2H Rsp
# while no D2H Req is visible can only go beside Data Headers or other responses, two at most to a slot:
# worth three quarters then (:data:`LONE_RSP_VALUE`), so responses do not wait behind Data Headers, which
# fit four to a slot.  An H2D Rsp (a GO) is worth a slot: a flit carries at most four, GOs are the most
# numerous downstream headers, and one left behind costs a protocol flit later (on the mixed workload with a
# quarter the GOs back up, their source stalls, and the run ends in flits of GOs alone).
MESSAGE_VALUE = {Channel.D2H_REQ: 4, Channel.D2H_RSP: 1, Channel.D2H_DATA: 1,
                 Channel.H2D_REQ: 4, Channel.H2D_RSP: 4, Channel.H2D_DATA: 1}
LONE_RSP_VALUE = 3
SLOT_COST = 4


class SlotPlan(NamedTuple):
    fmt: object          # the cxl.flit.SlotFormat chosen for the slot
    taken: tuple         # messages it takes, per channel (in ``Direction.channels`` order)
    before: tuple        # messages of each channel taken by the slots before it
    g0_before: int       # G0 slots (data chunks) before it


class FlitPlan(NamedTuple):
    slots: tuple         # SlotPlan per slot, 0..3
    totals: tuple        # messages taken per channel
    g0: int              # G0 slots: the chunks the flit sends
    owed: int            # chunks owed after the flit
    priority: object     # the channel whose priority counted in the choice, or None


@lru_cache(maxsize=None)
def slot_formats(direction):
    """(H-formats, G-formats without G0, G0) of ``direction``, the first two in code order."""
    mine = sorted((f for (d, _, _), f in SLOT_FORMATS.items() if d is direction), key=lambda f: f.code)
    return (tuple(f for f in mine if f.kind == "H"), tuple(f for f in mine if f.kind == "G" and not f.data),
            SLOT_FORMATS[direction, "G", 0])


def positions(fmt, chan):
    """Message positions of ``chan`` in slot format ``fmt``."""
    return sum(1 for item, _, _ in fmt.fields if item == chan)


def _takes(fmt, chans, avail, counts, headers_placed):
    """What ``fmt`` takes per channel after ``counts`` were taken; no Data Header once a slot has them."""
    taken = tuple(min(positions(fmt, ch), max(0, a - n)) for ch, a, n in zip(chans, avail, counts))
    return taken[:2] + (0,) if headers_placed else taken


def legal(fmt, data_headers):
    """Whether ``fmt`` may carry ``data_headers`` Data Headers: an MDH format only two or more
    (CXL 1.1 / 3.x §4.2.5)."""
    return not fmt.mdh or data_headers >= 2


def g0_forced(slot, owed, hdr_slot):
    """Whether G-slot ``slot`` (1..3) of a protocol flit must be G0: a rollover chunk (slots 1..``owed``)
    or the next slot for data after the flit's Data Header slot ``hdr_slot`` (None: no Data Header yet),
    which is max(hdr_slot + 1, owed + 1) (CXL 1.1 / 3.x §4.2.5)."""
    return slot <= owed or (hdr_slot is not None and slot == max(hdr_slot + 1, owed + 1))


def _value(direction, avail):
    """Per channel of ``direction``, what one of its messages is worth now (:data:`MESSAGE_VALUE`)."""
    value = tuple(MESSAGE_VALUE[ch] for ch in direction.channels)
    if direction is Direction.UPSTREAM and avail[0] == 0:      # no D2H Req for a D2H Rsp to ride beside
        value = (value[0], LONE_RSP_VALUE, value[2])
    return value


@lru_cache(maxsize=None)
def _legal_flits(direction, avail, owed):
    """Every legal protocol flit for ``avail`` and ``owed``, in ascending order of its format codes
    (slot 0's first; G0 = 0).  Each slot's messages are the greedy fill of its format."""
    chans = direction.channels
    h_formats, g_formats, g0 = slot_formats(direction)
    flits = []

    def extend(slots, counts, hdr_slot, g_used):
        s = len(slots)
        if s == SLOTS:
            flits.append(FlitPlan(tuple(slots), counts, g_used, owed + CHUNKS_PER_LINE * counts[2] - g_used, None))
            return
        pending = owed + CHUNKS_PER_LINE * counts[2] - g_used
        forced = g0_forced(s, owed, hdr_slot)
        if pending:
            extend(slots + [SlotPlan(g0, (0, 0, 0), counts, g_used)], counts, hdr_slot, g_used + 1)
        if forced:
            return
        for fmt in g_formats:
            taken = _takes(fmt, chans, avail, counts, hdr_slot is not None)
            if legal(fmt, taken[2]):
                extend(slots + [SlotPlan(fmt, taken, counts, g_used)], tuple(n + t for n, t in zip(counts, taken)),
                       s if taken[2] else hdr_slot, g_used)

    for fmt in h_formats:
        taken = _takes(fmt, chans, avail, (0, 0, 0), False)
        if legal(fmt, taken[2]):
            extend([SlotPlan(fmt, taken, (0, 0, 0), 0)], taken, 0 if taken[2] else None, 0)
    return tuple(flits)


def _plan_with(direction, avail, priority, owed):
    """The best-scoring legal flit (module docstring); with ``priority`` (a channel) the best of those
    that carry one of its messages."""
    value = _value(direction, avail)
    flits = _legal_flits(direction, avail, owed)
    if priority is not None:
        k = direction.channels.index(priority)
        flits = tuple(f for f in flits if f.totals[k]) or flits
    best, best_key = None, None
    for flit in flits:                          # the first of the best: the lowest codes on a tie
        headers = SLOTS - flit.g0
        key = (sum(v * n for v, n in zip(value, flit.totals)) - SLOT_COST * headers, -headers)
        if best_key is None or key > best_key:
            best, best_key = flit, key
    return best._replace(priority=priority)


def _check(plan, direction, key):
    """The 68B packing rules on Data Headers, which the greedy fill keeps by construction: an MDH slot
    carries 2 or more, one slot of a flit at most carries them, and the next slot for data after them is
    G0 (CXL 1.1 / CXL 3.x §4.2.5)."""
    owed = key[-1]
    with_hdrs = [s for s, slot in enumerate(plan.slots) if slot.taken[2]]
    for s, slot in enumerate(plan.slots):
        if not legal(slot.fmt, slot.taken[2]):
            raise AssertionError(f"{direction.value} plan {key}: slot {s} is {slot.fmt.name} (MDH) with "
                                 f"{slot.taken[2]} Data Headers")
    if len(with_hdrs) > 1:
        raise AssertionError(f"{direction.value} plan {key}: Data Headers in slots {with_hdrs}")
    for h in with_hdrs:
        nxt = max(h + 1, owed + 1)
        if nxt < SLOTS and not plan.slots[nxt].fmt.data:
            raise AssertionError(f"{direction.value} plan {key}: slot {nxt} after the Data Header in slot {h} "
                                 "is not G0")


def _avail(direction, avail):
    if len(avail) != len(direction.channels) or any(not isinstance(a, int) or a < 0 for a in avail):
        raise ValueError(f"avail={avail!r}: one count >= 0 per channel of {direction.value}")
    return tuple(min(a, MAX_PER_FLIT[ch]) for ch, a in zip(direction.channels, avail))


def plan_flit(direction, avail, priority, owed):
    """The protocol flit the packers send now (module docstring).  ``avail``: per channel of
    ``direction`` the messages that may join it (any count; only up to the per-flit maximum matters);
    ``priority``: index of the rotating priority channel in ``direction.channels``; ``owed``: data chunks
    owed at the start of the flit (0..3)."""
    direction = Direction(direction)
    if priority not in range(len(direction.channels)):
        raise ValueError(f"priority={priority!r}: an index into the {len(direction.channels)} channels of "
                         f"{direction.value}")
    if not 0 <= owed < CHUNKS_PER_LINE:
        raise ValueError(f"owed={owed!r}: a protocol flit starts with 0..{CHUNKS_PER_LINE - 1} chunks owed")
    return _plan(direction, _avail(direction, avail), priority, owed)


@lru_cache(maxsize=None)
def _plan(direction, avail, priority, owed):
    chan = direction.channels[priority]
    plan = _plan_with(direction, avail, None, owed)
    if avail[priority] and not plan.totals[priority]:        # the priority channel counts
        plan = _plan_with(direction, avail, chan, owed)
    _check(plan, direction, (*avail, priority, owed))
    return plan


def flit_full(direction, avail, priority, owed=0):
    """Whether the flit :func:`plan_flit` plans is *full*: one more message of no channel that has one
    (and is below its per-flit maximum) would make it carry more messages."""
    direction = Direction(direction)
    return _full(direction, _avail(direction, avail), priority, owed)


@lru_cache(maxsize=None)
def _full(direction, avail, priority, owed):
    now = sum(plan_flit(direction, avail, priority, owed).totals)
    for k, ch in enumerate(direction.channels):
        if avail[k] == 0 or avail[k] >= MAX_PER_FLIT[ch]:
            continue
        more = avail[:k] + (avail[k] + 1,) + avail[k + 1:]
        if sum(plan_flit(direction, more, priority, owed).totals) > now:
            return False
    return True
