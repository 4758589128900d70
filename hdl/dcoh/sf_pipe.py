"""A pipelined snoop filter: registered block-RAM output, same-set forwarding, one lookup per cycle.

The first block of the pipelined DCOH (docs/dcoh_pipeline.md).  The same tag store, updates and
answers as :class:`hdl.dcoh.snoop_filter.SnoopFilter` (the golden model's ``SnoopFilter``: hit way,
lowest free way, pseudo-LRU victim, busy fallback; built from the same functions of that module), with
the timing a pipeline needs instead of a transparent read port.

Stages (a lookup accepted in cycle N)
-------------------------------------
lookup (cycle N)
    Accepted while stage R is free (``lookup.ready``); the set's row is read from the memory.  The read
    port is *not* transparent: it returns the row as it was before cycle N's write.
R (cycle N+1, the read)
    The row is at the RAM's output.  The lookup carries the writes made to its set since its read
    (``acc``: their data and bit mask merged, starting with cycle N's), and adds each cycle's.  While R
    is held the RAM is not read again, so its output stays.
F (cycle N+2, forward)
    The RAM's output has gone into a flop of its own with no logic in front of it (the RAM's
    clock-to-out, 4.3 ns on the LFE5UM-85F, leaves no room for any); the accumulated writes are
    merged into it, and this cycle's write on top, into A's row register at the edge.  Held, F goes
    on accumulating.
A (cycle N+3 and while held, the answer)
    The row register holds the set as every write before the current cycle left it.  The answer
    (:func:`hdl.dcoh.snoop_filter.answer`: tag compares, hit way and entry, allocation choice) is
    worked out from it and the ``result_busy`` mask, combinationally: ``result`` is valid from cycle
    N+3.  While it is held the row register takes each cycle's write where its set matches.

Latency and back-pressure: a result is offered 3 cycles after its lookup is accepted; one lookup per
cycle is sustained while ``result.ready`` is high.  A moves when it is empty or taken, F when A moves
or F is empty, R when F does, and a lookup is accepted when R does: a stall holds the stages behind
it, and never drops or repeats a lookup.

Ordering: the result offered in cycle T answers for the tag store as every update made *before*
cycle T left it, whenever its lookup was accepted; an update in cycle T itself shows from cycle T+1.
So a consumer that decides from the result and writes the filter in the same cycle (the pipelined
DCOH's decision stage) hands the next result a store that holds its write, without any transparency
through the RAM.  Unlike the usual stream rule, a held result therefore *follows the updates*: its
payload may change while ``valid & ~ready``, always to the answer for the store at that cycle.
``result_busy`` (the ways whose lines have a request or work in flight) is the consumer's, for the
line in ``result.p.line``, in the result's cycle.  ``result_row`` and ``result_hits`` give the row the
result comes from (A's register) and its hit vector, for a consumer that decides per way, in parallel
with the tag compares, and selects by the hit.

Update: one masked write per cycle, ``update.ready`` tied to 1, the same operations as the other
filter (:class:`~hdl.dcoh.snoop_filter.SFOp`).

Checks (``Assert``): no valid tag twice in a set (every written set read back the next cycle), at
most one hit way in an offered result, and the forwarding itself: in every cycle, each stage's row
(R: the RAM's output with its accumulated writes; F: the flop with them; A: the row register) equals
the row the memory holds now, read through an asynchronous port per stage that only these checks use
(formal/proof_sf_pipe_forwarding.py proves them by induction).
"""

from amaranth.hdl import Assert, Cat, Format, Module, Mux, Signal
from amaranth.hdl import MemoryData
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .snoop_filter import (LookupResult, SFRow, Update, answer, check_no_duplicate_tag, check_params,
                           row_write)

__all__ = ["PipelinedSnoopFilter", "LATENCY"]

LATENCY = 3          # cycles from a lookup's acceptance to its result


class PipelinedSnoopFilter(wiring.Component):
    """Set-associative snoop filter, pipelined (module docstring).

    Parameters: ``sets``, ``ways`` (powers of two >= 1), ``caches`` (1..32, the presence vector's
    width), ``addr_width`` (> log2(sets); the tag is the rest of the line address), ``stall`` (True:
    the result may be held, as above; False: the consumer takes every result in the cycle it is
    offered, as the pipelined DCOH's decision stage does, so the stages move every cycle and have no
    hold logic; ``result.ready`` is then only checked, by an ``Assert``).  A bad value is a
    ``ValueError`` naming it.

    Attributes: ``storage`` (the tag store, one :class:`~hdl.dcoh.snoop_filter.SFRow` per set; tests
    read it), ``row_layout``, ``set_bits``, ``way_bits``.
    """

    def __init__(self, sets, ways, caches, addr_width=46, stall=True):
        set_bits = check_params("PipelinedSnoopFilter", sets, ways, caches, addr_width)
        if not isinstance(stall, bool):
            raise ValueError(f"PipelinedSnoopFilter: stall must be True or False, not {stall!r}")
        self.stall = stall
        self.sets, self.ways, self.caches, self.addr_width = sets, ways, caches, addr_width
        self.set_bits, self.way_bits = set_bits, exact_log2(ways)
        self.tag_width = addr_width - set_bits
        self.row_layout = SFRow(ways, self.tag_width, caches)
        self.storage = MemoryData(shape=self.row_layout.size, depth=sets, init=[])
        super().__init__({
            "lookup": In(stream.Signature(addr_width)),
            "result": Out(stream.Signature(LookupResult(addr_width, ways, caches))),
            "result_busy": In(ways),
            # the row the result is worked out from (the A stage's register) and its hit vector, for
            # a consumer that works out its own verdict for every way beside the tag compares
            "result_row": Out(self.row_layout), "result_hits": Out(ways),
            "update": In(stream.Signature(Update(addr_width, ways, caches))),
            # the result register's next contents, for a consumer that works out per line or per way
            # from them a cycle early, into registers of its own: the line (``next_line``), the row
            # without this cycle's write (``next_row``), the ways whose tag this cycle's write replaces
            # in it (``next_written``) and the line it writes (``next_wline``: those ways' tag is its)
            "next_line": Out(addr_width), "next_row": Out(self.row_layout), "next_written": Out(ways),
            "next_wline": Out(addr_width),
        })

    def _forward_mask(self, w_set, w_mask, line_set):
        """This cycle's write mask (``w_mask``, to set ``w_set``) where ``line_set`` is that set, else 0:
        the bits of a row in flight that the write replaces."""
        return Mux(w_set == line_set, w_mask, 0)

    def elaborate(self, platform):
        m = Module()
        ways, row_bits = self.ways, self.row_layout.size

        def set_of(line):
            return line[:self.set_bits]

        m.submodules.mem = mem = Memory(data=self.storage)
        wp = mem.write_port(granularity=1)
        rp = mem.read_port(transparent_for=())          # the row before this cycle's write

        # ---- update: one masked write per cycle -------------------------------------------------
        m.d.comb += self.update.ready.eq(1)
        w_view, w_mask_view = row_write(m, self.update, self.row_layout, ways, self.set_bits)
        w_data, w_mask = w_view.as_value(), w_mask_view.as_value()
        w_set = Signal(range(max(self.sets, 2)))
        m.d.comb += [w_set.eq(set_of(self.update.p.line)),
                     wp.addr.eq(w_set), wp.data.eq(w_data), wp.en.eq(w_mask)]

        def merge(row, data_, mask):
            return (row & ~mask) | (data_ & mask)

        def own(line_set):
            return self._forward_mask(w_set, w_mask, line_set)

        # ---- pipeline registers and moves ------------------------------------------------------
        # Each lookup in flight carries the writes made to its set since its read (``acc``: data and
        # bit mask): the RAM's output and the accumulated writes together are the set as it is now.
        r_valid, f_valid, a_valid = Signal(), Signal(), self.result.valid
        r_line, f_line, a_line = (Signal(self.addr_width, name=f"{n}_line") for n in "rfa")
        r_acc_data, r_acc_mask = Signal(row_bits), Signal(row_bits)
        f_acc_data, f_acc_mask = Signal(row_bits), Signal(row_bits)
        f_raw = Signal(row_bits)                        # the RAM's output, nothing in front of this flop
        a_row = Signal(row_bits)
        a_free, f_free, r_free = Signal(), Signal(), Signal()
        m.d.comb += [a_free.eq(~a_valid | self.result.ready if self.stall else 1),
                     f_free.eq(~f_valid | a_free),
                     r_free.eq(~r_valid | f_free),
                     self.lookup.ready.eq(r_free),
                     rp.en.eq(r_free),                  # held in R, the RAM keeps its output
                     rp.addr.eq(set_of(self.lookup.p))]

        # lookup -> R: the read, and this cycle's write to its set (the read does not see it)
        with m.If(r_free):
            mask = own(set_of(self.lookup.p))
            m.d.sync += [r_valid.eq(self.lookup.valid), r_line.eq(self.lookup.p),
                         r_acc_data.eq(w_data), r_acc_mask.eq(mask)]
        with m.Elif(r_valid):                           # held: go on accumulating
            mask = own(set_of(r_line))
            m.d.sync += [r_acc_data.eq(merge(r_acc_data, w_data, mask)), r_acc_mask.eq(r_acc_mask | mask)]

        # R -> F: the RAM's output into a flop of its own, the writes so far beside it
        with m.If(f_free):
            mask = own(set_of(r_line))
            m.d.sync += [f_valid.eq(r_valid), f_line.eq(r_line), f_raw.eq(rp.data),
                         f_acc_data.eq(merge(r_acc_data, w_data, mask)), f_acc_mask.eq(r_acc_mask | mask)]
        with m.Elif(f_valid):
            mask = own(set_of(f_line))
            m.d.sync += [f_acc_data.eq(merge(f_acc_data, w_data, mask)), f_acc_mask.eq(f_acc_mask | mask)]

        # F -> A: the row as it is after this cycle's write; A held: its row takes each write
        f_row = Signal(row_bits)
        m.d.comb += f_row.eq(merge(f_raw, f_acc_data, f_acc_mask))
        with m.If(a_free):
            m.d.sync += [a_valid.eq(f_valid), a_line.eq(f_line),
                         a_row.eq(merge(f_row, w_data, own(set_of(f_line))))]
        with m.Else():
            m.d.sync += a_row.eq(merge(a_row, w_data, own(set_of(a_line))))

        # The result register's next contents (A takes F's, or keeps its own, and this cycle's write on
        # top), and each way's tag compare with the next line worked out from them into a register
        # (``tag_eq``), so that the answer starts from flops: the compare of the row written in this
        # cycle splits into the row's tag and the write's, selected by the write's mask.  (Reset: a
        # row and a line of zeros, every tag equal.)
        next_line, next_row = self.next_line, self.next_row
        m.d.comb += [next_line.eq(Mux(a_free, f_line, a_line)), next_row.eq(Mux(a_free, f_row, a_row)),
                     self.next_wline.eq(self.update.p.line)]
        n_mask = data.View(self.row_layout, own(set_of(next_line)))
        n_tag = next_line[self.set_bits:]
        tag_eq = Signal(ways, init=(1 << ways) - 1)
        for w in range(ways):
            m.d.comb += self.next_written[w].eq(n_mask.ways[w].tag.any())
            m.d.sync += tag_eq[w].eq(Mux(self.next_written[w], self.update.p.line[self.set_bits:] == n_tag,
                                         next_row.ways[w].tag == n_tag))

        # A: the answer from the row register
        a_view = data.View(self.row_layout, a_row)
        hits = answer(m, a_view, a_line, self.result_busy, self.result.p, ways, self.set_bits, tag_eq=tag_eq)
        m.d.sync += Assert(tag_eq == Cat(a_view.ways[w].tag == a_line[self.set_bits:] for w in range(ways)),
                           Format("snoop filter: the registered tag compare for line {:#x} is stale", a_line))
        m.d.comb += [self.result_row.eq(a_row), self.result_hits.eq(hits)]

        # ---- invariants ------------------------------------------------------------------------
        check_no_duplicate_tag(m, mem, wp, self.sets, ways, self.row_layout)
        # Forwarding, checked in every cycle: each stage's row (the RAM's output with the writes since
        # the read, or the row register) is the set as the memory holds it now, read through an
        # asynchronous port of its own (simulation and proofs only: synthesis removes the checks and
        # the ports that feed nothing else, synth/run.py).
        for name, valid, line, row in (("R", r_valid, r_line, merge(rp.data, r_acc_data, r_acc_mask)),
                                       ("F", f_valid, f_line, f_row), ("A", a_valid, a_line, a_row)):
            now = mem.read_port(domain="comb")
            m.d.comb += now.addr.eq(set_of(line))
            m.d.sync += Assert(~valid | (row == now.data),
                               Format(f"snoop filter: stage {name}'s row for line {{:#x}} is not the stored row",
                                      line))
        if not self.stall:
            m.d.sync += Assert(~a_valid | self.result.ready,
                               Format("snoop filter (stall=False): the result for line {:#x} was not taken", a_line))
        m.d.sync += Assert(~a_valid | ((hits & (hits - 1)) == 0),
                           Format("snoop filter: line {:#x} hits ways {:#b}", a_line, hits))
        return m
