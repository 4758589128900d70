"""DCOH QoS flow-control blocks: a per-channel credit counter, the starvation-bounded priority
arbiter for D2H requests, and the 2-bit DevLoad-style load level.

Each is checked against the golden model (``models.dcoh.TxArbiter``, ``models.dcoh.devload_level``,
``models.link.Link`` credit accounting) in tests/test_rtl_qos.py.

# Ref: docs/sources.md §2.4 (credits: 10-bit counters, at most 1023 per class),
#      §3.2 (DevLoad encodings 00 Light, 01 Optimal, 10 Moderate overload, 11 Severe overload).
"""

import math

from amaranth.hdl import Assert, Cat, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CreditCounter", "PriorityArbiter", "DevLoad"]

MAX_CREDITS = 1023        # Ref: facts §2.4, 10-bit Rx/Tx credit counters
MAX_RETURN = 64           # Ref: facts §2.4, the largest exponential credit-return value


class CreditCounter(wiring.Component):
    """Sender-side credits of one channel.

    ``take`` spends one credit this cycle (legal only while ``available`` is nonzero);
    ``ret`` gives back that many credits this cycle (legal only up to ``in_flight``).
    Both act at the next clock edge; ``available`` and ``in_flight`` are registered.
    Conservation is asserted every cycle: available + in_flight == initial.
    """

    def __init__(self, initial):
        if not 1 <= initial <= MAX_CREDITS:
            raise ValueError(f"initial={initial!r}: credits must be 1..{MAX_CREDITS} (facts §2.4)")
        self.initial = initial
        super().__init__({
            "take": In(1),
            "ret": In(range(MAX_RETURN + 1)),
            "available": Out(range(initial + 1), init=initial),
            "in_flight": Out(range(initial + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        spent = self.take & (self.available != 0)
        # Both outcomes of ``take`` are summed from the registers and ``ret``, and ``spent`` picks
        # last: ``take`` is the latest input (the sender's handshake, which in the link port runs
        # from this counter into the packer's queue and back), and with the sums after it, it ran
        # through a carry chain into the registers (the link end's longest path with one placement,
        # docs/link_layer.md "RTL pipelining (Fmax)").
        width = len(self.available)
        avail_kept, avail_spent = Signal(width + 1), Signal(width + 1)
        flight_kept, flight_spent = Signal(width + 1), Signal(width + 1)
        m.d.comb += [
            avail_kept.eq(self.available + self.ret), avail_spent.eq(self.available + self.ret - 1),
            flight_kept.eq(self.in_flight - self.ret), flight_spent.eq(self.in_flight - self.ret + 1),
        ]
        with m.If(spent):
            m.d.sync += [self.available.eq(avail_spent), self.in_flight.eq(flight_spent)]
        with m.Else():
            m.d.sync += [self.available.eq(avail_kept), self.in_flight.eq(flight_kept)]
        m.d.comb += Assert(self.available + self.in_flight == self.initial, "credit conservation")
        # Protocol rules on the inputs, checked at the clock edge where they take effect.
        m.d.sync += [
            Assert(~self.take | (self.available != 0), "credit taken with none available"),
            Assert(self.ret <= self.in_flight, "more credits returned than in flight"),
        ]
        return m


WHY = "with 1, two classes that are starved in turn are granted alternately and the third waits forever"


class PriorityArbiter(wiring.Component):
    """Strict priority between ``classes`` request classes (0 first), except that a class whose
    head has been passed over ``bound`` times is granted next, the lowest-priority such class first.
    A head therefore waits at most ``bound + classes - 1`` grants (the model's ``TxArbiter``).

    ``req[c]``: class c has a request waiting.  ``grant`` (one-hot, combinational from ``req`` and
    the pass counters) names the class that would be served; ``advance`` says the granted request
    is taken this cycle, which updates the counters at the clock edge.
    """

    def __init__(self, classes=3, bound=4):
        if not 1 <= classes <= 8:
            raise ValueError(f"classes={classes!r}: must be 1..8")
        if bound < 2:
            # exhaustive search (tests/test_qos.py): with bound 1 the rule "the lowest-priority starved
            # class first" lets classes 1 and 2, each starved after one pass, be granted alternately
            # while class 0 waits forever; from 2 on the bound + classes - 1 wait holds
            raise ValueError(f"bound={bound!r}: the starvation bound must be >= 2 ({WHY})")
        self.classes, self.bound = classes, bound
        self.counter_shape = unsigned(max(1, (bound + classes).bit_length()))
        # how many grants each class's head has been passed over (made here so that a proof can read them)
        self.passed = [Signal(self.counter_shape, name=f"passed{c}") for c in range(classes)]
        super().__init__({
            "req": In(classes),
            "advance": In(1),
            "grant": Out(classes),
            "valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.classes
        passed = self.passed
        starved = Signal(n)
        m.d.comb += starved.eq(Cat(*[self.req[c] & (passed[c] >= self.bound) for c in range(n)]))
        # Priority: the highest-numbered starved class, else the lowest-numbered waiting class.
        with m.If(starved != 0):
            for c in range(n):                      # later assignments win: highest index
                with m.If(starved[c]):
                    m.d.comb += self.grant.eq(1 << c)
        with m.Else():
            for c in reversed(range(n)):            # later assignments win: lowest index
                with m.If(self.req[c]):
                    m.d.comb += self.grant.eq(1 << c)
        m.d.comb += self.valid.eq(self.req != 0)
        with m.If(self.advance & self.valid):
            for c in range(n):
                with m.If(self.grant[c]):
                    m.d.sync += passed[c].eq(0)
                with m.Elif(self.req[c]):
                    m.d.sync += passed[c].eq(passed[c] + 1)
        for c in range(n):
            m.d.comb += Assert(passed[c] <= self.bound + n - 1, "starvation bound exceeded")
        return m


class DevLoad(wiring.Component):
    """2-bit load level from an occupancy count: the number of thresholds the occupied fraction of
    ``capacity`` reaches (the model's ``devload_level``).  Threshold fractions are compared exactly:
    occupancy >= ceil(t * capacity), computed at elaboration.  Combinational."""

    def __init__(self, capacity, thresholds=(0.25, 0.5, 0.75)):
        if capacity < 1:
            raise ValueError(f"capacity={capacity!r}: must be >= 1")
        if len(thresholds) != 3 or list(thresholds) != sorted(thresholds) or not all(0 < t < 1 for t in thresholds):
            raise ValueError(f"thresholds={thresholds!r}: must be three increasing fractions in (0, 1)")
        self.capacity = capacity
        self.limits = [math.ceil(t * capacity) for t in thresholds]
        super().__init__({"occupancy": In(range(capacity + 1)), "level": Out(2)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.level.eq(sum((self.occupancy >= lim).as_unsigned() for lim in self.limits))
        return m
