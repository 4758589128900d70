"""Write the RTLIL + .sby file of every formal proof into build/formal/ (``python -m formal.gen``)."""

import argparse
import importlib
import pkgutil
from pathlib import Path

from formal.common import OUT_DIR, write_proof

__all__ = ["all_proofs", "main"]


def all_proofs():
    """The PROOF of every formal/proof_*.py module, sorted by name (expected-FAIL variants last)."""
    pkg = Path(__file__).parent
    proofs = []
    for info in pkgutil.iter_modules([str(pkg)]):
        if info.name.startswith("proof_"):
            proofs.append(importlib.import_module(f"formal.{info.name}").PROOF)
    return sorted(proofs, key=lambda p: (p.expect != "PASS", p.name))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    args = ap.parse_args(argv)
    for proof in all_proofs():
        print(write_proof(proof, args.out))


if __name__ == "__main__":
    main()
