"""Where the packer's flits above the bound go, and how its policy does on random channel mixes.

Both studies run the golden cycle loop of bench/link_bench.py (:func:`bench.link_bench.wait_sweep`: two
golden packers, one per direction, every source offering a message per cycle while its packer queue has
room) and count what crossed the wire; docs/link_layer.md, "Choosing slot formats", quotes them.

``loss``: the mixed workload (``models.flit.MIXED``, ``--lines`` transactions) at each queue depth of
``--depths``.  Every flit of each direction is decoded with the golden receiver
(:func:`models.flit.json_form.decode_stream`) and counted as LLCRDs, data chunks (a G0 slot's, four per
all-data flit) and header slots (every other slot of a protocol flit), of which the empty ones carry no
message.  The bound (:func:`models.flit.fewest_flits`) needs ``bound`` flits, i.e. ``4 * bound - chunks``
header slots, so the flits above it are the LLCRDs, the empty header slots / 4 and the header slots with
messages above the bound's / 4 (``under_filled``: messages spread over more slots than they need).

``mixes``: ``--mix-count`` random mixes of the six channels, each channel 0, 32, 64, 128 or 256 messages
drawn in the order of ``hdl.link.ports.direction_channels`` (upstream, then downstream) with
``random.Random(--mix-seed)``; each mix runs at every depth of ``--depths``; the flits of both directions
are summed and set beside the bound.

Usage: ``python -m bench.packing_study [--study loss|mixes|both] [--wait 3] [--depths 4,8]``; JSON on
stdout.  The loop depends only on ``wait_sweep`` and the golden packer, so the same file run against
another checkout of the models (``PYTHONPATH`` at it) measures that checkout's policy.
"""

import argparse
import json
import random
import sys

from bench.link_bench import D2H, H2D, wait_sweep
from cxl.flit import DEFAULT_PACK_WAIT, Direction
from models.flit import MIXED, fewest_flits, random_msg
from models.flit.crc import frame
from models.flit.json_form import decode_stream

MIX_SIZES = (0, 32, 64, 128, 256)


def bound_flits(counts):
    """{direction: the fewest flits any legal transmitter needs} for a mix's message counts."""
    rng = random.Random(0)                      # fewest_flits counts messages per channel only
    out = {}
    for d in (Direction.UPSTREAM, Direction.DOWNSTREAM):
        msgs = [random_msg(rng, ch) for ch in d.channels for _ in range(counts.get(ch, 0))]
        out[d] = fewest_flits(d, msgs)
    return out


def wire_census(direction, flits):
    """LLCRDs, data chunks, header slots and empty header slots among one direction's flits."""
    n = {"flits": len(flits), "llcrds": 0, "chunks": 0, "header_slots": 0, "empty_slots": 0}
    for obj in decode_stream(direction, [frame(f) for f in flits]):
        if "error" in obj:
            raise ValueError(f"{direction.value} flit {obj['flit']} does not decode: {obj['error']}")
        if obj["kind"] == "control":
            n["llcrds"] += 1
        elif obj["kind"] == "all-data":
            n["chunks"] += len(obj["chunks"])
        else:
            for slot in obj["slots"]:
                if "data" in slot:
                    n["chunks"] += 1
                else:
                    n["header_slots"] += 1
                    n["empty_slots"] += not slot["messages"]
    return n


def loss(counts, wait, depth, seed):
    """The loss breakdown of one run of the loop (module docstring, ``loss``)."""
    sent = {}
    r = wait_sweep("mixed", counts, wait, random.Random(seed), depth=depth, sent=sent)
    bounds = bound_flits(counts)
    out = {"depth": depth, "wait": wait, "cycles": r["cycles"], "mean_latency": r["mean_latency"]}
    for d in (Direction.UPSTREAM, Direction.DOWNSTREAM):
        n = wire_census(d, sent.get(d, []))
        bound_headers = 4 * bounds[d] - n["chunks"]
        n.update(bound_flits=bounds[d], bound_header_slots=bound_headers,
                 empty_in_flits=n["empty_slots"] / 4,
                 under_filled_in_flits=(n["header_slots"] - n["empty_slots"] - bound_headers) / 4,
                 above_bound=n["flits"] - bounds[d])
        assert n["above_bound"] == n["llcrds"] + n["empty_in_flits"] + n["under_filled_in_flits"]
        out[d.value] = n
    out["above_bound"] = sum(out[d.value]["above_bound"] for d in Direction)
    return out


def random_mixes(count, mix_seed):
    """``count`` random channel mixes (module docstring, ``mixes``), none of them empty."""
    rng = random.Random(mix_seed)
    mixes = []
    while len(mixes) < count:
        mix = {ch: rng.choice(MIX_SIZES) for ch in D2H + H2D}
        if any(mix.values()):
            mixes.append(mix)
    return mixes


def mixes(count, mix_seed, wait, depths, seed):
    """Flits of both directions per mix and depth, beside the mix's bound."""
    rows = []
    for mix in random_mixes(count, mix_seed):
        counts = {ch: k for ch, k in mix.items() if k}
        bound = sum(bound_flits(counts).values())
        row = {"mix": {ch.name: k for ch, k in counts.items()}, "bound_flits": bound}
        for depth in depths:
            row[f"flits_depth{depth}"] = wait_sweep("mix", counts, wait, random.Random(seed), depth=depth)["wire_flits"]
        rows.append(row)
    totals = {key: sum(r[key] for r in rows) for key in rows[0] if key.startswith("flits_")}
    return {"wait": wait, "mix_seed": mix_seed, "mixes": rows, "totals": totals,
            "bound_total": sum(r["bound_flits"] for r in rows)}


def parse_depths(text):
    try:
        depths = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected queue depths as integers, e.g. 4,8") from None
    if not depths or min(depths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more queue depths >= 1")
    return depths


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.packing_study", description=__doc__.split("\n")[0])
    ap.add_argument("--study", choices=("loss", "mixes", "both"), default="both")
    ap.add_argument("--wait", type=int, default=DEFAULT_PACK_WAIT, help="the packers' wait W (default: the link's)")
    ap.add_argument("--depths", type=parse_depths, default=[4, 8], help="packer queue depths (default 4,8)")
    ap.add_argument("--lines", type=int, default=512, help="transactions of the mixed workload (default 512)")
    ap.add_argument("--seed", type=int, default=1, help="the messages' seed, as bench.link_bench's (default 1)")
    ap.add_argument("--mix-count", type=int, default=24)
    ap.add_argument("--mix-seed", type=int, default=7)
    args = ap.parse_args(argv)
    out = {}
    if args.study in ("loss", "both"):
        counts = {ch: k * args.lines // 4 for ch, k in MIXED.items()}
        out["loss"] = [loss(counts, args.wait, depth, args.seed) for depth in args.depths]
    if args.study in ("mixes", "both"):
        out["mixes"] = mixes(args.mix_count, args.mix_seed, args.wait, args.depths, args.seed)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
