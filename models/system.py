"""The golden-model system: a host home agent and N devices joined by links, with invariants.

``System`` holds the state and the ways it can change (deliver a message, accept a CPU access, flush
the coalescer); two drivers use them:
  * ``run()`` here: cycle-timed simulation with a seeded random workload (``make sim``);
  * models.explore: breadth-first exploration of every interleaving of tiny configurations.

Invariants, checked after every step on the lines it touched (``check_all`` checks everything):
  SWMR over permissions, data value against the ghost last write, snoop-filter inclusion, credit
  conservation, and forward progress (a watchdog naming every outstanding request and its age).
"""

import argparse
import heapq
import json
import os
import random
import sys
import time

from hdl.protocol import Channel
from .checker import Checker, InvariantViolation
from .config import Config, ConfigError
from .dcoh import Device, CpuOp
from .host import Host
from .link import INF, Link
from .states import Perm, DevState

__all__ = ["System", "Workload", "run", "main"]


class ForwardProgressError(AssertionError):
    pass


class System:
    def __init__(self, cfg, timed=True):
        self.cfg = cfg
        self.timed = timed
        self.checker = Checker()
        self.links = [Link(cfg, timed) for _ in range(cfg.devices)]
        self.host = Host(cfg, self.links, self.checker)
        self.stats = {}
        self.devices = [Device(d, cfg, self.links[d], self.checker, self.stats) for d in range(cfg.devices)]
        self.now = 0

    # ---------------------------------------------------------------- steps
    def deliverable(self, d, upstream, now=None):
        """Indices of in-flight messages on link ``d`` that may be delivered now."""
        link = self.links[d]
        idx = link.deliverable(upstream, now)
        if upstream:
            return idx
        dev = self.devices[d]
        flight = link.flight[False]
        return [i for i in idx if flight[i][1].chan is not Channel.H2D_REQ or dev.can_accept_snoop(flight[i][1])]

    def deliver(self, d, upstream, i):
        link = self.links[d]
        msg = link.flight[upstream].pop(i)[1]
        now = self.now
        link.consumed(msg.chan, now)
        c = msg.chan
        if upstream:
            h = self.host
            (h.on_d2h_req if c is Channel.D2H_REQ else h.on_d2h_rsp if c is Channel.D2H_RSP
             else h.on_d2h_data)(d, msg, now)
        else:
            dev = self.devices[d]
            if c is Channel.H2D_REQ:
                dev.on_snoop(msg, now)
            elif c is Channel.H2D_RSP:
                dev.on_h2d_rsp(msg, now)
            else:
                dev.on_h2d_data(msg, now)
            self.checker.touched.add(msg.line)
        self.checker.touched.add(msg.line)
        return msg

    def step_timed(self, now):
        """One cycle of timed delivery: on each link with something due, credit returns and then
        every ready message in send order; then the coalescer groups whose window closed.
        Returns the number of messages delivered."""
        self.now = now
        n = 0
        for d, link in enumerate(self.links):
            if link.next_due > now:
                continue
            link.tick_credits(now)
            for upstream in (True, False):
                flight = link.flight[upstream]
                while flight:
                    idx = self.deliverable(d, upstream, now)
                    if not idx:
                        break
                    self.deliver(d, upstream, idx[0])
                    n += 1
            t = link.next_time()
            link.next_due = INF if t is None else t
        for dev in self.devices:
            if dev.coal.groups:
                for b in dev.coal.due(now):
                    dev.flush(b, now)
        return n

    def protocol_moves(self):
        """Every protocol event that may happen now, ignoring time (for the explorers): delivering any
        deliverable message, ("deliver", device, upstream, index), or flushing any coalescer group,
        ("flush", device, block).  CPU accesses are not protocol moves."""
        moves = []
        for d in range(self.cfg.devices):
            for up in (True, False):
                moves += [("deliver", d, up, i) for i in self.deliverable(d, up)]
            moves += [("flush", d, b) for b in self.devices[d].coal.groups]
        return moves

    def apply_move(self, move):
        """Carry out one of :meth:`protocol_moves`, then let the devices settle."""
        if move[0] == "deliver":
            self.deliver(*move[1:4])
        else:
            self.devices[move[1]].flush(move[2], self.now)
        self.settle()

    def settle(self, limit=None):
        """Deterministic device-internal progress: queued accesses, D2H request transmit."""
        for dev in self.devices:
            dev.service(self.now)
            dev.transmit(self.now, limit)

    # ---------------------------------------------------------------- invariants
    def check_lines(self, lines):
        for line in lines:
            writers, readers = [], []
            for dev in self.devices:
                for k, cache in enumerate(dev.caches):
                    c = cache.get(line)
                    if c is None:
                        continue
                    who = f"dev{dev.index} cache {k} ({c[0].name})"
                    if c[0].perm is Perm.READWRITE:
                        writers.append(who)
                    else:
                        readers.append(who)
                    if c[1] != self.checker.value(line):
                        raise InvariantViolation(
                            f"data value: {who} holds {c[1]} in line {line:#x}; last write serialized was "
                            f"{self.checker.value(line)} (by {self.checker.writer.get(line, 'initial memory')})")
            if len(writers) > 1 or (writers and readers):
                raise InvariantViolation(f"SWMR on line {line:#x}: writers {writers}, readers {readers}")
            if not writers and self._line_quiet(line) and self.host.memory(line) != self.checker.value(line):
                raise InvariantViolation(
                    f"data value: memory holds {self.host.memory(line)} for line {line:#x} with no owner "
                    f"and nothing in flight; last write serialized was {self.checker.value(line)}")

    def _line_quiet(self, line):
        if line in self.host.active:
            return False
        for dev in self.devices:
            if dev.busy(line) or dev.line_state(line) is not DevState.I and \
                    dev.line_state(line) is not DevState.S:
                return False
        return True

    def check_step(self):
        lines = self.checker.touched
        self.check_lines(lines)
        for dev in self.devices:
            for line in lines:
                dev.check_line(line)
        lines.clear()
        for link in self.links:
            link.check_credits()

    def check_all(self):
        lines = set(self.checker.ghost) | set(self.host.mem)
        for dev in self.devices:
            for c in dev.caches:
                lines |= set(c)
            dev.check()
        self.check_lines(lines)
        for link in self.links:
            link.check_credits(full=True)

    def outstanding(self):
        out = self.host.outstanding()
        for dev in self.devices:
            out += dev.outstanding()
        return sorted(out, reverse=True)

    def watchdog(self):
        out = self.outstanding()
        if out and out[0][0] > self.cfg.watchdog:
            lines = "\n".join(f"  age {age:>7} cycles: {what}" for age, what in out)
            raise ForwardProgressError(f"forward progress: a request is older than {self.cfg.watchdog} "
                                       f"cycles at cycle {self.now}; outstanding:\n{lines}")

    def quiescent(self):
        return self.host.idle() and not any(l.busy() for l in self.links) and all(
            not d.txns and not d.work and not d.queue and not len(d.arb) for d in self.devices)

    def key(self):
        return (self.host.key(), tuple(d.key() for d in self.devices), tuple(l.key() for l in self.links),
                self.checker.key())


# ------------------------------------------------------------------------------------------------
class Workload:
    """Seeded random accesses from every internal cache.  Address layouts (per seed, rotating):
    a hot set of lines shared by everyone (true sharing), adjacent lines of one block (false
    sharing at block granularity), lines that all map to one snoop-filter set (set conflicts), and
    a wider random pool."""

    MIX = (("load", 45), ("store", 25), ("evict", 15), ("rdcurr", 4), ("itomwr", 4), ("wrinv", 4),
           ("clflush", 3))

    def __init__(self, cfg, rng, lines=256, think=8):
        self.cfg, self.rng, self.think = cfg, rng, think
        sets = cfg.sf_sets
        conflict = [0x1000 + i * sets for i in range(cfg.sf_ways * 3)]
        hot = [0x40 + i for i in range(4)]
        block = [0x80 + i for i in range(cfg.coalesce_block * 2)]
        pool = [0x2000 + rng.randrange(lines * 4) for _ in range(lines)]
        self.layouts = [hot, block, conflict, pool]
        rng.shuffle(self.layouts)
        self.weights = [4, 3, 2, 1]
        self.kinds = [k for k, _ in self.MIX]
        self.kind_w = [w for _, w in self.MIX]
        self.value = 0

    def next_op(self, k):
        rng = self.rng
        layout = rng.choices(self.layouts, self.weights)[0]
        line = rng.choice(layout)
        kind = rng.choices(self.kinds, self.kind_w)[0]
        self.value += 1
        return CpuOp(kind, k, line, self.value, rng.randrange(2))


def percentile(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100 * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def run(cfg, transactions, seed, progress=None):
    """Timed simulation until ``transactions`` D2H requests have completed.  Returns the summary."""
    rng = random.Random(seed)
    sysm = System(cfg, timed=True)
    wl = Workload(cfg, rng)
    devs = sysm.devices
    next_issue = [[rng.randrange(wl.think + 1) for _ in range(cfg.caches)] for _ in devs]
    latency = {}
    done = 0
    msgs = 0
    devload_hist = [0, 0, 0, 0]
    t_start = time.perf_counter()
    now = 0
    last_watchdog = 0
    wake = []                       # event times; every timer below pushes here
    for link in sysm.links:
        link.wake = wake
    for dev in devs:
        dev.coal.wake = wake
    for nd in next_issue:
        for t in nd:
            heapq.heappush(wake, t)
    while done < transactions:
        msgs += sysm.step_timed(now)
        for d, dev in enumerate(devs):
            nd = next_issue[d]
            for k in range(cfg.caches):
                if dev.ops[k] is None and nd[k] <= now:
                    dev.accept(wl.next_op(k), now)
                    nd[k] = now + 1 + rng.randrange(wl.think + 1)
                    heapq.heappush(wake, nd[k])
            if dev.queue:
                dev.service(now)
            if dev.arb.count:
                dev.transmit(now, 1)
            if dev.done:
                devload_hist[dev.devload()] += 1
                for op, lat in dev.done:
                    latency.setdefault(op.name, []).append(lat)
                done += len(dev.done)
                dev.done.clear()
        if sysm.checker.touched:
            sysm.check_step()
        if now - last_watchdog >= 1000:
            last_watchdog = now
            sysm.watchdog()
            if progress:
                progress(done, now)
        # next cycle with something to do: a timer, or a request the arbiter could send, or an
        # internal cache that finished and may issue again
        if any(dev.arb.count and dev.link.credits[Channel.D2H_REQ] > 0 for dev in devs):
            heapq.heappush(wake, now + 1)
        for d, dev in enumerate(devs):
            for k in range(cfg.caches):
                if dev.ops[k] is None and next_issue[d][k] <= now:
                    next_issue[d][k] = now + 1
                    heapq.heappush(wake, now + 1)
        while wake and wake[0] <= now:
            heapq.heappop(wake)
        if not wake:
            sysm.watchdog()
            raise ForwardProgressError(f"nothing left to happen at cycle {now} with "
                                       f"{len(sysm.outstanding())} requests outstanding: {sysm.outstanding()}")
        nxt = heapq.heappop(wake)
        if nxt - now > cfg.watchdog:
            sysm.now = nxt
            sysm.watchdog()
        now = nxt
    sysm.check_all()
    wall = time.perf_counter() - t_start
    coal_in = sum(d.coal.msgs_in for d in devs)
    coal_out = sum(d.coal.msgs_out for d in devs)
    return {
        "engine": "model",
        "simulator": None,
        "devices": cfg.devices,
        "transactions": done,
        "violations": 0,
        "seed": seed,
        "cycles": now,
        "messages": msgs,
        "wall_s": round(wall, 3),
        "model_msgs_per_s": round(msgs / wall) if wall else None,
        "latency_cycles": {op: {"p50": percentile(sorted(v), 50), "p99": percentile(sorted(v), 99),
                                "count": len(v)} for op, v in sorted(latency.items())},
        "coalescing": {"invalidations_in": coal_in, "messages_out": coal_out, "saved": coal_in - coal_out},
        "arbiter_max_passed": max(d.arb.max_passed for d in devs),
        "devload_histogram": dict(zip(("light", "optimal", "moderate", "severe"), devload_hist)),
        "counters": dict(sorted(sysm.stats.items())),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.as_dict().items()},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description="Golden-model CXL.cache system simulation")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--caches", type=int, default=Config.caches)
    ap.add_argument("--sf-sets", type=int, default=Config.sf_sets)
    ap.add_argument("--sf-ways", type=int, default=Config.sf_ways)
    ap.add_argument("--credits", type=int, default=Config.credits)
    ap.add_argument("--max-outstanding", type=int, default=Config.max_outstanding)
    ap.add_argument("--transactions", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="build/sim/summary.json")
    args = ap.parse_args(argv)
    try:
        cfg = Config(devices=args.devices, caches=args.caches, sf_sets=args.sf_sets, sf_ways=args.sf_ways,
                     credits=args.credits, max_outstanding=args.max_outstanding)
    except ConfigError as e:
        print(f"error: bad configuration: {e}", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)

    marks = iter(range(20000, args.transactions, 20000))
    mark = [next(marks, None)]

    def progress(done, now):
        if mark[0] is not None and done >= mark[0]:
            print(f"  {done} transactions, cycle {now}", file=sys.stderr)
            mark[0] = next(marks, None)

    try:
        summary = run(cfg, args.transactions, args.seed, progress)
    except AssertionError as e:   # invariant, forward progress
        summary = {"engine": "model", "simulator": None, "devices": cfg.devices, "transactions": None,
                   "violations": 1, "seed": args.seed, "error": str(e), "latency_cycles": {}}
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=2)
        print(f"FAILED (seed {args.seed}; reproduce with make sim SEED={args.seed}): {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"golden model: {summary['devices']} devices, {summary['transactions']} transactions, "
          f"{summary['cycles']} cycles, {summary['violations']} violations, seed {summary['seed']}, "
          f"{summary['wall_s']} s ({summary['model_msgs_per_s']} messages/s)")
    for op, v in summary["latency_cycles"].items():
        print(f"  {op:<17} n={v['count']:>7}  p50={v['p50']:>5}  p99={v['p99']:>5} cycles")
    c = summary["coalescing"]
    print(f"  coalescing: {c['invalidations_in']} invalidations -> {c['messages_out']} messages "
          f"({c['saved']} saved); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
