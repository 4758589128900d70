"""Formal proofs (SymbiYosys) of the RTL blocks in hdl/: one module per proof (``proof_*.py``).

``python -m formal.gen`` writes RTLIL + .sby files into build/formal/; ``python -m formal.run`` runs
them and writes build/formal/summary.json and docs/formal.md.  See docs/formal.md.
"""
