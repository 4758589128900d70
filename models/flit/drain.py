"""How many flits a packer needs to send everything it holds: the bound behind ``LinkPort``'s reserve.

``hdl.link.port.LinkPort`` stops taking new messages into its packer while fewer than ``reserve``
retry-buffer entries are free, so that a packer can always drain its queues and owed chunks and then
send an LLCRD with its acks: otherwise two ends with full retry buffers could wait for each other's acks
for ever (docs/link_layer.md).  :func:`drain_flits` counts the flits the golden packer
(``models.flit.Packer``, bit-exact with the RTL packer) sends from a full state; :func:`worst_drain`
takes the largest count over the states a packer of a given queue depth can be in when its port stops
taking messages: every queue full (``depth`` messages per channel, ``depth`` lines queued), 0..16
chunks owed by Data Headers already sent (at most four lines are owed after any flit), any rotating
priority, acks waiting (so the drain ends with an LLCRD), and, downstream, the H2D Reqs placed anywhere
among the H2D Rsps (a Req joins a flit only after every Rsp queued before it: GO before snoop).

The packing decisions depend on counts only (``cxl.packing``), so the states differ only in those
numbers and in the Reqs' places; ``orders="all"`` tries every placement (C(2 depth, depth) of them),
``orders="worst"`` only the *two-step* placements: the first j Reqs behind the same a Rsps and the rest
behind every Rsp ((depth + 1)^2 of them, every Req behind every Rsp among them).  With the packing
policy of ``cxl.packing`` those include the worst of all placements at depths 1 to 8 (``orders="all"``
against ``"worst"``; tests/test_flit.py checks depths 1 to 5).  Every Req behind every Rsp alone is not
enough: at depth 4 the worst state has the first Req ahead of every Rsp (12 flits against 11).
"""

import itertools
import random

from cxl.flit import CHUNK_BYTES, ORDERED_BEHIND, Direction

from .packer import Packer
from .vectors import random_msg

__all__ = ["drain_flits", "worst_drain", "MAX_OWED_CHUNKS"]

MAX_OWED_CHUNKS = 16         # four lines owed after any flit (hdl/link/tx.py, the data ring)


_MESSAGES = {}              # one fixed legal message per channel: the policy looks at counts only


def _message(ch):
    if ch not in _MESSAGES:
        _MESSAGES[ch] = random_msg(random.Random(ch.value), ch)
    return _MESSAGES[ch]


def drain_flits(direction, depth, owed, priority, req_after, wait=3):
    """Flits (protocol, all-data and the final LLCRD) the golden packer sends from ``depth`` queued
    messages of each channel, ``owed`` chunks owed and ``priority`` as the rotating priority index;
    downstream, H2D Req k is queued after ``req_after[k]`` H2D Rsps (a non-decreasing sequence)."""
    direction = Direction(direction)
    req, rsp, data = direction.channels
    p = Packer(direction, wait=wait)
    p.priority = priority
    for _ in range(owed):
        p.chunks.append(bytes(CHUNK_BYTES))
    pushed = 0
    for k in range(depth):
        while pushed < req_after[k]:
            p.push(_message(rsp))
            pushed += 1
        p.push(_message(req))
    for _ in range(depth - pushed):
        p.push(_message(rsp))
    for _ in range(depth):
        p.push(_message(data))
    p.acks = 1                      # acks wait: the drain ends with an LLCRD carrying them
    return len(p.drain())


def worst_drain(direction, depth, orders="worst", wait=3):
    """(flits, (owed, priority, req_after)) of the state that takes the most flits to drain."""
    direction = Direction(direction)
    ordered = direction in ORDERED_BEHIND
    if orders == "all" and ordered:
        placements = list(itertools.combinations_with_replacement(range(depth + 1), depth))
    elif orders == "worst" and ordered:
        placements = sorted({(a,) * j + (depth,) * (depth - j) for j in range(depth + 1) for a in range(depth + 1)})
    elif orders in ("all", "worst"):
        placements = [(0,) * depth]
    else:
        raise ValueError(f"orders={orders!r}: 'all' or 'worst'")
    return max((drain_flits(direction, depth, owed, prio, after, wait), (owed, prio, after))
               for owed in range(MAX_OWED_CHUNKS + 1) for prio in range(len(direction.channels))
               for after in placements)
