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

Policy:

* Slot 0: the H-format with the best score (carries the priority channel, weighted messages:
  ``cxl.flit.SLOT_WEIGHT``); ties go to the lower code.  The priority channel counts only where the flit
  planned without one would carry none of its messages (so a channel with a message visible gets into one
  of every three protocol flits, and a flit that carries it anyway keeps the format that carries the most).
* Slots 1-3: G0 where a rule forces it (a rollover chunk in slots 1..owed; the next slot for data after
  the flit's Data Header slot); otherwise *headers first*: the G-format with the most weighted messages
  (ties to the lower code), and G0 only when no format carries a message and a chunk is owed.
* Data Headers go in one slot of a flit only, and an MDH format only when it carries two or more
  (CXL 1.1 / 3.x §4.2.5); every plan is checked against these rules when it is first made.

``flit_full`` is the packers' *full* test for waiting to fill a flit: one more message of no channel that
has messages (and is below its per-flit maximum) would make the planned flit carry more.
"""

from functools import lru_cache
from typing import NamedTuple

from cxl.flit import CHUNKS_PER_LINE, MAX_PER_FLIT, SLOT_FORMATS, SLOT_WEIGHT, SLOTS, Direction

__all__ = ["SlotPlan", "FlitPlan", "slot_formats", "positions", "legal", "plan_flit", "flit_full"]


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


def _best(formats, chans, avail, counts, headers_placed, priority):
    """(score, format, taken) of the best legal format; a tie keeps the lower code."""
    best = None
    for fmt in formats:
        taken = _takes(fmt, chans, avail, counts, headers_placed)
        if not legal(fmt, taken[2]):
            continue
        score = (priority is not None and taken[chans.index(priority)] > 0,
                 sum(SLOT_WEIGHT[ch] * n for ch, n in zip(chans, taken)))
        if best is None or score > best[0]:
            best = (score, fmt, taken)
    return best


def _plan_with(direction, avail, priority, owed):
    chans = direction.channels
    h_formats, g_formats, g0 = slot_formats(direction)
    counts = (0, 0, 0)
    slots = []
    hdr_slot = None                          # the slot of this flit with Data Headers
    g_used = 0

    def place(s, fmt, taken):
        nonlocal counts, hdr_slot
        slots.append(SlotPlan(fmt, taken, counts, g_used))
        counts = tuple(n + t for n, t in zip(counts, taken))
        if taken[2]:
            hdr_slot = s

    _, fmt, taken = _best(h_formats, chans, avail, counts, False, priority)
    place(0, fmt, taken)
    for s in range(1, SLOTS):
        pending = owed + CHUNKS_PER_LINE * counts[2] - g_used
        forced = s <= owed or (hdr_slot is not None and s == max(hdr_slot + 1, owed + 1))
        score, fmt, taken = _best(g_formats, chans, avail, counts, hdr_slot is not None, None)
        if forced or (pending and score[1] == 0):
            slots.append(SlotPlan(g0, (0, 0, 0), counts, g_used))
            g_used += 1
        else:
            place(s, fmt, taken)
    return FlitPlan(tuple(slots), counts, g_used, owed + CHUNKS_PER_LINE * counts[2] - g_used, priority)


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
    if avail[priority] and not plan.totals[priority]:
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
