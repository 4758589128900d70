"""A bench for the pipelined DCOH's response path (hdl/dcoh/pipe/response_path.py) against the golden device.

The golden model's device (``models.dcoh.Device``) issues the requests: lines are preloaded into its
caches and snoop filter (``tb.snoop_pipe.preload``), then CPU accesses that each start a request at once
(misses, upgrades from S, evictions, uncached reads and writes) and evictions after a back-invalidation
(no CPU access).  The RTL starts the same requests through its ``start`` port, its snoop filter and
caches copied from the model's.  The bench then plays the host: for each request a random path through
the response table (``cxl.coherence.RESPONSE_TABLE``) to a stable state, its H2D Rsp and H2D Data
interleaved at random with the other requests' on the two channels.  The model follows the RTL's commit
port; each D2H Data (write pulls) and each ``cpu_rsp`` is compared with the model's, one for one and in
order, and at the end the snoop filter, the caches and the tracker (every entry freed).  Per-cycle
amaranth.sim: a unit bench of one block.
"""

import copy
import random
from collections import deque

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from cxl.coherence import GRANTED, RESPONSE_TABLE, DevState
from cxl.messages import Channel, GOState, H2DReqOpcode, H2DRspOpcode
from hdl.dcoh.encodings import CacheState, STATE_CODE
from hdl.dcoh.pipe.response_path import ResponseCommit, ResponsePath
from hdl.dcoh.sf_pipe import PipelinedSnoopFilter
from models.checker import Checker
from models.config import Config
from models.dcoh import CpuOp
from models.link import Msg
from tb.cache_bfm import CommandPort
from tb.snoop_pipe import Mismatch, compare_end_state, preload, sf_rows

__all__ = ["ResponsePathBench", "ResponseTop", "UncheckedValues", "compare_d2h_data", "host_events", "host_message", "offer_host"]

_EVENT_MSG = {"GO-S": GOState.Shared, "GO-E": GOState.Exclusive, "GO-I": GOState.Invalid}
_PULLS = {"GO_WritePull": H2DRspOpcode.GO_WritePull, "GO_WritePull_Drop": H2DRspOpcode.GO_WritePull_Drop,
          "WritePull": H2DRspOpcode.WritePull}


def offer_host(ctx, port, msg):
    """Offer the host's message ``msg`` (a model ``Msg``, H2D Rsp or H2D Data) on the DCOH's ``port``."""
    ctx.set(port.valid, 1)
    if msg.chan is Channel.H2D_DATA:
        ctx.set(port.p, {"hdr": {"valid": 1, "cqid": msg.uid}, "data": msg.data})
    else:
        ctx.set(port.p, {"valid": 1, "opcode": msg.op, "rsp_data": msg.rsp_data, "cqid": msg.uid})


def compare_d2h_data(d, rtl_data, sent_data, mismatch):
    """The RTL's next D2H Data (``d``, a DataMsg payload) against the model's of the same rank in
    ``sent_data`` (its UQID, Bogus bit and line; a Bogus one carries zeros); ``mismatch(what)`` raises."""
    i = len(rtl_data)
    rtl_data.append(d)
    if i >= len(sent_data):
        mismatch(f"the RTL sent D2H Data #{i} (UQID {int(d.hdr.uqid)}), the model has not")
    exp = sent_data[i]
    got = (int(d.hdr.uqid), bool(d.hdr.bogus), int(d.data))
    want = (exp.uid, exp.bogus, 0 if exp.bogus or exp.data is None else exp.data)
    if got != want:
        mismatch(f"D2H Data #{i}: RTL (uqid, bogus, data) {got}, model {want}")


class UncheckedValues(Checker):
    """The data-value checker without its read check: the bench's host sends arbitrary lines."""

    def read(self, line, value, who, args=()):
        self.reads += 1


class ResponseTop(Elaboratable):
    """The response path writing a pipelined snoop filter (the filter the pipelined DCOH shares), so
    that a bench can preload the filter and compare it at the end."""

    def __init__(self, *, caches, tracker, sf_sets, sf_ways):
        self.path = ResponsePath(caches=caches, tracker=tracker, sf_ways=sf_ways)
        self.sf = PipelinedSnoopFilter(sf_sets, sf_ways, caches, stall=False)
        self.sf_ways = sf_ways

    def elaborate(self, platform):
        m = Module()
        m.submodules.path, m.submodules.sf = self.path, self.sf
        wiring.connect(m, self.path.sf_update, self.sf.update)
        m.d.comb += [self.sf.lookup.valid.eq(0), self.sf.result.ready.eq(1), self.sf.result_busy.eq(0)]
        return m


def host_events(rng, state):
    """A random path through the response table from ``state`` (a ``DevState``) to a stable state:
    the events, in order."""
    events = []
    granted = None
    while not state.stable:
        choices = [e for (s, e) in RESPONSE_TABLE if s is state]
        e = rng.choice(choices)
        nxt, _ = RESPONSE_TABLE[(state, e)]
        if e in ("GO-S", "GO-E"):
            granted = DevState.S if e == "GO-S" else DevState.E
        state = granted if nxt == GRANTED else nxt
        events.append(e)
    return events


def host_message(t, event, rng, uqids):
    """The host's message for response-table ``event`` to request ``t`` (a model ``Txn``): an H2D Data
    with a random line, a GO with the state it names, or a pull with the next of ``uqids``."""
    if event == "Data":
        return Msg(Channel.H2D_DATA, None, t.cqid, t.line, data=rng.getrandbits(64))
    if event in _EVENT_MSG:
        return Msg(Channel.H2D_RSP, H2DRspOpcode.GO, t.cqid, t.line, rsp_data=_EVENT_MSG[event].value)
    return Msg(Channel.H2D_RSP, _PULLS[event], t.cqid, t.line, rsp_data=next(uqids) % 4096)


class ResponsePathBench:
    """One run: ``requests`` requests started, then answered.  ``p_in``: the probability the host offers
    a message on a channel in a cycle; ``p_sink``: that a port of the device side takes in a cycle;
    ``cmd_delay``: the most cycles a command waits for its answer.  Returns a dict with the cycles, the
    events applied and the protocol errors."""

    #: the requests drawn (repeated kinds are drawn more often): CPU accesses, an eviction after a
    #: back-invalidation (no CPU access), and one whose line a snoop took meanwhile (EI_A / MI_A -> II_A)
    KINDS = ("load", "load", "load", "store", "store", "upgrade", "upgrade", "evict", "rdcurr", "itomwr",
             "wrinv", "clflush", "back_inv", "snooped_evict")

    def __init__(self, *, seed=1, caches=8, tracker=16, sf_sets=16, sf_ways=4, requests=None, kinds=KINDS,
                 n_lines=24):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.cfg = Config(devices=1, caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, max_outstanding=tracker)
        lines = rng.sample(range(4 * sf_sets * sf_ways), min(n_lines, 4 * sf_sets * sf_ways))
        self.dev, bfm = preload(rng, self.cfg, lines)
        self.dev.checker = UncheckedValues()
        self.dev.defer_complete = True
        self.top = ResponseTop(caches=caches, tracker=tracker, sf_sets=sf_sets, sf_ways=sf_ways)
        self.dut = self.top.path
        self._issue(requests if requests is not None else tracker, kinds)
        self.dev.link.rsp.clear()        # what the setup's snoops answered
        self.dev.link.data.clear()
        self.top.sf.storage.init = sf_rows(self.top, self.dev.sf)
        self.bfm = bfm
        bfm.caches = copy.deepcopy(self.dev.caches)
        for k, op in enumerate(self.dev.ops):
            bfm.busy[k] = op

    def _issue(self, n, kinds):
        """Start up to ``n`` requests in the model, each from a CPU access that issues at once (or an
        eviction after a back-invalidation)."""
        dev, rng, K = self.dev, self.rng, self.cfg.caches
        fresh = iter(range(1 << 16, 1 << 17))
        tries = 0
        while len(dev.txns) < n and dev.free_cqids and tries < 50 * n:
            tries += 1
            kind = rng.choice(kinds)
            idle = [k for k in range(K) if dev.ops[k] is None]
            held = [l for l, e in dev.sf.entries.items() if l not in dev.by_line and e.state is not None]
            before = len(dev.txns)
            if kind in ("back_inv", "snooped_evict"):
                if not held:
                    continue
                line = rng.choice(held)
                dev._evict_after_back_invalidation(line, dev._alloc_cqid(), 0)
                if kind == "snooped_evict" and dev.by_line[line].state in (DevState.EI_A, DevState.MI_A):
                    dev.on_snoop(Msg(Channel.H2D_REQ, H2DReqOpcode.SnpInv, 0, line), 0)
            else:
                if not idle:
                    continue
                k = rng.choice(idle)
                variant = rng.randrange(2)
                value = rng.getrandbits(64)
                if kind in ("load", "store", "rdcurr", "itomwr", "wrinv", "clflush"):
                    line = next(fresh)
                    if dev.sf.free_way(dev.sf.set_of(line)) is None:
                        continue
                    op = CpuOp(kind, k, line, value, variant)
                elif kind == "upgrade":         # a store to an S line
                    s_lines = [l for l in held if dev.sf.entries[l].state is DevState.S]
                    if not s_lines:
                        continue
                    op = CpuOp("store", k, rng.choice(s_lines), value, variant)
                else:                           # evict: the only copy of a line
                    own = [l for l in dev.caches[k] if l in held and dev.sf.entries[l].presence == 1 << k]
                    if not own:
                        continue
                    op = CpuOp("evict", k, rng.choice(own), value, variant)
                dev.accept(op, 0)
                if dev.queue:
                    raise AssertionError(f"seed {self.seed}: the bench's {kind} access {op!r} did not issue")
            if len(dev.txns) != before + 1:
                raise AssertionError(f"seed {self.seed}: the bench's {kind} access started no request")

    def run(self, *, p_in=1.0, p_sink=1.0, cmd_delay=0, max_cycles=None, check=True, bad=(), duplicate_data=False):
        """``bad``: messages (``Msg``) the host sends before the others, each of which the RTL must drop
        (a CQID not in use, a response its request's state does not declare); ``duplicate_data``: every
        H2D Data is followed at once by a copy with another line, which the RTL must drop without
        letting its line in."""
        top, dut, dev, bfm, rng = self.top, self.dut, self.dev, self.bfm, self.rng
        starts = deque(sorted(dev.txns.values(), key=lambda t: t.cqid))
        rsp_q, data_q = [], []
        for t in starts:
            evs = host_events(rng, t.state)
            rsp_q.append([e for e in evs if e != "Data"])
            data_q.append(["Data"] * evs.count("Data"))
        chans = {"rsp": self._interleave(starts, rsp_q), "data": self._interleave(starts, data_q)}
        first_bad, bad = list(bad), list(bad)
        if duplicate_data:          # each H2D Data sent twice in a row, the copy with another line
            doubled = []
            for t, e in chans["data"]:
                first = host_message(t, e, rng, None)
                copy_ = Msg(Channel.H2D_DATA, None, t.cqid, t.line, data=first.data ^ 1)
                bad.append(copy_)
                doubled += [(t, first), (None, copy_)]
            chans["data"] = doubled
        for msg in reversed(first_bad):
            chans["data" if msg.chan is Channel.H2D_DATA else "rsp"].insert(0, (None, msg))
        dropped = []
        n_events = len(chans["rsp"]) + len(chans["data"])
        max_cycles = max_cycles or 20 * n_events + 200
        sent_data = dev.link.data
        out = {"cycles": 0, "events": n_events, "commit_cycles": [], "first_take": None}
        taken = deque()                 # messages taken, in order, until C decides them
        cpu_expected = deque()          # (cache, line, state, data or None) of the completions, in order
        answers = CommandPort(bfm, rng, cmd_delay)
        rtl_data = []
        uqid = iter(range(1 << 30))

        def mismatch(what, cyc):
            raise Mismatch(f"seed {self.seed}, cycle {cyc}: {what}")

        async def bench(ctx):
            for cyc in range(max_cycles):
                # ---- inputs of this cycle
                st = None
                if starts:
                    t = starts[0]
                    e = dev.sf.entries.get(t.line)
                    k = t.cpu.k if t.cpu is not None else 0
                    st = {"idx": t.cqid, "op": t.op, "line": t.line, "state": STATE_CODE[t.state],
                          "way": e.way if e is not None else 0, "cache": k, "cpu": int(t.cpu is not None),
                          "store": int(t.cpu is not None and t.cpu.kind == "store"),
                          "others": (e.presence & ~(1 << k)) if e is not None else 0,
                          "value": t.value if isinstance(t.value, int) else 0}
                    ctx.set(dut.start.valid, 1)
                    ctx.set(dut.start.p, st)
                else:
                    ctx.set(dut.start.valid, 0)
                offers = {}
                for chan, port in (("rsp", dut.h2d_rsp), ("data", dut.h2d_data)):
                    q = chans[chan]
                    if not starts and q and rng.random() < p_in:
                        t, e = q[0]
                        msg = offers[chan] = host_message(t, e, rng, uqid) if not isinstance(e, Msg) else e
                        q[0] = (t, msg)
                        offer_host(ctx, port, msg)
                    else:
                        ctx.set(port.valid, 0)
                for port in (dut.d2h_data, dut.cpu_rsp, dut.cmd):
                    ctx.set(port.ready, rng.random() < p_sink)
                answers.drive(ctx, dut.cmd_rsp, cyc)
                # ---- what happens in it (read before the edge)
                if st is not None and ctx.get(dut.start.ready):
                    starts.popleft()
                for chan, port in (("rsp", dut.h2d_rsp), ("data", dut.h2d_data)):
                    if chan in offers and ctx.get(port.ready):
                        chans[chan].pop(0)
                        taken.append(offers[chan])
                        if out["first_take"] is None:
                            out["first_take"] = cyc
                kind = ResponseCommit(ctx.get(dut.commit))
                if kind is not ResponseCommit.NONE:
                    self._shadow(kind, taken.popleft(), int(ctx.get(dut.commit_cqid)), bad, cyc, out,
                                 cpu_expected, dropped)
                if ctx.get(dut.freed.valid):
                    self._complete(int(ctx.get(dut.freed.cqid)), cyc, cpu_expected)
                answers.sample(ctx, dut.cmd, dut.cmd_rsp, cyc)
                if ctx.get(dut.d2h_data.valid) and ctx.get(dut.d2h_data.ready):
                    compare_d2h_data(ctx.get(dut.d2h_data.p), rtl_data, sent_data, lambda what: mismatch(what, cyc))
                if ctx.get(dut.cpu_rsp.valid) and ctx.get(dut.cpu_rsp.ready):
                    r = ctx.get(dut.cpu_rsp.p)
                    got = (int(r.cache), int(r.line), CacheState(r.state).name)
                    if not cpu_expected:
                        mismatch(f"cpu_rsp {got} with no completion in the model", cyc)
                    k, line, state, value = cpu_expected.popleft()
                    if got != (k, line, state) or (value is not None and int(r.data) != value):
                        mismatch(f"cpu_rsp: RTL {got} data {int(r.data)}, model {(k, line, state)} data {value}", cyc)
                    bfm.install(k, line, state, int(r.data))
                await ctx.tick()
                if not starts and not chans["rsp"] and not chans["data"] and not taken and not answers \
                        and ctx.get(dut.idle):
                    out["cycles"] = cyc + 1
                    break
            else:
                raise Mismatch(f"seed {self.seed}: not finished in {max_cycles} cycles: {len(chans['rsp'])} H2D Rsp "
                               f"and {len(chans['data'])} H2D Data not taken, {len(dev.txns)} requests open")
            out["errors"] = ctx.get(dut.protocol_errors)
            out["last_error"] = ctx.get(dut.last_error)
            out["dropped"] = dropped
            if not check:
                return
            cyc = out["cycles"]
            if dev.txns:
                mismatch(f"the model still has requests {sorted(dev.txns)}", cyc)
            if ctx.get(dut.in_use):
                mismatch(f"the RTL's tracker still has entries in use: {ctx.get(dut.in_use):#x}", cyc)
            if len(rtl_data) != len(sent_data) or cpu_expected:
                mismatch(f"counts: RTL {len(rtl_data)} D2H Data, model {len(sent_data)}; "
                         f"{len(cpu_expected)} cpu_rsp not sent", cyc)
            compare_end_state(ctx, top, bfm, dev, lambda what: mismatch(what, cyc))

        sim = Simulator(top)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
        return out

    def _shadow(self, kind, msg, cqid, bad, cyc, out, cpu_expected, dropped):
        """The model follows C's decision on ``msg`` (the oldest message taken); a request it makes
        stable completes at the lane (:meth:`_complete`)."""
        dev = self.dev

        def mismatch(what):
            raise Mismatch(f"seed {self.seed}, cycle {cyc}: {what}")
        is_bad = any(msg is b for b in bad)
        if cqid != msg.uid % self.dut.tracker:
            mismatch(f"C decided CQID {cqid}, the next message taken names {msg.uid}")
        if kind is ResponseCommit.DROP:
            if not is_bad:
                mismatch(f"a legal message dropped: {msg!r}")
            dropped.append(msg)
            return
        if is_bad:
            mismatch(f"a bad message applied: {msg!r}")
        if (kind is ResponseCommit.DATA) != (msg.chan is Channel.H2D_DATA):
            mismatch(f"commit {kind.name} for {msg!r}")
        if msg.chan is Channel.H2D_DATA:
            dev.on_h2d_data(msg, cyc)
        else:
            dev.on_h2d_rsp(msg, cyc)
        out["commit_cycles"].append(cyc)

    def _complete(self, cqid, cyc, cpu_expected):
        """The lane completed request ``cqid`` (``freed``): so does the model; a CPU access's
        completion adds the ``cpu_rsp`` it must send."""
        dev = self.dev
        t = dev.txns.get(cqid)
        if t is None:
            raise Mismatch(f"seed {self.seed}, cycle {cyc}: the RTL freed CQID {cqid}, which the model has not started")
        dev.complete(cqid, cyc)
        if t.cpu is not None:
            state = "I" if t.state is DevState.I else ("M" if t.cpu.kind == "store" else t.state.name)
            cpu_expected.append((t.cpu.k, t.line, state, t.data))

    def _interleave(self, txns, per_txn):
        """The events of every request in one random order that keeps each request's own order."""
        slots = [i for i, evs in enumerate(per_txn) for _ in evs]
        self.rng.shuffle(slots)
        nxt = [0] * len(per_txn)
        out = []
        for i in slots:
            out.append((txns[i], per_txn[i][nxt[i]]))
            nxt[i] += 1
        return out

