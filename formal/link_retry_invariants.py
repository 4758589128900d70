"""Invariants of two link ends' retry state that make formal/link_retry_harness.py's property inductive.

The property (each good flit is the next one its sender made; acks never above the flits outstanding)
is not inductive alone: from an unreachable state (a receiver whose Eseq names a flit its sender never
made, a RETRY.Ack in flight whose replay lands in the middle of what the receiver has, a retry buffer
whose entries do not hold the flits behind ``wr_seq``) a few good-looking steps break it.
:func:`add_invariants` states what a reachable state looks like, for each direction (a *sender* end
``s`` and the *receiver* end ``r`` of its flits), with tags (3 bits at depth 4: sequence number and
lap) compared modulo ``2 * depth``:

1. the sender's retry buffer: the ``occ`` entries behind ``wr_seq`` (and, while a replay is pending or
   running, every entry from the replay pointer on) hold the tags ``made - 1``, ``made - 2``, ...; the
   read register holds the entry at its index, which is the replay pointer unless a RETRY.Ack is due;
2. the receiver's counters against its checker: ``ret_seq`` is the expected tag's sequence number, the
   unpacker's registers hold the expected flit and the one after it, ``next_seq`` (NORMAL) and ``eseq``
   (WAIT) name the flit after those, a discarded flit only behind a rule error;
3. acks: the sender's ``occ`` is the flits its peer has not retired plus every ack on its way back
   (the peer's counter, its packer, and the flits carrying them that the sender has not retired), and
   every copy of a flit in flight carries the acks its buffer entry holds;
4. the stream: what is on its way to the receiver, in order (its pre-check stage, the sender's
   output register, the RETRY.Ack the sender owes, then the replay and the new flits).  Its shape:
   after a RETRY.Ack the flits run on from the Ack's start, one by one, up to the sender's next flit.
   What the receiver's rules will do with it, walked item by item as they will see it when nothing
   is corrupted on the way (a corruption or a rule error only sends the receiver to WAIT, where
   group 5 covers it): each flit it will forward is the next one, and each RETRY.Ack it will place
   (a late one while in NORMAL, the resuming one in WAIT) starts the replay where it places it;
5. RETRY.Reqs and RETRY.Acks and their *floors*.  A Req carries, as ghost fields the receiver never
   reads, its floor F (the flits its sender's receiver had retired when it sent the Req) and its
   mark (the flits that end had made); the Ack that answers it inherits F.  The acks that could move
   the peer's window beyond F travel behind the Req, so when the Req arrives its 2-bit Eseq names
   exactly one flit of the peer's window, the one at most 2 above F.  The receiver sends Reqs only in
   WAIT, so whenever it is in NORMAL it resumed at or above the floor of every Req and Ack in flight,
   and its position stays within 3 flits above each floor: a late Ack whose start is behind the
   receiver's position is then placed right by its Eseq, and one whose start is ahead of it (the
   answer to a Req sent before a rule error moved the receiver back) is never taken for one behind
   it.  This is where the stale-Ack bug sat (docs/link_layer.md, "A stale RETRY.Ack"): with the
   receiver ignoring such an Ack, as before the fix, the induction fails;
6. only for a harness without rule errors (``rule_errors=False``): the Eseqs a receiver asks for never
   go back, so the Reqs and Acks in flight name flits in stream order, none above the receiver's
   position, and in NORMAL every one names its resume point (formal/proof_link_retry_no_rule_errors_unbounded.py).

Found as k-induction is used: run it, read the counterexample to induction (an unreachable first
state), state why that state cannot happen, repeat (seven rounds).  Each invariant is an ``Assert``
also driven onto a signal ``linv_<name>`` (1 while it holds), so a trace shows which one a
counterexample breaks.  The base case of the k-induction checks every one of
them from reset, so a wrong one fails there instead of weakening the proof.  Written for
:data:`formal.link_retry_harness.PARAMS` (depth 4: at most 3 flits outstanding, which several
window arguments use); :func:`add_invariants` rejects another depth.
"""

import re

from amaranth.hdl import Assert, Cat, Const, Mux, Signal

__all__ = ["add_invariants"]


def add_invariants(m, pair):
    """``Assert`` the invariants (module docstring) on ``pair``, a
    :class:`formal.link_retry_harness.LinkRetryPair` being elaborated.  Returns their number."""
    Kind = pair.Kind
    D = pair.params["depth"]
    if D != 4:
        raise ValueError(f"add_invariants: depth={D}; these invariants are written for depth 4 "
                         "(formal.link_retry_harness.PARAMS)")
    TB, SB = pair.tag_bits, (D - 1).bit_length()
    count = [0]

    def inv(cond, name):
        sig = Signal(name="linv_" + re.sub(r"\W+", "_", name).strip("_"))
        m.d.comb += [sig.eq(cond), Assert(sig, f"invariant: {name}")]
        count[0] += 1

    def t(v):           # a tag, modulo 2 * depth
        return v[:TB]

    def signed_within(v, k):    # -k <= v <= k for a tag difference v (modulo 2 * depth)
        return t(v + k) <= 2 * k

    for sn, rn in (("a", "b"), ("b", "a")):
        s, r = pair.ends[sn].debug, pair.ends[rn].debug
        P = f"{sn}->{rn} "
        M, E = pair.made[sn], pair.expected[rn]
        W, occ, rp = s["wr_seq"], s["occ"], s["rp"]
        replay_on, ack_pending = s["replay_on"], s["ack_pending"]
        buf_lap, buf_acks = pair.buf_lap[sn], pair.buf_acks[sn]
        rd_idx, rd_lap, rd_acks = pair.rd[sn]
        out, pre, hold, stat = pair.out[sn], pair.pre[rn], pair.hold[rn], pair.stat[rn]
        good, bad, done = pair.good[rn], pair.bad[rn], pair.done[rn]
        stop_s, stop_r = pair.stopped[sn], pair.stopped[rn]
        dist_rp = (W - rp)[:SB]
        ov = pair.ends[sn].out_valid

        # -------------------------------------------------------------- 1. the sender's buffer
        inv(occ <= D - 1, P + "occ below depth")
        for i in range(D):
            d = (W - i)[:SB]
            held = (d != 0) & ((d <= occ) | ((ack_pending | replay_on) & (d <= dist_rp)))
            inv(~held | (Cat(Const(i, SB), buf_lap[i]) == t(M - d)), P + f"buffer entry {i} holds its tag")
        inv((rd_lap == buf_lap[rd_idx]) & (rd_acks == buf_acks[rd_idx]), P + "read register holds its entry")
        # (once stopped nothing is sent, and the read address no longer follows the pointer)
        inv(stop_s | ack_pending | (rd_idx == rp), P + "read register at the replay pointer")
        inv(~replay_on | ack_pending | (rp != W), P + "replay on: pointer behind wr_seq")

        # -------------------------------------------------------------- 2. the receiver's counters
        Q = t(E + good + hold.valid)
        inv(r["inflight"] == hold.valid + done, P + "inflight counts the unpacker's flits")
        inv(r["ret_seq"] == E[:SB], P + "ret_seq is the expected flit's")
        inv(~(good | bad) | done, P + "a status is a retire")
        inv(~done | good | bad | r["waiting"], P + "a discarded flit only in WAIT")
        inv(r["waiting"] | bad | (r["next_seq"] == Q[:SB]), P + "NORMAL: next_seq after the unpacker's flits")
        inv(~r["waiting"] | bad | (r["eseq"] == Q[:SB]), P + "WAIT: eseq after the unpacker's flits")
        inv(~hold.valid | bad | (hold.tag == t(E + good)), P + "unpacker input holds the flit after the status")
        inv(~good | (stat.tag == E), P + "a good status is the expected flit")
        inv(~r["waiting"] | (r["skip"] == 0), P + "no skip in WAIT")
        inv(r["skip"] <= D - 1, P + "skip below depth")
        inv(r["since_resume"] <= D, P + "since_resume saturates at depth")
        inv(~r["req_pending"] | r["waiting"], P + "a Req due only in WAIT")
        inv(t(M - E) <= D - 1, P + "at most depth-1 flits not retired")
        inv(t(M - E) >= good + hold.valid, P + "the unpacker's flits were made")
        inv(t(M - E) <= occ, P + "flits not retired are outstanding")

        # -------------------------------------------------------------- the flits on the wire
        inv(out.kind != 3, P + "output register: a kind")
        inv((out.kind != Kind.ACK) | (out.tag[:SB] == out.eseq), P + "output register: an Ack's Eseq is its start's")
        inv(~pre.crc_ok | (pre.kind != Kind.ACK) | (pre.tag[:SB] == pre.eseq),
            P + "pre-check stage: an Ack's Eseq is its start's")
        inv(~ack_pending | (pair.ends[sn].ack_eseq == rp), P + "the Ack due replays from its Eseq")
        # how far behind ``made`` a flit (or an Ack's start) on the wire can be: a sender's window is
        # depth - 1 flits, and one new flit can follow the one in the peer's pre-check stage
        inv(~ov | (out.kind != Kind.DATA) | ((t(M - out.tag) >= 1) & (t(M - out.tag) <= D - 1)),
            P + "output register: a flit made, within the window")
        inv(~ov | (out.kind != Kind.ACK) | (t(M - out.tag) <= D - 1), P + "output register: an Ack's start within the window")
        inv(~pre.valid | ~pre.crc_ok | (pre.kind != Kind.DATA) | ((t(M - pre.tag) >= 1) & (t(M - pre.tag) <= D)),
            P + "pre-check stage: a flit made, within the window")
        inv(~pre.valid | ~pre.crc_ok | (pre.kind != Kind.ACK) | (t(M - pre.tag) <= D),
            P + "pre-check stage: an Ack's start within the window")
        inv(~pre.crc_ok | (pre.kind != 3), P + "pre-check stage: a good flit's kind")

        # -------------------------------------------------------------- 3. acks
        rs = pair.ends[rn].debug
        M_r, E_s = pair.made[rn], pair.expected[sn]
        back = sum(Mux(k < t(M_r - E_s), pair.buf_acks[rn][(E_s + k)[:SB]], 0) for k in range(D))
        inv(stop_s | (occ == t(M - E) + rs["ack_cnt"] + pair.pending[rn] + back),
            P + "occ: flits not retired plus acks on their way back")

        def in_window(tag):
            return t(tag - E) < t(M - E)

        def carries_its_acks(acks, tag):
            return ~in_window(tag) | (acks == buf_acks[tag[:SB]])
        inv(~hold.valid | bad | carries_its_acks(hold.acks, hold.tag), P + "unpacker input: its entry's acks")
        inv(~good | (stat.acks == buf_acks[E[:SB]]), P + "good status: its entry's acks")
        inv(~pre.valid | ~pre.crc_ok | (pre.kind != Kind.DATA) | carries_its_acks(pre.acks, pre.tag),
            P + "pre-check stage: its entry's acks")
        inv(~ov | (out.kind != Kind.DATA) | carries_its_acks(out.acks, out.tag),
            P + "output register: its entry's acks")

        # -------------------------------------------------------------- 4. the stream
        # what the sender puts on the wire after what is on it: the RETRY.Ack it owes, whose replay
        # starts at ``ack_start``, then from ``head`` on the flits it replays and the new ones
        ack_start = pair.ack_start[sn]
        head = Mux(ack_pending | (replay_on & (rp != W)), ack_start, M)
        # The receiver's view, walked along the stream as its rules will see it when nothing is
        # corrupted on the way and no rule error comes (a corruption or a rule error sends it to WAIT,
        # where the floors of group 5 keep every Ack it may resume on right).
        norm = ~r["waiting"] & ~bad
        nf = Mux(bad, E, Q)
        skip = Mux(bad, 0, r["skip"])
        sr = r["since_resume"]
        ew = Mux(bad, E, Q)
        state = dict(norm=norm, nf=nf, skip=skip, sr=sr, ew=ew)

        def step_data(st, valid, crc_ok, tag, name):
            live = valid & crc_ok
            inv(~(live & st["norm"]) | (tag == t(st["nf"] - st["skip"])), P + f"{name}: the flit expected")
            fwd = live & st["norm"] & (st["skip"] == 0)
            return dict(norm=st["norm"] & ~(valid & ~crc_ok),
                        nf=Mux(fwd, t(st["nf"] + 1), st["nf"]),
                        skip=Mux(live & st["norm"] & (st["skip"] != 0), st["skip"] - 1, st["skip"]),
                        sr=Mux(fwd, Mux(st["sr"] == D, D, st["sr"] + 1), st["sr"]),
                        ew=Mux(valid & ~crc_ok & st["norm"], st["nf"], st["ew"]))

        def step_ack(st, valid, crc_ok, start, name):
            live = valid & crc_ok
            a = start[:SB]
            diff = (st["nf"][:SB] - a)[:SB]
            late_ok = diff <= st["sr"]
            match = a == st["ew"][:SB]
            inv(~live | signed_within(start - E, D - 1), P + f"{name}: Ack's start near the expected flit")
            inv(~live | signed_within(start - st["nf"], D - 1), P + f"{name}: Ack's start near the position")
            inv(~(live & st["norm"] & late_ok) | (start == t(st["nf"] - diff)), P + f"{name}: a late Ack placed right")
            inv(~(live & ~st["norm"] & match) | (start == st["ew"]), P + f"{name}: a resuming Ack at eseq")
            resume = live & ~st["norm"] & match
            to_wait = (valid & ~crc_ok & st["norm"]) | (live & st["norm"] & ~late_ok)
            return dict(norm=(st["norm"] & ~to_wait) | resume,
                        nf=Mux(resume, st["ew"], st["nf"]),
                        skip=Mux(resume, 0, Mux(live & st["norm"] & late_ok, diff, st["skip"])),
                        sr=Mux(resume, 0, st["sr"]),
                        ew=Mux(to_wait, st["nf"], st["ew"]))

        def step_item(st, valid, crc_ok, kind, tag, name):
            a = step_data(st, valid & (kind == Kind.DATA), crc_ok, tag, name)
            b = step_ack(st, valid & (kind == Kind.ACK), crc_ok, tag, name)
            # a RETRY.Req means nothing to this direction's receiver (unless corrupted)
            corrupt_wait = valid & ~crc_ok & st["norm"]
            c = dict(st, norm=st["norm"] & ~corrupt_wait, ew=Mux(corrupt_wait, st["nf"], st["ew"]))
            return {k: Mux(crc_ok & (kind == Kind.DATA), a[k], Mux(crc_ok & (kind == Kind.ACK), b[k], c[k]))
                    for k in st}

        # The stream's own shape, whatever the receiver does with it: after a RETRY.Ack the flits run on
        # from its start, one by one, up to the sender's next flit (a corrupted flit hides which).
        known, nd = Const(0), Const(0, TB)
        for valid, crc_ok, kind, tag, name in (
                (pre.valid, pre.crc_ok, pre.kind, pre.tag, "pre-check stage"),
                (~stop_s & ov, 1, out.kind, out.tag, "output register"),
                (~stop_s & ack_pending, 1, Const(Kind.ACK, 2), ack_start, "Ack due")):
            is_data = valid & crc_ok & (kind == Kind.DATA)
            is_ack = valid & crc_ok & (kind == Kind.ACK)
            inv(~(is_data & known) | (tag == nd), P + f"{name}: the flit after the one ahead of it")
            known, nd = (Mux(valid & ~crc_ok, 0, known | is_data | is_ack),
                         Mux(is_data, t(tag + 1), Mux(is_ack, tag, nd)))
        inv(stop_s | ~known | (head == nd), P + "the sender's next flit after the stream")

        live_r = ~stop_r
        st = step_item(state, live_r & pre.valid, pre.crc_ok, pre.kind, pre.tag, "pre-check stage")
        st = step_item(st, live_r & ~stop_s & ov, 1, out.kind, out.tag, "output register")
        st = step_ack(st, live_r & ~stop_s & ack_pending, 1, ack_start, "Ack due")
        inv(~(live_r & ~stop_s & st["norm"]) | (head == t(st["nf"] - st["skip"])), P + "the sender's next flit")

        # -------------------------------------------------------------- 5. floors of Reqs and Acks
        # A RETRY.Req carries (ghost) the flits its sender's receiver had retired when it sent it (its
        # floor F) and the flits that end had made (its mark); the RETRY.Ack that answers it inherits F.
        # The peer's acks cannot have passed F when the Req arrives (they travel behind it), so the
        # Req's Eseq names one flit in the window; and the receiver, which sends Reqs only in WAIT,
        # resumed at or after F, which is what lets a late Ack be placed by its 2-bit Eseq.
        ov_r = pair.ends[rn].out_valid
        spre = pair.pre[sn]
        gs, hs = pair.good[sn], pair.hold[sn]

        def off(x, f):
            return t(x - f)

        def floor_rules(name, valid, f):
            inv(~valid | (off(E, f) <= D - 1), P + f"{name}: floor not above the flits retired")
            inv(~valid | (off(nf, f) <= D - 1), P + f"{name}: the receiver within the window above its floor")
            inv(~(valid & norm) | ((r["since_resume"] < D) & (off(nf, f) >= r["since_resume"])),
                P + f"{name}: the receiver resumed at or above its floor")

        reqs_in_flight = []     # (name, valid, the flit its Eseq names), oldest first
        for name, valid, x, f, mk in (
                ("Req in the sender's pre-check stage", spre.valid & spre.crc_ok & (spre.kind == Kind.REQ),
                 spre.eseq, spre.floor, spre.mark),
                ("Req in the receiver's output register", ~stop_r & ov_r & (pair.out[rn].kind == Kind.REQ),
                 pair.out[rn].eseq, pair.out[rn].floor, pair.out[rn].mark),
                ("Req due", ~stop_r & r["req_pending"], r["eseq"], E, M_r)):
            floor_rules(name, valid, f)
            g = t(f + (x - f[:SB])[:SB])
            reqs_in_flight.append((name, valid, g))
            inv(~valid | ((x - f[:SB])[:SB] <= 2), P + f"{name}: Eseq at most 2 above its floor")
            n_ahead = t(mk - E_s)
            inv(~valid | ((n_ahead <= t(M_r - E_s)) & (n_ahead >= gs + hs.valid)),
                P + f"{name}: the peer has not taken flits made after it")
            acked_then = t(M - occ + sum(Mux(k < n_ahead, pair.buf_acks[rn][(E_s + k)[:SB]], 0) for k in range(D)))
            inv(~valid | stop_s | (off(f, acked_then) <= D - 1), P + f"{name}: acks sent before it not above its floor")
            inv(~valid | stop_s | (t(M - g) <= occ), P + f"{name}: its Eseq names a flit in the window")
            inv(~valid | (off(M, f) <= D - 1), P + f"{name}: the peer's window above its floor")
        inv(~(ov_r & (pair.out[rn].kind == Kind.REQ) & spre.valid & spre.crc_ok & (spre.kind == Kind.DATA))
            | ((t(pair.out[rn].mark - spre.tag) >= 1) & (t(pair.out[rn].mark - spre.tag) <= D)),
            P + "a flit ahead of a Req was made before it")

        acks_in_flight = (
            ("Ack due", ~stop_s & ack_pending, ack_start, pair.ack_floor[sn]),
            ("Ack in the output register", ~stop_s & ov & (out.kind == Kind.ACK), out.tag, out.floor),
            ("Ack in the pre-check stage", pre.valid & pre.crc_ok & (pre.kind == Kind.ACK), pre.tag, pre.floor))
        for name, valid, a, f in acks_in_flight:
            floor_rules(name, valid, f)
            inv(~valid | (off(a, f) <= 2), P + f"{name}: its start at most 2 above its floor")
            if name != "Ack in the pre-check stage":    # the sender makes no flit while it holds the Ack
                inv(~valid | (off(M, f) <= D - 1), P + f"{name}: the sender's window above its floor")

        if not pair.rule_errors:
            # 6. Without rule errors a receiver's Eseq never moves back: each WAIT episode asks for a
            # flit at or above the last one's.  The Reqs and Acks on the way (oldest first: the Acks
            # reaching the receiver, the Ack owed, the Reqs reaching the sender, the Req due) then name
            # flits in order, none above the receiver's position, and in NORMAL every one of them is
            # of the episode it resumed from (the older ones went ahead of the Ack it resumed on), so
            # each names its resume point: a late Ack is always placed.
            items = [(name, valid, a) for name, valid, a, f in reversed(acks_in_flight)] + reqs_in_flight
            for name, valid, g in items:
                inv(~valid | (t(nf - g) <= D - 1), P + f"{name}: (no rule errors) not above the receiver")
                inv(~(valid & norm) | (g == t(nf - r["since_resume"])),
                    P + f"{name}: (no rule errors) at the receiver's resume point")
            for i, (name_i, valid_i, g_i) in enumerate(items):
                for name_j, valid_j, g_j in items[i + 1:]:
                    inv(~(valid_i & valid_j) | (t(g_j - g_i) <= D - 1),
                        P + f"(no rule errors) {name_i} not above {name_j}")

    return count[0]
