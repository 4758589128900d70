"""A digest of everything the timed golden model does in one seeded run, so that a change meant only to
make the model faster can be checked to change nothing: every message sent (cycle, link, message,
extra latency), every message delivered (cycle, receiver, message), the summary without its wall-clock
figures, and, for a run that fails, the error and the cycle it was raised at.

The recorder swaps the classes ``models.system`` builds (``Link``, ``Host``, ``Device``) for subclasses
that note each send and delivery and then do what the originals do, so the model's own code carries no
tracing.  tests/model_digests.json holds the digests of the runs in :data:`RUNS`;
``python tests/model_trace.py --write`` records them again (only after a change that is *meant* to
change behaviour)."""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pytest

from models import system as system_mod
from models.config import Config

DIGESTS = Path(__file__).with_name("model_digests.json")

# (name, Config fields, transactions, seed): the default scenario on a few seeds, and shapes that reach
# what the default rarely does (snoop-filter evictions and stalls, the exact directory, host traffic
# snooping only the holders, coalescing windows).
RUNS = [
    ("default seed 1", {}, 2000, 1),
    ("default seed 2", {}, 2000, 2),
    ("default seed 3", {}, 2000, 3),
    ("tiny, evictions and stalls", dict(devices=2, sf_sets=1, sf_ways=2, max_outstanding=2, credits=1), 1500, 12),
    ("exact directory, host traffic to holders",
     dict(devices=3, host_dir="exact", host_traffic=0.2, host_snoop_scope="holders"), 1500, 5),
    ("small finite directory, wide coalescing",
     dict(devices=4, host_dir_sets=4, host_dir_ways=2, coalesce_window=64, coalesce_block=8), 1500, 7),
]

# (name, mutation from tests/test_mutations.py, the class it breaks, transactions, seed): runs that must
# fail, with the same error at the same cycle.
FAILING = [
    ("skip SnpInv to one sharer", "_skip_one_sharer", "Host", 2000, 1),
    ("drop the data of a DirtyEvict", "_drop_writeback", "Host", 2000, 1),
    ("forget the presence bit on an internal fill", "_forget_presence", "Device", 2000, 1),
    ("return two credits for one snoop response", "_double_credit", "Link", 2000, 1),
    ("hold a snoop forever", "_stall_forever", None, 2000, 1),
]


def _canon(msg):
    """A message as plain values (independent of how the model represents it)."""
    op = msg.op
    return (int(msg.chan), None if op is None else (type(op).__name__, op.name), msg.uid, msg.line,
            msg.rsp_data, msg.data, bool(msg.bogus))


class Recorder:
    def __init__(self):
        self.hash = hashlib.sha256()
        self.events = 0
        self.last_cycle = None

    def note(self, *event):
        self.hash.update(repr(event).encode())
        self.hash.update(b"\n")
        self.events += 1
        self.last_cycle = event[1]


def _recording_classes(rec):
    Link, Host, Device = system_mod.Link, system_mod.Host, system_mod.Device
    count = [0]

    class RecLink(Link):
        def __init__(self, cfg, timed):
            super().__init__(cfg, timed)
            self.trace_index = count[0]
            count[0] += 1

        def send(self, msg, now, extra=0):
            rec.note("send", now, self.trace_index, _canon(msg), extra)
            return super().send(msg, now, extra)

    class RecHost(Host):
        def on_d2h_req(self, dev, msg, now):
            rec.note("host", now, dev, _canon(msg))
            return super().on_d2h_req(dev, msg, now)

        def on_d2h_rsp(self, dev, msg, now):
            rec.note("host", now, dev, _canon(msg))
            return super().on_d2h_rsp(dev, msg, now)

        def on_d2h_data(self, dev, msg, now):
            rec.note("host", now, dev, _canon(msg))
            return super().on_d2h_data(dev, msg, now)

    class RecDevice(Device):
        def on_snoop(self, msg, now):
            rec.note("dev", now, self.index, _canon(msg))
            return super().on_snoop(msg, now)

        def on_h2d_rsp(self, msg, now):
            rec.note("dev", now, self.index, _canon(msg))
            return super().on_h2d_rsp(msg, now)

        def on_h2d_data(self, msg, now):
            rec.note("dev", now, self.index, _canon(msg))
            return super().on_h2d_data(msg, now)

    return RecLink, RecHost, RecDevice


def digest(cfg_fields, transactions, seed, mutate=None, broken=None):
    """{"trace": sha256 of every send and delivery, "events": their count, "summary": sha256 of the
    summary without wall-clock figures, "error": None or [type, message, cycle of the last event]}.
    ``mutate`` (a function name of tests/test_mutations.py) breaks the recording subclass of ``broken``
    ("Link", "Host" or "Device"; None: the mutation patches no class)."""
    rec = Recorder()
    with pytest.MonkeyPatch.context() as mp:
        recording = dict(zip(("Link", "Host", "Device"), _recording_classes(rec)))
        for name, cls in recording.items():
            mp.setattr(system_mod, name, cls)
        if mutate is not None:
            sys.path.insert(0, str(Path(__file__).parent))
            import test_mutations
            getattr(test_mutations, mutate)(mp, recording[broken] if broken else None)
        error = summary = None
        try:
            s = system_mod.run(Config(**cfg_fields), transactions, seed)
            s = {k: v for k, v in s.items() if k not in ("wall_s", "model_msgs_per_s")}
            summary = hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()
        except AssertionError as e:        # invariant, forward progress, credits
            error = [type(e).__name__, str(e), rec.last_cycle]
        except (RuntimeError, ValueError) as e:     # ProtocolError, UndeclaredTransition
            error = [type(e).__name__, str(e), rec.last_cycle]
    return {"trace": rec.hash.hexdigest(), "events": rec.events, "summary": summary, "error": error}


def all_digests():
    out = {name: digest(cfg, n, seed) for name, cfg, n, seed in RUNS}
    out.update({f"mutation: {name}": digest({}, n, seed, mutate, broken)
                for name, mutate, broken, n, seed in FAILING})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"record the digests in {DIGESTS.name}")
    args = ap.parse_args(argv)
    d = all_digests()
    text = json.dumps(d, indent=1, sort_keys=True) + "\n"
    if args.write:
        DIGESTS.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
