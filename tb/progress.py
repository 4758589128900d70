"""What ``make sim`` shows while it runs and when it ends.

:class:`Progress` is one tqdm line per run (transactions done/total, simulated cycles, cycles/s, ETA),
updated when transactions finish, never more than the refresh interval allows (tqdm's ``mininterval``: 1 s
on a terminal, 15 s into a log file, so a CI log gets a line now and then rather than thousands).
:func:`closing_table` is the table printed when a run ends."""

import sys
import time

__all__ = ["Progress", "closing_table"]


class Progress:
    """``update(done, cycle)`` after transactions finish; ``close()`` at the end.  ``total`` may be None (a
    trace replay: its length in transactions is not known in advance)."""

    def __init__(self, total, desc, enabled=True, stream=None):
        from tqdm import tqdm
        stream = stream or sys.stderr
        tty = hasattr(stream, "isatty") and stream.isatty()
        self.bar = tqdm(total=total or None, desc=desc, unit="tx", file=stream, disable=not enabled,
                        mininterval=1.0 if tty else 15.0, dynamic_ncols=tty, ascii=not tty, leave=True)
        self.t0 = time.perf_counter()
        self.cycle = 0

    def update(self, done, cycle):
        """``done`` transactions finished by simulated ``cycle``."""
        bar = self.bar
        if bar.disable:
            return
        self.cycle = cycle
        step = done - bar.n
        if step <= 0:
            return
        # postfix first, without drawing: tqdm's update() below draws at most once per mininterval
        wall = time.perf_counter() - self.t0
        bar.set_postfix_str(f"{cycle:,} cycles, {cycle / wall if wall else 0:,.0f} cycles/s", refresh=False)
        bar.update(step)

    def close(self):
        self.bar.close()


def _row(cells, widths):
    return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def closing_table(s):
    """The end-of-run table of one summary of tb/system_tb.py: transactions, violations, cycles and speed,
    latency p50/p99 per opcode, coverage.  Returns the text."""
    head = f"seed {s.get('seed')}, {s.get('devices')} devices, {s.get('simulator')}"
    lines = [f"== make sim: {head} " + "=" * max(0, 70 - len(head)),
             _row(["transactions", f"{s.get('transactions', 0):,}", "violations", s.get("violations", 0)],
                  [16, 10, 12, 8])]
    if s.get("cycles") is not None:
        lines.append(_row(["cycles", f"{s['cycles']:,}", "cycles/s", f"{s.get('sim_cycles_per_s') or 0:,}"],
                          [16, 10, 12, 8]) + f"   (simulation {s.get('wall_s', 0):.1f} s)")
    if s.get("error"):
        lines.append(f"error: {s['error']}")
    lat = s.get("latency_cycles") or {}
    if lat:
        w = [18, 9, 7, 7]
        lines += ["", _row(["latency (cycles)", "count", "p50", "p99"], w)]
        lines += [_row([op, f"{v['count']:,}", v["p50"], v["p99"]], w) for op, v in lat.items()]
    cov = s.get("coverage")
    if cov:
        lines += ["", f"coverage: {len(cov['state_event'])} (state, event) pairs; "
                      f"{len(cov['flits'])} flit kinds and slot formats"]
        closure = cov.get("closure")
        if closure:
            lines += [f"  {k:<12} {v['hit']:>4} of {v['total']:<4} ({100 * v['hit'] / v['total']:.0f} %)"
                      for k, v in closure.items()]
    return "\n".join(lines)
