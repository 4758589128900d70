"""Seeded random message mixes and the ``make vectors`` test vectors (one JSON line per mix).
"""

import json
import random
from pathlib import Path

from cxl.credits import CREDIT_CLASSES, Credits
from cxl.flit import DATA_CHANNELS, Direction
from cxl.messages import CODECS, LINE_BYTES

from .crc import frame
from .messages import make_msg, msg_to_json
from .packer import Packer, pack

__all__ = ["random_msg", "random_mix", "write_vectors", "RandomPolicy"]


def random_msg(rng, chan):
    """A random valid message; field ranges come from the codec (reserved fields 0)."""
    fields = {}
    for name, _, width, enum_cls in CODECS[chan].fields:
        if name == "valid" or name.startswith("rsvd"):
            continue
        fields[name] = rng.choice(list(enum_cls)) if enum_cls is not None else rng.getrandbits(width)
    data = rng.randbytes(LINE_BYTES) if chan in DATA_CHANNELS else None
    return make_msg(chan, fields, data)


class RandomPolicy(Packer):
    """Another legal transmitter, for the receivers' tests: random slot formats among the legal ones, and
    data not always first (it obeys only the rules that force G0: rollover, the next data slot after a
    Data Header).  A receiver must decode any legal stream, not just the reference packer's choices; this
    reaches formats the reference policy never picks (upstream G2 and G3, empty slots, late chunks)."""

    def __init__(self, direction, rng):
        super().__init__(direction)
        self.rng = rng

    def choose_slot0(self, counts, priority):
        return self.rng.choice(self.legal(self.h_formats, counts))

    def choose_g(self, slot, rollover, counts):
        if rollover or (self.chunks and self.rng.random() < 0.5):
            return self.g0
        return self.rng.choice(self.legal(self.g_formats, counts))


def random_mix(rng):
    """One random mix: (direction, messages, credits, acks).  Shapes vary so that the vectors cover
    empty mixes (LLCRD only), single-channel bursts (all-data flits, per-flit maxima) and mixtures."""
    direction = rng.choice(list(Direction))
    chans = direction.channels
    shape = rng.randrange(4)
    if shape == 0:                                  # even mixture
        weights = (1, 1, 1)
    elif shape == 1:                                # data heavy: long all-data runs
        weights = (1, 1, 4)
    elif shape == 2:                                # one channel only
        only = rng.choice(chans)
        weights = tuple(int(c is only) for c in chans)
    else:                                           # request/response heavy
        weights = (3, 3, 1)
    n = rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 40)))
    messages = [random_msg(rng, ch) for ch in rng.choices(chans, weights, k=n)]
    credits = Credits(*(rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 300))) for _ in CREDIT_CLASSES))
    acks = rng.choice((0, rng.randrange(1, 8), rng.randrange(8, 600)))
    return direction, messages, credits, acks


def write_vectors(path, count=1000, seed=1):
    """``count`` seeded random mixes, one JSON line each.  Besides the ``messages`` and ``flits`` the
    issue asks for, a line names its ``direction`` (the slot formats depend on it) and the ``credits``
    and ``acks`` handed to the packer before packing (they ride in the headers and in LLCRDs)."""
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for _ in range(count):
            direction, messages, credits, acks = random_mix(rng)
            flits = pack(direction, messages, credits, acks)
            line = {"direction": direction.value, "credits": credits._asdict(), "acks": acks,
                    "messages": [msg_to_json(m) for m in messages],
                    "flits": [frame(fl).hex() for fl in flits]}
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path
