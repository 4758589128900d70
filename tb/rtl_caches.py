"""The internal caches behind one DCOH and their traffic source, in RTL: the cache BFM's loop out of Python.

The cocotb system testbench answers the DCOH's cache side from Python (tb/cache_bfm.py): every ``cmd``
needs a ``cmd_rsp`` the next cycle, so Python must wake every cycle.  :class:`InternalCaches` does the
same work in the simulator, so a testbench only has to feed accesses and read what happened:

* ``ops`` in: the accesses, in order per cache (:class:`TrafficOp`: cache, kind, line, value, variant,
  ``think``); each cache queues ``op_depth`` of them.  An access starts when its cache has finished the
  previous one (or left reset) more than ``think`` cycles ago, so a testbench that draws the think time
  per access gets the cycle loop of ``models.system.drive`` (``1 + pace()`` cycles after a completion).
* each access decides as ``models.dcoh.cache_hit`` does: a hit (a load or RdCurr of a held line, a store
  with write permission, an eviction of a line not held) finishes in the cache -- a store writes M and its
  value -- but only in a cycle in which the DCOH is *quiet* (``quiet``, below: a hit touches no DCOH
  state, and a shadow model that takes DCOH events atomically must see it between two of them); a miss
  goes to ``cpu_req`` (the oldest waiting cache first, then the lowest index) and the cache waits for its
  ``cpu_rsp``, which installs the granted state (M takes the store's value, S and E the line sent, I nothing);
* ``cmd`` (keep, downgrade to S, invalidate the copies of the named caches) is read in the cycle it is
  taken and answered the next cycle on ``cmd_rsp`` with ``dirty`` (a copy was M), ``excl`` (a copy was E
  or M) and the line (the M copy's, else the last holder's: tb/cache_bfm.py's rule); its change is written
  in that answer's first cycle;
* ``probe`` is acknowledged at once: it is a notice, the copies change only with the DCOH's commands
  when it works the lines (a shadow model works each line at the DCOH's WORK of it, tb/system_tb.py);
* slow caches (``stall_bits`` > 0; 0, the default, never stalls): a fixed pseudo-random sequence holds
  ``cmd`` and ``cpu_rsp`` back (ready low) in about a quarter of the cycles and offers each cmd's answer
  0 .. 2**stall_bits - 1 cycles late, so that the DCOH meets caches that hold it up in the middle of an
  event (the snoops it answers meanwhile, docs/dcoh.md).

``quiet`` = the DCOH is idle, changes nothing this cycle (``dcoh_event``: a dispatch of the serializing
DCOH, a commit or intake of the pipelined one), has no ``cmd`` or ``cpu_rsp`` out, no ``cmd_rsp`` is
owed or being written: the Python testbench's rule, one cycle more conservative after a ``cmd`` (the
cycle its change is written).

No access decides while a ``cmd`` is out or in the cycle its change is written (the line read then may be
the old one: an eviction must not go to the DCOH for a line the cmd has just invalidated).

Storage: per cache one memory of ``2**index_bits`` entries (state, value) indexed by the line's low bits,
read through registered ports transparent to its write port; a line must fit ``index_bits`` and a value
``value_bits`` (lines carry values as unsigned integers, zero above them).  Anything else is a sticky bit
of ``errors`` (:class:`CacheErrors`), and so is a ``cpu_rsp`` for a cache that waits on nothing or on
another line, or two changes to one line of one cache in one cycle (the cmd's change has a write port
of its own).

Status for a testbench: ``hit``/``miss`` (per cache, this cycle), ``busy`` (per cache: an access waits
for the DCOH), ``drained`` (no access queued, started or owed, no ``cmd_rsp`` owed), ``snoops_while_held``
(the snoops the DCOH took, ``snoop_taken``, in cycles in which these caches held it up: a ``cmd`` or a
``cpu_rsp`` not taken, or a command's answer owed and not offered).
"""

from amaranth.hdl import Cat, Const, MemoryData, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring, stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from cxl.messages import ADDR_WIDTH
from hdl.dcoh.coalescer import Message
from hdl.dcoh.dcoh import CacheCmd, CacheCmdRsp, CacheState, CmdOp, CpuKind, CpuReq, CpuRsp
from hdl.link.ports import LINE_BITS

__all__ = ["TrafficOp", "CacheErrors", "InternalCaches"]


class TrafficOp(data.StructLayout):
    def __init__(self, caches, addr_width=ADDR_WIDTH, value_bits=64, think_bits=8):
        super().__init__({"cache": range(max(caches, 2)), "kind": CpuKind, "line": addr_width,
                          "value": value_bits, "variant": 1, "think": think_bits})


class CacheErrors(data.StructLayout):
    def __init__(self):
        super().__init__({"line_range": 1,       # a line above index_bits (op, cmd or cpu_rsp)
                          "wide_data": 1,        # a line's data above value_bits
                          "rsp_unexpected": 1,   # cpu_rsp for a cache that waits on nothing
                          "rsp_line": 1,         # cpu_rsp names another line than the one waited on
                          "write_clash": 1,      # two changes to one line of one cache in one cycle
                          "op_cache": 1})        # an access for a cache that does not exist (it is dropped)


STALL_BITS_MAX = 6       # a cmd's answer held back up to 2**6 - 1 cycles
_LFSR_TAPS = 0xB400      # x^16 + x^14 + x^13 + x^11 + 1, maximal length (Galois form)


def _check(name, value, low):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r}: must be an integer >= {low}")


class InternalCaches(wiring.Component):
    def __init__(self, *, caches=2, addr_width=ADDR_WIDTH, coalesce_block=4, index_bits=14, value_bits=64,
                 think_bits=8, op_depth=4, stall_bits=0):
        for name, v, low in (("caches", caches, 1), ("addr_width", addr_width, 1), ("index_bits", index_bits, 1),
                             ("value_bits", value_bits, 1), ("think_bits", think_bits, 1), ("op_depth", op_depth, 1),
                             ("coalesce_block", coalesce_block, 1), ("stall_bits", stall_bits, 0)):
            _check(name, v, low)
        if stall_bits > STALL_BITS_MAX:
            raise ValueError(f"stall_bits={stall_bits}: at most {STALL_BITS_MAX}")
        self.stall_bits = stall_bits
        if index_bits > addr_width:
            raise ValueError(f"index_bits={index_bits}: more than addr_width={addr_width}")
        if value_bits > LINE_BITS:
            raise ValueError(f"value_bits={value_bits}: more than a line ({LINE_BITS} bits)")
        if coalesce_block & (coalesce_block - 1):
            raise ValueError(f"coalesce_block={coalesce_block}: must be a power of two")
        self.caches, self.addr_width, self.index_bits = caches, addr_width, index_bits
        self.value_bits, self.think_bits, self.op_depth = value_bits, think_bits, op_depth
        block_bits = coalesce_block.bit_length() - 1
        self.entry = data.StructLayout({"state": CacheState, "value": value_bits})
        # per cache: line (low index_bits) -> (state, value); all I after reset
        self.storage = [MemoryData(shape=self.entry, depth=1 << index_bits, init=[]) for _ in range(caches)]
        super().__init__({
            "ops": In(stream.Signature(TrafficOp(caches, addr_width, value_bits, think_bits))),
            "cpu_req": Out(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": In(stream.Signature(CpuRsp(caches, addr_width))),
            "probe": In(stream.Signature(Message(addr_width - block_bits, coalesce_block, caches))),
            "cmd": In(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": Out(stream.Signature(CacheCmdRsp())),
            "dcoh_idle": In(1), "dcoh_event": In(1), "snoop_taken": In(1),
            "quiet": Out(1), "hit": Out(caches), "miss": Out(caches), "busy": Out(caches), "drained": Out(1),
            "snoops_while_held": Out(32),
            "errors": Out(CacheErrors()),
        })

    def elaborate(self, platform):
        m = Module()
        K, IB, VB = self.caches, self.index_bits, self.value_bits
        op_layout = TrafficOp(K, self.addr_width, VB, self.think_bits)
        err = Signal(CacheErrors())
        m.d.comb += self.errors.eq(err)

        def in_range(line):
            return line[IB:] == 0

        # ---------------------------------------------------------------- probes: taken at once (a probe
        # is a notice: the copies change with the DCOH's commands when it works the lines)
        m.d.comb += self.probe.ready.eq(1)

        # ---------------------------------------------------------------- slow caches (stall_bits > 0)
        # A pseudo-random sequence (a 16-bit LFSR from a fixed seed: the same run every time) holds back
        # ``cmd`` and ``cpu_rsp`` in a quarter of the cycles (their ready low) and delays each cmd's answer
        # by 0 .. 2**stall_bits - 1 cycles (its valid is raised late, and then held until it is taken).
        hold = Signal()                 # cmd and cpu_rsp not ready in this cycle
        wait_draw = Signal(max(self.stall_bits, 1))
        if self.stall_bits:
            lfsr = Signal(16, init=0xACE1)
            m.d.sync += lfsr.eq(Mux(lfsr[0], (lfsr >> 1) ^ _LFSR_TAPS, lfsr >> 1))
            m.d.comb += [hold.eq(lfsr[:2] == 0), wait_draw.eq(lfsr[2:2 + self.stall_bits])]

        # ---------------------------------------------------------------- cmd / cmd_rsp
        rsp_pending = Signal()          # cmd_rsp owed
        rsp_wait = Signal.like(wait_draw)   # cycles before it is offered
        fresh = Signal()                # the first cycle of a cmd_rsp: the cmd's change is written
        c_line = Signal(IB)
        c_mask = Signal(K)
        c_op = Signal(CmdOp)
        take_cmd = Signal()
        m.d.comb += [self.cmd.ready.eq(~rsp_pending & ~hold), take_cmd.eq(self.cmd.valid & self.cmd.ready)]
        with m.If(take_cmd):
            m.d.sync += [rsp_pending.eq(1), fresh.eq(1), c_line.eq(self.cmd.p.line[:IB]), c_mask.eq(self.cmd.p.caches),
                         c_op.eq(self.cmd.p.op), rsp_wait.eq(wait_draw)]
            with m.If(~in_range(self.cmd.p.line)):
                m.d.sync += err.line_range.eq(1)
        with m.Else():
            m.d.sync += fresh.eq(0)
            with m.If(rsp_wait != 0):
                m.d.sync += rsp_wait.eq(rsp_wait - 1)
            with m.If(self.cmd_rsp.valid & self.cmd_rsp.ready):
                m.d.sync += rsp_pending.eq(0)
        m.d.comb += self.cmd_rsp.valid.eq(rsp_pending & (rsp_wait == 0))

        # the snoops the DCOH takes while these caches hold it up (a cmd or a cpu_rsp not taken, a cmd's
        # answer owed and not offered): the ones its snoop side path answers (docs/dcoh.md)
        held_up = ((self.cmd.valid & ~self.cmd.ready) | (self.cpu_rsp.valid & ~self.cpu_rsp.ready) |
                   (rsp_pending & ~self.cmd_rsp.valid))
        snoops_held = Signal(32)
        with m.If(held_up & self.snoop_taken):
            m.d.sync += snoops_held.eq(snoops_held + 1)
        m.d.comb += self.snoops_while_held.eq(snoops_held)

        quiet = Signal()
        m.d.comb += [quiet.eq(self.dcoh_idle & ~self.dcoh_event & ~self.cmd.valid &
                              ~self.cpu_rsp.valid & ~(rsp_pending & ~self.cmd_rsp.ready) & ~fresh),
                     self.quiet.eq(quiet)]

        # ---------------------------------------------------------------- cpu_req: one register
        req_valid = Signal()
        req_cache = Signal(range(max(K, 2)))
        want = Signal(K)                # a miss waits for the cpu_req register (decided in an earlier cycle)
        miss_now = Signal(K)
        cur = [Signal(op_layout, name=f"cur{k}") for k in range(K)]     # the access each busy cache waits on
        busy = Signal(K)
        m.d.comb += self.busy.eq(busy)
        sent = Signal()
        m.d.comb += [sent.eq(self.cpu_req.valid & self.cpu_req.ready), self.cpu_req.valid.eq(req_valid),
                     self.cpu_req.p.cache.eq(req_cache)]
        with m.Switch(req_cache):
            for k in range(K):
                with m.Case(k):
                    m.d.comb += [self.cpu_req.p.kind.eq(cur[k].kind), self.cpu_req.p.line.eq(cur[k].line),
                                 self.cpu_req.p.variant.eq(cur[k].variant), self.cpu_req.p.data.eq(cur[k].value)]
        free = ~req_valid | sent
        pick_old = Signal(K)            # lowest set bit of want, then of miss_now
        pick_new = Signal(K)
        m.d.comb += [pick_old.eq(want & -want), pick_new.eq(Mux(want.any(), 0, miss_now & -miss_now))]
        loaded = Mux(free, pick_old | pick_new, 0)
        m.d.sync += want.eq((want | miss_now) & ~loaded)
        with m.If(free):
            m.d.sync += req_valid.eq((want | miss_now).any())
            for k in reversed(range(K)):       # the lowest index last: it wins
                with m.If((pick_old | pick_new)[k]):
                    m.d.sync += req_cache.eq(k)

        # ---------------------------------------------------------------- per cache
        rsp_k = self.cpu_rsp.p.cache
        rsp_fire = self.cpu_rsp.valid & self.cpu_rsp.ready
        m.d.comb += self.cpu_rsp.ready.eq(~hold)
        with m.If(rsp_fire):
            with m.If(~in_range(self.cpu_rsp.p.line)):
                m.d.sync += err.line_range.eq(1)
        hits, misses, drained, holders = [], [], [], []
        since_max = (1 << self.think_bits)
        for k in range(K):
            mem = Memory(data=self.storage[k])
            m.submodules[f"cache{k}"] = mem
            wc = mem.write_port()                            # the cmd's change
            wp = mem.write_port()                            # the cache's own: an install, a store hit
            cp = mem.read_port(transparent_for=(wc, wp))     # the cmd's line
            lp = mem.read_port(transparent_for=(wc, wp))     # the next access's line
            q = fifo.SyncFIFO(width=op_layout.size, depth=self.op_depth)
            m.submodules[f"ops{k}"] = q
            head = data.View(op_layout, q.r_data)
            m.d.comb += [q.w_data.eq(self.ops.p), q.w_en.eq(self.ops.valid & (self.ops.p.cache == k))]

            # the cmd: read at its line when taken; its change written in the first answer cycle
            m.d.comb += [cp.addr.eq(self.cmd.p.line[:IB]), cp.en.eq(take_cmd)]
            held_c = (cp.data.state != CacheState.I) & c_mask[k]
            cmd_write = fresh & held_c & (c_op != CmdOp.KEEP)

            # the next access: its line is read every cycle, so the state is current once the line
            # was already on the port in the previous cycle
            looked = Signal()
            m.d.comb += [lp.addr.eq(head.line[:IB]), lp.en.eq(1)]
            m.d.sync += looked.eq(q.r_rdy & (~q.r_en))
            since = Signal(range(since_max + 1), init=1)
            st = lp.data.state
            kind = head.kind
            is_hit = Signal()
            m.d.comb += is_hit.eq(
                Mux((kind == CpuKind.LOAD) | (kind == CpuKind.RDCURR), st != CacheState.I,
                    Mux(kind == CpuKind.STORE, (st == CacheState.M) | (st == CacheState.E),
                        Mux(kind == CpuKind.EVICT, st == CacheState.I, 0))))
            # no decision while a cmd is out or its change is being written: the line read may be stale
            ready = q.r_rdy & looked & ~busy[k] & (since > head.think) & ~self.cmd.valid & ~fresh
            hit = Signal(name=f"hit{k}")
            miss = Signal(name=f"miss{k}")
            m.d.comb += [hit.eq(ready & is_hit & quiet), miss.eq(ready & ~is_hit), q.r_en.eq(hit | miss),
                         miss_now[k].eq(miss)]
            with m.If(q.r_rdy & ~in_range(head.line)):
                m.d.sync += err.line_range.eq(1)
            hit_write = hit & (kind == CpuKind.STORE)

            # cpu_rsp for this cache: the access it waits on is finished
            rsp = rsp_fire & (rsp_k == k)
            with m.If(rsp):
                with m.If(~busy[k]):
                    m.d.sync += err.rsp_unexpected.eq(1)
                with m.If(self.cpu_rsp.p.line != cur[k].line):
                    m.d.sync += err.rsp_line.eq(1)
                with m.If((self.cpu_rsp.p.state != CacheState.M) & (self.cpu_rsp.p.data[VB:] != 0)):
                    m.d.sync += err.wide_data.eq(1)
            rsp_write = rsp & (self.cpu_rsp.p.state != CacheState.I)

            with m.If(miss):
                m.d.sync += [cur[k].eq(head), busy[k].eq(1)]
            with m.Elif(rsp):
                m.d.sync += busy[k].eq(0)
            with m.If(hit | rsp):
                m.d.sync += since.eq(1)
            with m.Elif(since != since_max):
                m.d.sync += since.eq(since + 1)

            # the cmd's change on its own port; the cache's own changes (never both at once) on the other
            m.d.comb += [wc.addr.eq(c_line), wc.en.eq(cmd_write), wc.data.value.eq(cp.data.value),
                         wc.data.state.eq(Mux(c_op == CmdOp.INV, CacheState.I, CacheState.S))]
            with m.If((rsp_write & hit_write) | (cmd_write & (wp.en != 0) & (wp.addr == c_line))):
                m.d.sync += err.write_clash.eq(1)
            with m.If(rsp_write):
                m.d.comb += [wp.addr.eq(self.cpu_rsp.p.line[:IB]), wp.en.eq(1), wp.data.state.eq(self.cpu_rsp.p.state),
                             wp.data.value.eq(Mux(self.cpu_rsp.p.state == CacheState.M, cur[k].value,
                                                  self.cpu_rsp.p.data[:VB]))]
            with m.Elif(hit_write):
                m.d.comb += [wp.addr.eq(head.line[:IB]), wp.en.eq(1), wp.data.state.eq(CacheState.M),
                             wp.data.value.eq(head.value)]
            hits.append(hit)
            misses.append(miss)
            drained.append(~q.r_rdy)
            holders.append((held_c, cp.data))

        # the cmd's answer, over the caches in index order (tb/cache_bfm.py CacheBFM.command)
        dirty, excl, value = Const(0), Const(0), Const(0, VB)
        for held, d in holders:
            is_m = d.state == CacheState.M
            value = Mux(held & (is_m | ~dirty), d.value, value)
            dirty = dirty | (held & is_m)
            excl = excl | (held & (is_m | (d.state == CacheState.E)))
        m.d.comb += [self.cmd_rsp.p.dirty.eq(dirty), self.cmd_rsp.p.excl.eq(excl), self.cmd_rsp.p.data.eq(value)]

        with m.Switch(self.ops.p.cache):
            for k in range(K):
                with m.Case(k):
                    m.d.comb += self.ops.ready.eq(m.submodules[f"ops{k}"].w_rdy)
            with m.Default():
                m.d.comb += self.ops.ready.eq(1)
                with m.If(self.ops.valid):
                    m.d.sync += err.op_cache.eq(1)
        with m.If(self.ops.valid & ~in_range(self.ops.p.line)):
            m.d.sync += err.line_range.eq(1)
        m.d.comb += [self.hit.eq(Cat(hits)), self.miss.eq(Cat(misses)),
                     self.drained.eq(Cat(drained).all() & ~busy.any() & ~req_valid & ~want.any() & ~rsp_pending)]
        return m
