"""The project's one seed knob: ``SEED`` in the environment (``make sim SEED=5``, ``SEED=5 pytest ...``).

Every seeded testbench and test reads it through :func:`env_seed`, and prints it in its failure messages,
so that one variable reproduces any random run."""

import os

__all__ = ["env_seed"]


def env_seed(default=1):
    """``SEED`` from the environment as an int (decimal or 0x...), else ``default``; a value that is not an
    integer is an error naming it."""
    text = os.environ.get("SEED", "").strip()
    if not text:
        return default
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"SEED={text!r} is not an integer") from None
