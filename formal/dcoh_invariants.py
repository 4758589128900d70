"""Invariants of the DCOH's state that make its snoop-response safety inductive (k-induction, unbounded).

A bounded check of "every D2H Rsp retires exactly one pending snoop" (formal/dcoh_one_response_harness.py)
only covers the runs that fit its depth.  k-induction covers every reachable state, but only if the
property, together with what else the harness asserts, rules out every unreachable state from which k
good-looking steps lead to a failure.  The DCOH's own Asserts (tracker, work table, CQID allocator,
credit counters, snoop filter, coalescer) are part of that: they must hold in every reachable state too.
:func:`add_invariants` states what a reachable state of the small DCOH looks like, as ``Assert``s, in
seven groups:

1. the sub-blocks' encodings: the engine's state code, the CQID allocator's count and flags against
   the CQIDs in use, the D2H request arbiter's pass counters (a combination its rule reaches, a class
   passed over still waiting), every snoop-filter row (no valid tag twice, a legal state, an S or E
   line has a copy, a placeholder none);
2. each tracker entry alone: its opcode and transient state are a pair the request tables of
   ``cxl.coherence`` reach; a snoop-filter way exactly for a read or ownership request; ``store``
   exactly for an ownership request; only an eviction is not a CPU access's; one request per line;
3. the snoop filter, the tracker and the work table together: a placeholder way belongs to a request
   that holds it (or to the fill that is completing it); a request's way holds its line, a placeholder
   while it misses, S while it upgrades; a request without a way has its line out of the filter; a
   work entry is a snoop's or an eviction's, its way holds its line (or, for an eviction, a snoop took
   the line); an eviction's line and a kept entry's line have no request; a kept entry is the filter's;
4. the waiting CPU accesses: the queue holds distinct caches whose slot is taken, and a cache with an
   issued request (in the tracker, or completing) has nothing queued;
5. what the engine's registers hold in the states that read them: a lookup result has the state that
   takes it and reads the row as it is; the latched lookup ``r`` and its tracker and work hits agree
   with the tables for the line of the snoop, work, access or completion the state serves (nothing else
   writes them in between: the engine is the only writer, one event at a time); each state's path
   condition (an eviction's copy taken: its line held by its cache; a fill inside the device: its line
   in E or held; a work's eviction: no snoop left on it; ...);
6. probes: a work entry waiting for its probe has exactly one, in the queue in front of the coalescer
   or in the coalescer, and no probe is for anything else;
7. the snoops the DCOH holds (``snp`` in SNP_RES, ``slow_snp`` while it is decided or held, ``a_uqid``
   while it is answered, a work entry's snoop, the side path's response register): each holds a
   pending snoop of its line and UQID (the harness's ``pending`` / ``uqid``), no two hold one, and
   every pending snoop is held by one of them (so none is ever dropped unanswered); and,
   past SNP_RES (which drops a reserved opcode), the opcodes they hold are legal ones, whatever the host
   sends.

Found the way k-induction is used: run it, read the counterexample to induction (an unreachable first
state), state why that state cannot happen, repeat.  Each Assert is also checked from reset by the
proof's base case, so a wrong invariant fails there instead of weakening the proof.

The DCOH's internal signals are read through ``dut.debug`` (the builders' shared namespace, set by
``DCOH.elaborate``), and the snoop filter's rows through :class:`ObservedSnoopFilter`, which adds one
asynchronous read port per set (the RTL file is unchanged; the proof's harness builds the DCOH with it).
Parameters: :data:`formal.dcoh_env.PARAMS` (one snoop-filter set, one work entry, one coalescer group
of one line with no window); :func:`add_invariants` names any other value it cannot handle.
"""

import re

from amaranth.hdl import Assert, Cat, Signal

import cxl.coherence as C
from cxl.device import REQUEST_PRIORITY
from cxl.messages import D2HReqOpcode as Req, H2DReqOpcode as Snp
from hdl.dcoh.encodings import STATE_CODE, CacheState, CpuKind
from hdl.dcoh.engine_tables import perm_none
from hdl.dcoh.snoop_filter import SFState, SnoopFilter
from formal.dcoh_env import STALL_CODES

__all__ = ["ObservedSnoopFilter", "add_invariants", "add_cache_invariants", "arbiter_reachable", "reachable_requests"]

_SNOOPS = tuple(Snp)                                       # SnpData, SnpInv, SnpCur: every legal snoop
# the D2H request classes (cxl/device.py): evictions (0) and the coherent reads (1), which hold a way
_EVICTIONS = tuple(op for op, c in REQUEST_PRIORITY.items() if c == 0)
_READS = tuple(op for op, c in REQUEST_PRIORITY.items() if c == 1)
_OWNERSHIP = (Req.RdOwn, Req.RdOwnNoData)
_ANSWER = ("ANSWER", "ANSWER_RSP", "ANSWER_SEND", "ANSWER_DATA")
# states that read the latched lookup ``r`` (and its tracker and work hits) as the line's present state
_READS_R = ("SNP_SLOW", "SNP_QUERY", "SNP_QUERY_RSP", *_ANSWER, "W_GO", "EV_RSP", "EV_ISSUE", "S_TRY", "S_EVICT",
            "S_EVICT_RSP", "S_EVICT_SET", "S_LFILL", "S_LFILL_RSP", "S_LFILL_SET", "S_SFILL", "S_SFILL_RSP",
            "S_SFILL_SET")
# states that serve the waiting access ``cur_k`` (tried, or finished inside the device)
_SERVING = ("S_RES", "S_TRY", "S_EVICT", "S_EVICT_RSP", "S_EVICT_SET", "S_LFILL", "S_LFILL_RSP", "S_LFILL_SET",
            "S_SFILL", "S_SFILL_RSP", "S_SFILL_SET", "S_REPLY")
# states after a read or ownership request completed (its entry freed) and before its line is filled
_FILLING = ("C_RES", "C_FILL", "C_INV_RSP", "C_FILL2")


class ObservedSnoopFilter(SnoopFilter):
    """The DCOH's snoop filter with what a proof reads: ``rows[s]``, set s as stored now (one
    asynchronous read port per set), and ``read_data``, the lookup read port's registered output.  Both
    are signals made in the constructor, so a harness can use them before the filter is elaborated."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows = [Signal(self.row_layout, name=f"sf_row{s}") for s in range(self.sets)]
        self.read_data = Signal(self.row_layout, name="sf_read_data")

    def elaborate(self, platform):
        m = super().elaborate(platform)
        mem = m.submodules.mem
        m.d.comb += self.read_data.eq(mem.read_ports[0].data)        # the lookup port (the block's first)
        for s, row in enumerate(self.rows):
            port = mem.read_port(domain="comb")
            m.d.comb += [port.addr.eq(s), row.eq(port.data)]
        return m


def _asserter(m, prefix, label, count):
    """``inv(cond, name)``: ``Assert`` ``cond`` as "<label>: <name>", also driven onto a signal named
    <prefix><name> (1 while it holds: a trace shows which one a counterexample breaks); ``count[0]``
    counts them."""
    def inv(cond, name):
        sig = Signal(name=prefix + re.sub(r"\W+", "_", name).strip("_"))
        m.d.comb += [sig.eq(cond), Assert(sig, f"{label}: {name}")]
        count[0] += 1
    return inv


def reachable_requests():
    """(opcode, transient state) of every request a tracker entry can hold: from each start state of
    ``cxl.coherence.REQUEST_START``, the transient states the response and snoop tables lead to."""
    pairs = set()
    for (op, _), start in C.REQUEST_START.items():
        todo, seen = [start], set()
        while todo:
            s = todo.pop()
            if s in seen or not isinstance(s, C.D) or s in C._STABLE:
                continue
            seen.add(s)
            todo += [nxt for (s1, _), (nxt, _) in C.RESPONSE_TABLE.items() if s1 == s]
            todo += [v[1] for (s1, _), v in C.SNOOP_TABLE.items() if s1 == s and isinstance(v, tuple)]
        pairs |= {(op, s) for s in seen}
    return sorted(pairs, key=lambda p: (p[0].value, STATE_CODE[p[1]]))


def arbiter_reachable(classes, bound):
    """Every combination of the D2H request arbiter's pass counters (hdl/dcoh/qos.py PriorityArbiter)
    reachable from reset when a class passed over keeps requesting until it is granted (its queue's head
    stays; the invariants assert that too): a breadth-first search over grants, each made by the golden
    model's arbiter (``models.dcoh.TxArbiter.pop``, the rule the RTL arbiter is checked against), so the
    rule is not restated here.  A divergence of the RTL from it fails the proofs' base case."""
    from models.dcoh import TxArbiter         # (formal, like tb, may use the model)
    if classes != TxArbiter.CLASSES:
        raise ValueError(f"arbiter_reachable: {classes} classes; the model's arbiter has {TxArbiter.CLASSES}")
    start = (0,) * classes
    seen, todo = {start}, [start]
    while todo:
        passed = todo.pop()
        waiting = sum(1 << c for c in range(classes) if passed[c])
        for req in range(1, 2 ** classes):
            if req & waiting != waiting:
                continue
            arb = TxArbiter(bound)
            arb.passed = list(passed)
            for c in range(classes):
                if (req >> c) & 1:
                    arb.queues[c].append(None)
                    arb.count += 1
            arb.pop()
            nxt = tuple(arb.passed)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return sorted(seen)


def add_invariants(m, dut, pending=None, uqids=None):
    """``Assert`` the invariants (module docstring) of ``dut``, a DCOH elaborated with an
    :class:`ObservedSnoopFilter`; ``pending[l]`` / ``uqids[l]``: the harness's unanswered snoop of line
    l and its UQID, for a harness whose host keeps the snoop rules (one unanswered snoop per line,
    distinct UQIDs); None: group 7's holders are left out.  Each invariant is also
    a named signal ``inv_<name>``, 1 while it holds (a trace shows which one a counterexample breaks).
    Returns the number of invariants."""
    if not isinstance(dut.sf, ObservedSnoopFilter):
        raise ValueError("add_invariants: build the DCOH with an ObservedSnoopFilter (dut.sf)")
    for name, want in (("sf_sets", 1), ("work", 1), ("coalesce_groups", 1), ("coalesce_block", 1),
                       ("coalesce_window", 0)):
        if getattr(dut, name) != want:
            raise ValueError(f"add_invariants: {name}={getattr(dut, name)!r}; these invariants are written for "
                             f"{name}={want} (formal.dcoh_env.PARAMS)")
    if (pending is None) != (uqids is None) or (pending is not None and (
            len(pending) != 2 ** dut.addr_width or len(uqids) != len(pending))):
        raise ValueError(f"add_invariants: one pending flag and UQID per line ({2 ** dut.addr_width}), got "
                         f"{pending and len(pending)} and {uqids and len(uqids)}")
    c, AW, K, T = dut.debug, dut.addr_width, dut.caches, dut.tracker
    eng = c.engine
    count = [0]

    def st(*names):
        return Cat(*(eng.ongoing(n) for n in names)).any()

    inv = _asserter(m, "inv_", "invariant", count)

    def one_of(value, members):
        return Cat(*(value == x for x in members)).any()

    row = dut.sf.rows[0]
    ways = range(dut.sf_ways)
    trk, wk = c.trk, c.wk

    def in_filter(line):
        return Cat(*(row.ways[x].valid & (row.ways[x].tag == line) for x in ways)).any()

    def requests_on(line):
        return Cat(*(trk[i].valid & (trk[i].line == line) for i in range(T))).any()

    # ---- 1. the sub-blocks' encodings
    inv(eng.state < len(eng.encoding), "the engine's state is one of its states")
    for i in range(T):
        reserved = wk[0].valid & wk[0].evict & (wk[0].evict_cqid == i)
        inv(c.cqids.live[i] == (trk[i].valid | reserved), f"CQID {i} is live while its request or eviction is")
        inv(~(trk[i].valid & reserved), f"CQID {i} is not a request's and a reserved eviction's at once")
    inv(~(wk[0].valid & wk[0].evict) | (wk[0].evict_cqid < T), "an eviction's reserved CQID is in range")
    inv(c.cqids.count == sum(c.cqids.live[i] for i in range(T)), "the CQID count is the live CQIDs'")
    arb = c.arb
    inv(Cat(*(Cat(*(p == v for p, v in zip(arb.passed, combo))).all()
              for combo in arbiter_reachable(arb.classes, arb.bound))).any(),
        "the arbiter's pass counters are a reachable combination")
    for k in range(arb.classes):
        inv((arb.passed[k] == 0) | arb.req[k], f"arbiter class {k}: a head passed over still waits")
    inv(c.cqids.one_free == (c.cqids.count < T), "one_free agrees with the count")
    inv(c.cqids.two_free == (c.cqids.count + 2 <= T), "two_free agrees with the count")
    for a in ways:
        way = row.ways[a]
        inv(~way.valid | (way.entry.state.as_value() != 3), f"SF way {a} holds a state")
        inv(~way.valid | (way.entry.state == SFState.PLACEHOLDER) | (way.entry.presence != 0),
            f"SF way {a}: an S or E line has a copy")
        inv(~way.valid | (way.entry.state != SFState.PLACEHOLDER) | ((way.entry.presence == 0) & ~way.entry.dirty),
            f"SF way {a}: a placeholder has no copy")
        for b in ways[a + 1:]:
            inv(~(way.valid & row.ways[b].valid & (way.tag == row.ways[b].tag)), f"SF ways {a} and {b}: two lines")

    # ---- 2. each tracker entry alone
    pairs = reachable_requests()
    # a request whose host response pulls its data (a send action) and leaves it stable: (opcode, that state)
    pulled_pairs = sorted({(op, nxt) for op, s in pairs for (s1, _), (nxt, act) in C.RESPONSE_TABLE.items()
                           if s1 == s and act is not None and nxt in C._STABLE}, key=lambda p: (p[0].value, p[1].name))
    miss_states = [STATE_CODE[s] for s in C.D if s.name.startswith(("IS_", "IM_"))]
    upgrade_states = [STATE_CODE[s] for s in C.D if s.name.startswith("SM_")]
    for i in range(T):
        e = trk[i]
        # (RSP_DATA / ADVANCE: the stable state its data-pulling response left, written while the data
        # still goes out: I, cxl.coherence.RESPONSE_TABLE's send actions)
        pulled = st("RSP_DATA", "ADVANCE") & (c.cur_t == i) & \
            Cat(*((e.op == o) & (e.state == STATE_CODE[s]) for o, s in pulled_pairs)).any()
        inv(~e.valid | pulled | Cat(*((e.op == o) & (e.state == STATE_CODE[s]) for o, s in pairs)).any(),
            f"trk{i}: its state is one its opcode reaches")
        inv(~e.valid | (e.has_way == one_of(e.op, _READS)), f"trk{i}: a way exactly for a read or ownership request")
        inv(~e.valid | (e.store == one_of(e.op, _OWNERSHIP)), f"trk{i}: a store's request is an ownership request")
        inv(~e.valid | e.cpu | one_of(e.op, _EVICTIONS), f"trk{i}: only an eviction is no CPU access's")
        inv(~(e.valid & e.cpu) | (e.cache < K), f"trk{i}: its cache is one of the caches")
        for j in range(i + 1, T):
            inv(~(e.valid & trk[j].valid & (e.line == trk[j].line)), f"trk{i}, trk{j}: one request per line")
            inv(~(e.valid & e.cpu & trk[j].valid & trk[j].cpu & (e.cache == trk[j].cache)),
                f"trk{i}, trk{j}: one access per cache")

    # ---- 3. the snoop filter, the tracker and the work table together
    ct = trk[c.cur_t]                    # the request the engine completes (C_*: freed, not yet filled)
    for a in ways:
        way = row.ways[a]
        owner = Cat(*(trk[i].valid & trk[i].has_way & (trk[i].way == a) & (trk[i].line == way.tag)
                      for i in range(T))).any()
        completing = st(*_FILLING) & ct.has_way & (ct.way == a) & (ct.line == way.tag)
        inv(~(way.valid & (way.entry.state == SFState.PLACEHOLDER)) | owner | completing,
            f"SF way {a}: a placeholder belongs to its request")
    for i in range(T):
        e = trk[i]
        mine = row.ways[e.way]
        inv(~(e.valid & e.has_way) | (mine.valid & (mine.tag == e.line)), f"trk{i}: its way holds its line")
        inv(~(e.valid & e.has_way & one_of(e.state, miss_states)) | (mine.entry.state == SFState.PLACEHOLDER),
            f"trk{i}: a miss's way is a placeholder")
        inv(~(e.valid & e.has_way & one_of(e.state, upgrade_states)) | (mine.entry.state == SFState.S),
            f"trk{i}: an upgrade's way is S")
        inv(~(e.valid & ~e.has_way) | ~in_filter(e.line), f"trk{i}: a request without a way: its line out of the filter")
    w0 = wk[0]
    mine = row.ways[w0.way]
    inv(~w0.valid | w0.snoop | w0.evict, "wk0: a snoop's or an eviction's")
    inv(~w0.valid | (mine.valid & (mine.tag == w0.line)) | (w0.evict & ~in_filter(w0.line)),
        "wk0: its way holds its line (an eviction's: or a snoop took the line)")
    inv(~(w0.valid & w0.evict) | ~requests_on(w0.line), "wk0: an eviction's line has no request")
    inv(~(w0.valid & w0.known) | (w0.snoop & ~w0.evict), "wk0: a kept entry is a snoop's work")
    inv(~(w0.valid & w0.snoop & ~w0.evict) |
        ~Cat(*(trk[i].valid & (trk[i].line == w0.line) & ~one_of(trk[i].op, _OWNERSHIP) for i in range(T))).any(),
        "wk0: a snoop's work shares its line only with an ownership request (an upgrade's)")
    inv(~(w0.valid & w0.known) | ~requests_on(w0.line), "wk0: a kept entry's line has no request")
    inv(~(w0.valid & w0.known) | (w0.sf == mine.entry), "wk0: the kept entry is the filter's")
    # a parked work (its line's GO came while its probe was out): a snoop's, on a line whose request
    # stalls snoops until its data (IS_D, IM_D, SM_D), not ready (the next H2D Rsp or Data readies it)
    stalls = Cat(*(trk[i].valid & (trk[i].line == w0.line) & one_of(trk[i].state, STALL_CODES)
                   for i in range(T))).any()
    inv(~w0.parked | (w0.valid & w0.snoop & ~w0.evict & ~w0.known & ~w0.ready & stalls),
        "wk0: a parked work is a snoop's, not ready, on a line that stalls snoops")

    # ---- 4. the waiting CPU accesses
    inv(c.q_len <= K, "q_len counts at most the caches")
    for i in range(K):
        inv(c.queue[i] < K, f"queue[{i}] names a cache")
        inv(~(i < c.q_len) | c.ops[c.queue[i]].valid, f"queue[{i}]: a taken slot")
        for j in range(i + 1, K):
            inv(~(j < c.q_len) | (c.queue[i] != c.queue[j]), f"queue[{i}], queue[{j}]: two caches")
    queued = [Cat(*((i < c.q_len) & (c.queue[i] == k) for i in range(K))).any() for k in range(K)]
    telling = st(*_FILLING, "C_DONE") & ct.cpu          # completed, its cache not told yet
    for k in range(K):
        issued = Cat(*(trk[i].valid & trk[i].cpu & (trk[i].cache == k) for i in range(T))).any()
        inv(~issued | (c.ops[k].valid & ~queued[k]), f"cache {k}: an issued access is not queued")
        inv(~(telling & (ct.cache == k)) | (c.ops[k].valid & ~queued[k] & ~issued),
            f"cache {k}: a completing access is its only one")

    # ---- 5. the engine's registers in the states that read them
    res, line_of_snp = dut.sf.result, c.snp.addr[:AW]
    taker = ((st("SNP_RES") & (res.p.line == line_of_snp)) | (st("S_RES") & (res.p.line == c.ops[c.cur_k].req.line)) |
             (st("W_RES") & (res.p.line == wk[c.cur_w].line)) | (st("C_RES") & (res.p.line == ct.line)))
    inv(~res.valid | taker | c.side_look, "a lookup result has the state that takes it")
    inv(~st("SNP_RES", "S_RES", "W_RES", "C_RES") | res.valid, "a state that takes a lookup result has one")
    inv(~c.side_look | ~st("SNP_RES", "S_RES", "W_RES", "C_RES"), "the side path's result is its own")
    inv(~res.valid | (dut.sf.read_data == row), "a lookup result reads the row as it is")
    reads_r = st(*_READS_R)
    hit_way = row.ways[c.r.hit_way]
    inv(~reads_r | (c.r.hit == in_filter(c.r.line)), "r.hit is the filter's")
    inv(~(reads_r & c.r.hit) | (hit_way.valid & (hit_way.tag == c.r.line) & (hit_way.entry == c.r.entry)),
        "r's way and entry are the filter's")
    inv(~reads_r | (c.r_th == requests_on(c.r.line)), "r_th is the tracker's hit")
    inv(~reads_r | (c.r_wh == (w0.valid & (w0.line == c.r.line))), "r_wh is the work table's hit")
    inv(~(reads_r & c.r_th) | (trk[c.r_t].valid & (trk[c.r_t].line == c.r.line)), "r_t is the hit entry")
    inv(~(st("SNP_SLOW", "SNP_QUERY", "SNP_QUERY_RSP", "W_GO") & c.r_th) | (c.r_tstate == trk[c.r_t].state),
        "r_tstate is the hit entry's state")
    answering = st(*_ANSWER)
    inv(~answering | ~c.a_maybe_m | ((c.a_state == STATE_CODE[C.D.E]) & ~c.r_th),
        "an answer that may find M is an E line's with no request")
    inv(~(answering & c.r_th) | (c.a_state == trk[c.r_t].state), "an answer on a request's line: its state")
    settled = st("ANSWER_SEND", "ANSWER_DATA")      # the verdict registered as the answer settled
    inv(~settled | (~c.a_maybe_m & (c.v_nxt == c.f_nxt) & (c.v_data == c.f_data) & (c.v_rsp == c.f_rsp) &
                    (c.v_none == perm_none(c.f_nxt)) & (c.v_changed == (c.f_nxt != c.a_state))),
        "a settled answer's verdict is the snoop table's on its state")
    inv(~(answering & ~c.a_fromwork) | (c.a_op == c.slow_snp.opcode), "a snoop's answer: its opcode")
    inv(~((answering & ~c.a_fromwork) | st("SNP_QUERY", "SNP_QUERY_RSP")) | ~c.r_wh,
        "a snoop answered or queried directly: no work on its line")
    inv(~(st("SNP_SLOW", "SNP_QUERY", "SNP_QUERY_RSP") | (answering & ~c.a_fromwork)) |
        (c.r.line == c.slow_snp.addr[:AW]), "a snoop's lookup is of its line")
    # a line's work (W_* and EV_*: the work at cur_w; its answer: ANSWER* with a_fromwork)
    cw = wk[c.cur_w]
    working = st("W_LOOK", "W_RES", "W_GO", "EV_RSP", "EV_ISSUE") | (answering & c.a_fromwork)
    inv(~working | (cw.valid & ~cw.ready & ~cw.parked), "the current work is valid, not ready, not parked")
    inv(~st("W_LOOK", "W_RES", "W_GO") | ~cw.snoop | ((c.a_uqid == cw.snp_uqid) & (c.a_op == cw.snp_op)),
        "a work with a snoop: its snoop loaded")
    inv(~(answering & c.a_fromwork) | (cw.snoop & (c.a_uqid == cw.snp_uqid) & (c.a_op == cw.snp_op) &
                                       (c.r.line == cw.line)), "a work's answer: its snoop and line")
    inv(~st("W_GO", "EV_RSP", "EV_ISSUE") | (c.r.line == cw.line), "a work's lookup is of its line")
    inv(~st("EV_RSP", "EV_ISSUE") | (~cw.snoop & cw.evict & c.r.hit), "a work's eviction: no snoop left, its line held")
    # an access served (S_RES .. S_REPLY): the waiting one at scan_i
    serving = st(*_SERVING)
    op = c.ops[c.cur_k].req
    inv(~serving | ((c.scan_i < c.q_len) & (c.queue[c.scan_i] == c.cur_k) & c.ops[c.cur_k].valid),
        "the access served is the one queued at scan_i")
    inv(~serving | st("S_RES") | ((c.r.line == op.line) & (c.cur.line == op.line) & (c.cur.kind == op.kind)),
        "the access served: its lookup and its latched request")
    inv(~st("S_SFILL", "S_SFILL_RSP", "S_SFILL_SET") | (c.reply_state == CacheState.M), "a store filled inside gets M")
    inv(~st("S_LFILL", "S_LFILL_RSP", "S_LFILL_SET") | (c.reply_state == CacheState.S), "a load filled inside gets S")
    inv(~st("S_EVICT", "S_EVICT_RSP", "S_EVICT_SET") |
        (c.r.hit & ~c.r_th & ~c.r_wh & (c.r.entry.presence >> c.cur_k)[0] & (c.cur.kind == CpuKind.EVICT) &
         (op.kind == CpuKind.EVICT)), "an eviction's copy taken: its line held by its cache, nothing else on it")
    inv(~st("S_LFILL", "S_LFILL_RSP", "S_LFILL_SET") |
        ((op.kind == CpuKind.LOAD) & c.r.hit & (c.r.entry.state != SFState.PLACEHOLDER) & ~c.r_th & ~c.r_wh),
        "a load filled inside: its line held, nothing else on it")
    inv(~st("S_SFILL", "S_SFILL_RSP", "S_SFILL_SET") |
        ((op.kind == CpuKind.STORE) & c.r.hit & (c.r.entry.state == SFState.E) & ~c.r_th & ~c.r_wh),
        "a store filled inside: its line in E, nothing else on it")
    senders = {s for (s, _), (_, send) in C.RESPONSE_TABLE.items() if send}     # states a GO can pull data from
    pulling_ops = sorted({o for o, s in pairs if s in senders}, key=lambda o: o.value)
    inv(~st("RSP_DATA", "ADVANCE") | (ct.valid & one_of(ct.op, pulling_ops)),
        "a pulled write's request is in use until it completes, and sends data")
    # a completion (C_* after advance freed the request)
    inv(~telling | ~ct.valid, "a completing request is freed")
    inv(~telling | ~requests_on(ct.line), "no request on a completing request's line")
    inv(~telling | ~(w0.valid & w0.known & (w0.line == ct.line)), "no kept entry on a completing request's line")
    filling = st(*_FILLING)
    fill_way = row.ways[ct.way]
    inv(~filling | (one_of(ct.op, _READS) & ct.has_way & ct.cpu & (ct.store == one_of(ct.op, _OWNERSHIP)) &
                    one_of(ct.state, (STATE_CODE[C.D.S], STATE_CODE[C.D.E]))),
        "a completing fill: a read or ownership request, granted S or E")
    inv(~filling | (fill_way.valid & (fill_way.tag == ct.line) &
                    one_of(fill_way.entry.state, (SFState.PLACEHOLDER, SFState.S))),
        "a completing fill: its way holds its line, not filled yet")
    inv(~st("C_RES", "C_INV_RSP", "C_FILL2") | ct.store, "only a store's fill looks its line up")
    inv(~st("C_FILL", "C_INV_RSP", "C_FILL2") | ~ct.store | ((c.r.line == ct.line) & c.r.hit & (c.r.hit_way == ct.way)),
        "a store's fill: its lookup")
    inv(~st("C_INV_RSP", "C_FILL2") | (ct.state == STATE_CODE[C.D.E]), "only a store granted E invalidates others")

    # ---- 6. probes (one work entry, one coalescer group of one line, no window: a valid group is a
    # message offered)
    msgs, queued_probe = dut.coal.messages, c.queued_probe
    in_queue = (c.probe_q.level != 0) & (queued_probe.line == w0.line)
    in_coalescer = msgs.valid & (msgs.p.block == w0.line) & msgs.p.lines[0]
    handing_on = st("S_PROBE") & (c.bi_line == w0.line)        # a back-invalidation's, in S_PROBE
    waiting = w0.valid & ~w0.ready & ~working & ~w0.parked
    inv(~waiting | ((in_queue.as_unsigned() + in_coalescer.as_unsigned() + handing_on.as_unsigned()) == 1),
        "a work waiting for its probe has one")
    inv(~st("S_PROBE") | (waiting & (c.bi_line == w0.line) & w0.evict & ~w0.snoop), "S_PROBE hands on its work's probe")
    inv((c.probe_q.level == 0) | (waiting & (queued_probe.line == w0.line)), "a queued probe is a waiting work's")
    inv(~msgs.valid | (waiting & (msgs.p.block == w0.line) & msgs.p.lines[0]), "a coalescer message is a waiting work's")

    # ---- 7. the snoops the DCOH holds (past SNP_RES every one has a legal opcode: SNP_RES drops the
    # others, RESERVED_SNOOP, whatever the host sends)
    snooping = st("SNP_SLOW", "SNP_QUERY", "SNP_QUERY_RSP")
    inv(~c.replay | ~(st("SNP_RES") | snooping | (answering & ~c.a_fromwork)), "a held snoop is not under way")
    inv(~(w0.valid & w0.snoop) | one_of(w0.snp_op, _SNOOPS), "wk0: a snoop opcode")
    inv(~answering | one_of(c.a_op, _SNOOPS), "an answer: a snoop opcode")
    inv(~(snooping | c.replay) | one_of(c.slow_snp.opcode, _SNOOPS), "slow_snp: a snoop opcode")
    if pending is None:
        return count[0]

    def holds(line, uqid):
        if line is None:                 # the side path's response register keeps no line
            return Cat(*(pending[l] & (uqids[l] == uqid) for l in range(len(pending)))).any()
        return Cat(*((line == l) & pending[l] & (uqids[l] == uqid) for l in range(len(pending)))).any()
    for l in range(len(pending)):
        for l2 in range(l + 1, len(pending)):
            inv(~(pending[l] & pending[l2] & (uqids[l] == uqids[l2])), f"lines {l} and {l2}: two pending UQIDs")
    answered = st("ANSWER_DATA") & c.a_fromwork                 # its response has gone, its data not yet
    holders = [("snp", st("SNP_RES"), line_of_snp, c.snp.uqid),
               ("slow_snp", snooping | c.replay, c.slow_snp.addr[:AW], c.slow_snp.uqid),
               ("the answer", st("ANSWER", "ANSWER_RSP", "ANSWER_SEND") & ~c.a_fromwork, c.r.line, c.a_uqid),
               ("wk0", w0.valid & w0.snoop & ~answered, w0.line, w0.snp_uqid),
               ("the side path", c.side_rsp, None, c.side_rsp_uqid)]
    for name, live, line, uqid in holders:
        inv(~live | holds(line, uqid), f"{name} holds a pending snoop")
    for i, (a, live_a, _, uqid_a) in enumerate(holders):
        for b, live_b, _, uqid_b in holders[i + 1:]:
            inv(~(live_a & live_b & (uqid_a == uqid_b)), f"{a} and {b} do not hold one snoop")
    for l in range(len(pending)):
        held = Cat(*(live & (uqid == uqids[l]) & (1 if line is None else (line == l))
                     for name, live, line, uqid in holders)).any()
        inv(~pending[l] | held, f"line {l}: its pending snoop is held")
    return count[0]


def add_cache_invariants(m, dut, st, cmd_pending, rsp_excl):
    """``Assert`` how the internal caches' copies stand against the DCOH (for formal/dcoh_swmr_harness.py's
    abstract caches: ``st[k][l]``, cache k's MESI state of line l; ``cmd_pending``, a command taken and
    not yet answered; ``rsp_excl``, the answer's ``excl`` bit, worked out from the copies as the command was
    taken).  With :func:`add_invariants` they make SWMR over the caches inductive.  In four groups:

    1. every copy against the snoop filter: a copy's cache has its presence bit in its line's entry, and an
       E or M copy sits under an E entry whose only presence bit is its own (inclusion, and SWMR itself);
    2. the command port: a command is unanswered exactly in the states that wait for its answer, and a
       query's answer (and, in SNP_SLOW, its registered result) says E/M exactly when a copy is;
    3. what each state past a command leaves the copies, as the harness applies a command at its
       handshake: a store's fill after its INV (no other copy), an answer after its command (no copy where
       the verdict leaves none, no E/M where it leaves S), an eviction's copy taken, a load's internal
       fill (no peer E/M), a store's internal fill (no peer copy), a back-invalidation's eviction (no copy);
    4. what ``cpu_rsp`` offers: while it waits (S_REPLY, C_DONE) the filter already has the cache's bit
       (and, for E/M, an E entry with that bit alone); E/M only while no other cache has a copy, S only
       while none has E/M.

    Returns the number of invariants."""
    c, K, LINES = dut.debug, dut.caches, 2 ** dut.addr_width
    if len(st) != K or any(len(s) != LINES for s in st):
        raise ValueError(f"add_cache_invariants: st needs {K} caches of {LINES} lines")
    eng, row, count = c.engine, dut.sf.rows[0], [0]
    ways = range(dut.sf_ways)

    def state(*names):
        return Cat(*(eng.ongoing(n) for n in names)).any()

    inv = _asserter(m, "inv_cache_", "cache invariant", count)

    def rw(s):
        return (s == CacheState.E) | (s == CacheState.M)

    def held_at(k, line):               # cache k holds a copy of ``line`` (a signal)
        return Cat(*((line == l) & (st[k][l] != CacheState.I) for l in range(LINES))).any()

    def rw_at(k, line):                 # ... in E or M
        return Cat(*((line == l) & rw(st[k][l]) for l in range(LINES))).any()

    def filter_has(l, k):               # line l's entry has cache k's presence bit
        return Cat(*(row.ways[x].valid & (row.ways[x].tag == l) & row.ways[x].entry.presence[k]
                     for x in ways)).any()

    def alone_under_e(l, k):            # line l's entry is E with cache k's bit alone
        return Cat(*(row.ways[x].valid & (row.ways[x].tag == l) & (row.ways[x].entry.state == SFState.E) &
                     (row.ways[x].entry.presence == (1 << k)) for x in ways)).any()

    # ---- 1. the copies against the snoop filter
    for l in range(LINES):
        for k in range(K):
            inv((st[k][l] == CacheState.I) | filter_has(l, k), f"cache {k} line {l}: a copy is in the filter with its bit")
            inv(~rw(st[k][l]) | alone_under_e(l, k), f"cache {k} line {l}: E/M only under an E entry with it alone")

    # ---- 2. the command port
    inv(cmd_pending == state(*c.cmd_rsp_states), "a command is unanswered exactly in the states that wait for it")
    r, presence = c.r, c.r.entry.presence
    excl_now = Cat(*(presence[k] & rw_at(k, r.line) for k in range(K))).any()
    inv(~state("SNP_QUERY_RSP") | (rsp_excl == excl_now), "a query's answer: excl is the copies'")
    inv(~(state("SNP_SLOW") & c.q_done) | (c.q_excl == excl_now), "a query's result: excl is the copies'")

    # ---- 3. what each state past a command leaves the copies
    def leaves(nxt, k):                 # cache k's copy of r.line is one a snoop's verdict ``nxt`` leaves
        return ((~perm_none(nxt) | ~held_at(k, r.line)) &
                ((nxt != STATE_CODE[C.D.S]) | ~rw_at(k, r.line)))
    ct = c.trk[c.cur_t]
    for k in range(K):
        mine = c.cur_k == k
        inv(~(state("C_INV_RSP", "C_FILL2") & (ct.cache != k)) | ~held_at(k, ct.line),
            f"a store's fill after its INV: cache {k}, not the filling one, has no copy")
        inv(~state("ANSWER_RSP") | leaves(c.a_nxt, k), f"ANSWER_RSP: cache {k} has what the command left it")
        inv(~state("ANSWER_SEND", "ANSWER_DATA") | leaves(c.v_nxt, k),
            f"a settled answer: cache {k} has what the verdict leaves it")
        inv(~(state("S_EVICT_RSP", "S_EVICT_SET") & mine) | ~held_at(k, r.line),
            f"an eviction's copy taken: cache {k}, the evicting one, has none")
        inv(~(state("S_LFILL_RSP", "S_LFILL_SET") & ~mine & presence[k]) | ~rw_at(k, r.line),
            f"a load's internal fill: peer cache {k} has no E/M")
        inv(~(state("S_SFILL_RSP", "S_SFILL_SET") & ~mine) | ~held_at(k, r.line),
            f"a store's internal fill: peer cache {k} has no copy")
        inv(~state("EV_RSP", "EV_ISSUE") | ~held_at(k, r.line), f"a back-invalidation's eviction: cache {k} has no copy")

    # ---- 4. what cpu_rsp offers
    rsp = dut.cpu_rsp
    waiting = state("S_REPLY", "C_DONE") & rsp.valid
    for l in range(LINES):
        for k in range(K):
            here = rsp.valid & (rsp.p.cache == k) & (rsp.p.line == l)
            inv(~(waiting & here & (rsp.p.state != CacheState.I)) | filter_has(l, k),
                f"a waiting cpu_rsp to cache {k} line {l}: the filter has its bit")
            inv(~(waiting & here & rw(rsp.p.state)) | alone_under_e(l, k),
                f"a waiting cpu_rsp of E/M to cache {k} line {l}: an E entry with its bit alone")
            for b in range(K):
                if b != k:
                    inv(~(here & rw(rsp.p.state)) | (st[b][l] == CacheState.I),
                        f"cpu_rsp of E/M to cache {k} line {l}: cache {b} has no copy")
                    inv(~(here & (rsp.p.state == CacheState.S)) | ~rw(st[b][l]),
                        f"cpu_rsp of S to cache {k} line {l}: cache {b} has no E/M")
    return count[0]
