"""DCOH invalidation coalescer: merges the probes (invalidations / downgrades that a host snoop or a
snoop-filter back-invalidation sends to the internal caches) to the lines of one aligned block of
``block`` lines that arrive within ``window`` cycles of the first, so that each internal cache gets
one message per block instead of one per line.  Reference: ``models.dcoh.Coalescer`` (checked in
tests/test_rtl_coalescer.py).

Ports
-----
``probes`` (stream in, :class:`Probe`): ``line`` (line address, ``addr_width`` bits) and ``caches``
(the internal caches to probe, a mask of ``caches`` bits).  At most one probe per cycle.

``messages`` (stream out, :class:`Message`): ``block`` (the block address, ``line >> log2(block)``),
``lines`` (bit i set: line ``block * block_size + i`` was probed; the model keeps a list of lines in
arrival order, the RTL only which lines -- a line probed twice is one bit) and ``caches`` (OR of the
cache masks of the merged probes).

``msgs_in`` / ``msgs_out`` (32 bits, wrap around): the model's counters.  ``msgs_in`` grows by
popcount(caches) for every accepted probe, ``msgs_out`` by popcount(caches) of every message taken
from ``messages`` (the model counts at ``pop``; the RTL counts at the output handshake).  Both are
registered: they include the handshakes up to the previous clock edge.

Storage and timing
------------------
``groups`` slots, each: valid, block address (the CAM key), line mask, cache mask and a down-counter.
A probe accepted in cycle ``t`` (``probes.valid & probes.ready`` at the edge ending cycle t):

* if an *open* slot (valid, counter != 0) holds its block, it merges into it: the line bit is set
  and the cache mask ORed in; the counter is not touched (the window runs from the first probe);
* otherwise it opens a free slot with counter = ``window``.

The counter of every valid slot decrements each cycle while nonzero, so a slot opened in cycle t is
open (takes merges) in cycles t+1 .. t+window and *expired* (counter 0) from cycle t+window+1 on.
This is exactly the model's rule: the model's group of deadline d = t + window takes the probes of
cycles t .. d (its ``add`` at now=d comes before the ``due(d)`` flush) and is popped at d.

**Latency**: ``messages.valid`` rises for that slot in cycle t + window + 1 = model deadline + 1
(window 0: the cycle after the probe), combinationally from the slot registers (no output register),
and stays with a stable payload until taken.  If several slots are expired together they are sent
in slot order (lowest index first), one per cycle -- except that a message once presented and
stalled stays presented until taken (a lower slot expiring meanwhile waits); with at most one probe per cycle two groups never
expire in the same cycle, so without output back-pressure every message appears exactly at
deadline + 1.  (Slot-order priority is not fair: under sustained back-pressure followed by a new
block every cycle, a high slot may wait; the model has no such queueing.)

Back-pressure and the difference from the model
-----------------------------------------------
The model keeps any number of groups; the RTL has ``groups`` slots (a parameter).  ``probes.ready``
is low (the input stalls) when the probe would need a new slot and

* no slot is free -- a slot counts as free if invalid, or if it is the expired slot being sent in this
  cycle (``messages.ready`` feeds ``probes.ready`` combinationally), or
* its block is held by an expired slot that is not sent in this cycle (a probe never merges into an
  expired slot, so the output payload stays stable; it waits and opens a new group once the old
  message has gone, just as the model opens a new group after the pop).

A stalled probe enters the model's logic at the cycle it is accepted, so the grouping (which probes
share a message) equals the model's fed with the acceptance cycles as ``now``; with enough slots
(at most one group per block open and expiring messages taken promptly) the input never stalls and
the behaviour is the model's, message for message and cycle for cycle (plus the 1-cycle latency).

``Assert`` (simulation): no two valid slots hold the same block.

Elaboration rejects bad parameters with ``ValueError`` naming them: ``block`` a power of two >= 1,
``window`` an integer >= 0, ``groups`` >= 1, ``caches`` in 1..32, ``addr_width`` > log2(block).
"""

from amaranth.hdl import Assert, Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

__all__ = ["Probe", "Message", "InvalidationCoalescer"]


class Probe(data.StructLayout):
    def __init__(self, addr_width, caches):
        super().__init__({"line": addr_width, "caches": caches})


class Message(data.StructLayout):
    def __init__(self, block_addr_width, block, caches):
        super().__init__({"block": block_addr_width, "lines": block, "caches": caches})


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _popcount(value):
    return sum(value[i] for i in range(len(value)))


class InvalidationCoalescer(wiring.Component):
    """Invalidation coalescer (see the module docstring for timing, back-pressure and the model).

    Parameters
    ----------
    window : int
        Cycles after the first probe of a block during which further probes merge (>= 0).
    block : int
        Lines per aligned block, a power of two >= 1.
    groups : int
        Number of group slots (>= 1); the model's groups are unbounded.
    caches : int
        Number of internal caches (width of the cache mask), 1..32.
    addr_width : int
        Width of a line address (46: HPA[51:6]).
    """

    def __init__(self, window, block, groups, caches, addr_width=46):
        if not _is_int(window) or window < 0:
            raise ValueError(f"InvalidationCoalescer: window must be an integer >= 0, not {window!r}")
        if not _is_int(block) or block < 1 or block & (block - 1):
            raise ValueError(f"InvalidationCoalescer: block must be a power of two >= 1, not {block!r}")
        if not _is_int(groups) or groups < 1:
            raise ValueError(f"InvalidationCoalescer: groups must be an integer >= 1, not {groups!r}")
        if not _is_int(caches) or not 1 <= caches <= 32:
            raise ValueError(f"InvalidationCoalescer: caches must be an integer in 1..32, not {caches!r}")
        block_bits = exact_log2(block)
        if not _is_int(addr_width) or addr_width <= block_bits:
            raise ValueError(f"InvalidationCoalescer: addr_width must be an integer > log2(block) = "
                             f"{block_bits}, not {addr_width!r}")
        self.window, self.block, self.groups, self.caches = window, block, groups, caches
        self.addr_width, self.block_bits = addr_width, block_bits
        self.block_addr_width = addr_width - block_bits
        super().__init__({
            "probes": In(stream.Signature(Probe(addr_width, caches))),
            "messages": Out(stream.Signature(Message(self.block_addr_width, block, caches))),
            "msgs_in": Out(32),
            "msgs_out": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.groups
        valid = Signal(n)
        blocks = [Signal(self.block_addr_width, name=f"block{i}") for i in range(n)]
        lines = [Signal(self.block, name=f"lines{i}") for i in range(n)]
        masks = [Signal(self.caches, name=f"caches{i}") for i in range(n)]
        counts = [Signal(range(max(self.window, 1) + 1), name=f"count{i}") for i in range(n)]

        # --- output: the lowest expired slot ------------------------------------------------------
        expired = Cat(valid[i] & (counts[i] == 0) for i in range(n))
        # one-hot, the lowest expired slot -- except that a message stalled last cycle stays
        # selected (stream rules: a lower slot expiring meanwhile must not replace the payload)
        sel = Signal(n)
        held = Signal()
        held_sel = Signal(n)
        with m.If(held):
            m.d.comb += sel.eq(held_sel)
        with m.Else():
            m.d.comb += sel.eq(expired & -expired)
        m.d.sync += [held.eq(self.messages.valid & ~self.messages.ready), held_sel.eq(sel)]
        m.d.comb += self.messages.valid.eq(expired.any())
        for i in range(n):
            with m.If(sel[i]):
                m.d.comb += [
                    self.messages.p.block.eq(blocks[i]),
                    self.messages.p.lines.eq(lines[i]),
                    self.messages.p.caches.eq(masks[i]),
                ]
        pop = Signal(n)                                           # slot sent this cycle
        m.d.comb += pop.eq(Cat(sel[i] & self.messages.ready for i in range(n)))

        # --- input: CAM lookup, merge or open ------------------------------------------------------
        line = self.probes.p.line
        pblock = line[self.block_bits:]
        offset = line[:self.block_bits]
        bit = Signal(self.block)
        m.d.comb += bit.eq(Const(1, self.block) << offset)
        match = Cat(valid[i] & (blocks[i] == pblock) for i in range(n))
        match_open = Cat(match[i] & (counts[i] != 0) for i in range(n))
        blocked = (match & expired & ~pop).any()                  # its block waits to be sent
        free = ~valid | pop
        first_free = Signal(n)
        m.d.comb += first_free.eq(free & -free)
        merging = match_open.any()
        m.d.comb += self.probes.ready.eq(merging | (free.any() & ~blocked))
        accept = self.probes.valid & self.probes.ready
        merge = Cat(accept & match_open[i] for i in range(n))
        alloc = Cat(accept & ~merging & first_free[i] for i in range(n))

        for i in range(n):
            with m.If(valid[i] & (counts[i] != 0)):
                m.d.sync += counts[i].eq(counts[i] - 1)
            with m.If(pop[i]):
                m.d.sync += valid[i].eq(0)
            with m.If(merge[i]):
                m.d.sync += [
                    lines[i].eq(lines[i] | bit),
                    masks[i].eq(masks[i] | self.probes.p.caches),
                ]
            with m.If(alloc[i]):
                m.d.sync += [
                    valid[i].eq(1),
                    blocks[i].eq(pblock),
                    lines[i].eq(bit),
                    masks[i].eq(self.probes.p.caches),
                    counts[i].eq(self.window),
                ]

        # --- counters -----------------------------------------------------------------------------
        with m.If(accept):
            m.d.sync += self.msgs_in.eq(self.msgs_in + _popcount(self.probes.p.caches))
        with m.If(self.messages.valid & self.messages.ready):
            m.d.sync += self.msgs_out.eq(self.msgs_out + _popcount(self.messages.p.caches))

        # --- invariant ----------------------------------------------------------------------------
        # one Assert over all pairs (one $check cell; a cell per pair makes conversion slow)
        dup = Cat(valid[i] & valid[j] & (blocks[i] == blocks[j])
                  for i in range(n) for j in range(i + 1, n))
        if len(dup):
            m.d.comb += Assert(~dup.any(), "two valid slots hold the same block")
        return m
