"""Coverage against its denominator: what a run *could* have hit, from the tables that define the
behaviour, and what it did.

* (state, event) pairs: every declared transition of cxl/coherence.py: each snoop in each device state
  (SNOOP_TABLE, including the pairs that hold the snoop until data arrives), each request from each state
  it may start in (REQUEST_START), each response in each state that expects it (RESPONSE_TABLE).  Keys are
  ``"<state> / <event>"``, as the devices count them (models/dcoh.py).
* slot formats: every supported CXL.cache slot format of each direction (cxl/flit.py SLOT_FORMATS),
  ``"<direction> H<code>"`` / ``"<direction> G<code>"``, as tb/vip.py's FlitMonitor counts them.
* flit kinds: per direction, a protocol flit, an all-data flit and each control flit the link layer
  defines (CONTROL_KINDS).

:func:`closure` gives ``{"hit", "total", "holes", "outside"}`` for one universe: ``holes`` are the pairs
never hit, ``outside`` keys that were hit but are not in the universe (a key a table does not declare: a
bug in the counting or in the table)."""

import argparse
import json
import sys

from cxl.control import CONTROL_KINDS
from cxl.flit import SLOT_FORMATS, Direction
from cxl.coherence import REQUEST_START, RESPONSE_TABLE, SNOOP_TABLE

__all__ = ["state_event_universe", "slot_format_universe", "flit_kind_universe", "closure",
           "closure_report", "model_union", "main"]


def _name(x):
    return getattr(x, "name", x)


def state_event_universe():
    pairs = {f"{_name(s)} / {_name(e)}" for s, e in SNOOP_TABLE}
    pairs |= {f"{_name(s)} / {_name(req)}" for req, s in REQUEST_START}
    pairs |= {f"{_name(s)} / {_name(e)}" for s, e in RESPONSE_TABLE}
    return pairs


def slot_format_universe():
    return {f"{d.value} {kind}{code}" for (d, kind, code) in SLOT_FORMATS}


def flit_kind_universe():
    kinds = set()
    for d in Direction:
        kinds |= {f"{d.value} protocol", f"{d.value} all-data"}
        kinds |= {f"{d.value} control {k}" for k in CONTROL_KINDS}
    return kinds


def closure(hit, universe):
    """``hit``: the keys counted (an iterable or a dict of counts; a zero count is not a hit)."""
    got = {k for k, n in hit.items() if n} if isinstance(hit, dict) else set(hit)
    return {"hit": len(got & universe), "total": len(universe), "holes": sorted(universe - got),
            "outside": sorted(got - universe)}


def closure_report(state_event, flits):
    """The ``coverage.closure`` entry of a run summary, from its ``state_event`` and ``flits`` counts
    (tb/system_tb.py).  Protocol flits are counted there by their slots, so a direction's protocol kind
    is hit when any of its slot formats is."""
    formats = {k: n for k, n in flits.items() if " control " not in k and not k.endswith(" all-data")}
    kinds = {k: n for k, n in flits.items() if k not in formats}
    for d in Direction:
        if any(n for k, n in formats.items() if k.startswith(d.value + " ")):
            kinds[f"{d.value} protocol"] = 1
    return {"state_event": closure(state_event, state_event_universe()),
            "slot_formats": closure(formats, slot_format_universe()),
            "flit_kinds": closure(kinds, flit_kind_universe())}


def model_union(configs, seeds, transactions, progress=None):
    """The (state, event) closure of the union of golden-model runs (models.system.run): every Config in
    ``configs`` with every seed.  Returns the closure dict plus ``"runs"`` (seed, overrides, hits)."""
    from models.system import run
    union, runs = {}, []
    for cfg, label in configs:
        for seed in seeds:
            s = run(cfg, transactions, seed)
            for k, n in s["coverage"]["state_event"].items():
                union[k] = union.get(k, 0) + n
            runs.append({"seed": seed, "config": label, "hit": s["coverage"]["closure"]["state_event"]["hit"]})
            if progress:
                progress(runs[-1])
    return dict(closure(union, state_event_universe()), runs=runs)


def main(argv=None):
    """``python -m models.coverage --seeds 1-8 [--config NAME=VALUE,...]...``: the closure of a union of
    golden-model runs, cheap enough for many seeds (each --config is run with every seed)."""
    from models.config import Config, ConfigError
    ap = argparse.ArgumentParser(description="(state, event) closure of a union of golden-model runs")
    ap.add_argument("--seeds", default="1-8", help="FIRST-LAST or a comma list")
    ap.add_argument("--transactions", type=int, default=20000)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--config", action="append", default=None, metavar="NAME=VALUE,...",
                    help="Config overrides of one set of runs (repeatable; default: the defaults)")
    ap.add_argument("--out", default=None, help="also write the result as JSON here")
    args = ap.parse_args(argv)
    try:
        if "-" in args.seeds:
            lo, hi = (int(x) for x in args.seeds.split("-"))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: expected FIRST-LAST or a comma list of integers")
    try:
        configs = [(Config(devices=args.devices).with_overrides(c), c) for c in (args.config or [""])]
    except ConfigError as e:
        ap.error(f"--config: {e}")
    r = model_union(configs, seeds, args.transactions,
                    lambda x: print(f"  seed {x['seed']} {x['config'] or 'defaults'}: {x['hit']} pairs",
                                    file=sys.stderr, flush=True))
    print(f"union of {len(r['runs'])} runs: {r['hit']} of {r['total']} (state, event) pairs "
          f"({100 * r['hit'] / r['total']:.1f} %); never hit: {', '.join(r['holes']) or 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(r, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
