"""The command line of the flit model, ``python -m models.flit``: test vectors (``--vectors``), packer efficiency (``--efficiency``), and the
flit decoder for people (``decode`` / ``encode``, models/flit/json_form.py)."""

import argparse
import json
import sys
from pathlib import Path

from cxl.flit import Direction

from .efficiency import WORKLOADS, efficiency
from .json_form import decode_stream, encode_flit, parse_hex
from .vectors import write_vectors


def main(argv=None):
    """``python -m models.flit decode|encode ...`` (a flit decoder for people, models/flit/json_form.py) or
    the vector / efficiency options."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("decode", "encode"):
        return _json_main(argv)
    ap = argparse.ArgumentParser(prog="python -m models.flit", description="CXL 2.0 68B-flit link layer: the golden model's command line",
                                 epilog="Also: python -m models.flit decode|encode --help")
    ap.add_argument("--vectors", type=Path, help="write random-mix test vectors (JSON lines) here")
    ap.add_argument("--count", type=int, default=1000, help="number of mixes (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--efficiency", action="store_true",
                    help="print payload efficiency of each workload beside its optimum")
    args = ap.parse_args(argv)
    if args.vectors is None and not args.efficiency:
        ap.error("nothing to do: give --vectors PATH and/or --efficiency (or decode / encode)")
    if args.vectors is not None:
        write_vectors(args.vectors, args.count, args.seed)
        print(f"wrote {args.count} mixes to {args.vectors}")
    if args.efficiency:
        for w in WORKLOADS:
            e = efficiency(w)
            print(f"{w:17s} n={e['n']}: {e['flits']} flits, efficiency {e['efficiency']:.4f} "
                  f"(optimum {e['optimum']['efficiency']:.4f}, limit {e['limit']['efficiency']:.4f}); "
                  f"data only {e['data_efficiency']:.4f} (optimum {e['optimum']['data_efficiency']:.4f})")
    return 0


def _json_main(argv):
    ap = argparse.ArgumentParser(prog="python -m models.flit")
    sub = ap.add_subparsers(dest="cmd", required=True)
    dec = sub.add_parser("decode", help="68-byte flits (hex, make vectors byte order) -> one JSON object per flit",
                         description="Decode a stream of 68-byte flits (hex; one per argument, or one per line "
                                     "on stdin) with the golden unpacker: kind, header, slots and messages as "
                                     "JSON lines, or the rule a flit breaks with its specification reference. "
                                     "Exit status 1 if any flit is rejected.")
    dec.add_argument("-d", "--direction", required=True, choices=[d.value for d in Direction],
                     help="upstream = D2H flits (device to host), downstream = H2D")
    dec.add_argument("flits", nargs="*", help="flits in hex (default: read lines from stdin)")
    enc = sub.add_parser("encode", help="JSON objects as decode prints them -> 68-byte flits in hex",
                         description="Encode JSON objects (one per line on stdin, or one per argument) as "
                                     "decode prints them back into 68-byte flits, one hex line each.")
    enc.add_argument("objects", nargs="*", help="JSON objects (default: read lines from stdin)")
    args = ap.parse_args(argv)
    lines = args.flits if args.cmd == "decode" else args.objects
    if not lines:
        lines = [ln for ln in sys.stdin.read().splitlines() if ln.strip()]
    try:
        if args.cmd == "decode":
            wire = [parse_hex(t, f"flit {n}") for n, t in enumerate(lines)]
            bad = 0
            for obj in decode_stream(args.direction, wire):
                bad += "error" in obj
                print(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))
            return 1 if bad else 0
        for n, text in enumerate(lines):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"object {n}: not JSON: {e}") from None
            print(encode_flit(obj, f"object {n}").hex())
        return 0
    except (ValueError, TypeError) as e:
        print(f"python -m models.flit {args.cmd}: {e}", file=sys.stderr)
        return 2
