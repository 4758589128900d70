"""formal/proof_sf_pipe_forwarding.py for ``PipelinedSnoopFilter(stall=False)``, the filter as the
pipelined DCOH uses it (every result taken in the cycle it is offered, assumed)."""

from formal.proof_sf_pipe_forwarding import proof

PROOF = proof("sf_pipe_forwarding_nostall", stall=False)
