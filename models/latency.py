"""Request latency distributions, kept as ``{cycles: count}`` so that runs can be merged exactly.

Each engine's summary (models/system.py, tb/system_tb.py) has one entry per opcode,
``latency_entry(counts)``: ``count``, ``p50``, ``p99``, an equal-width ``histogram`` and the
distribution itself, ``by_cycles``.  A regression over many seeds (tb/regress.py) adds the seeds'
``by_cycles`` (``merge_counts``) and makes the same entry again: its percentiles and histogram are
those of all the seeds' requests together, not an average of per-seed figures.  Counts keep the size
bounded by the number of distinct latencies (a few hundred), whatever the number of transactions.
"""

__all__ = ["percentile", "percentile_of_counts", "histogram", "latency_entry", "merge_counts"]

HISTOGRAM_BINS = 16     # bars per opcode in the summary PNG (tb/run_system.py plot_latency)


def percentile(sorted_vals, p):
    """The value at rank round(p/100 * (n-1)) of a sorted list (None if empty)."""
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100 * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def _int_counts(counts):
    # JSON makes the keys strings; a summary read back from disk is merged like one made in memory.
    return {int(c): n for c, n in counts.items() if n}


def percentile_of_counts(counts, p):
    """``percentile`` of the list that ``counts`` ({value: times}) stands for, without building it."""
    counts = _int_counts(counts)
    n = sum(counts.values())
    if not n:
        return None
    rank = min(n - 1, max(0, int(round(p / 100 * (n - 1)))))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen > rank:
            return value
    raise AssertionError("unreachable: rank < n")


def histogram(counts, bins=HISTOGRAM_BINS):
    """Equal-width bins of whole cycles from the minimum to the maximum: {"edges": [...], "counts": [...]}
    (``len(edges) == len(counts) + 1``; at most ``bins`` bins, each at least one cycle wide)."""
    counts = _int_counts(counts)
    if not counts:
        return {"edges": [], "counts": []}
    lo, hi = min(counts), max(counts)
    width = max(1, -(-(hi - lo + 1) // bins))
    out = [0] * (-(-(hi - lo + 1) // width))
    for value, n in counts.items():
        out[(value - lo) // width] += n
    return {"edges": [lo + i * width for i in range(len(out) + 1)], "counts": out}


def latency_entry(counts):
    """The summary entry of one opcode from its ``{cycles: count}``."""
    counts = _int_counts(counts)
    return {"p50": percentile_of_counts(counts, 50), "p99": percentile_of_counts(counts, 99),
            "count": sum(counts.values()), "histogram": histogram(counts),
            "by_cycles": {c: counts[c] for c in sorted(counts)}}


def merge_counts(into, counts):
    """Adds ``counts`` ({cycles: count}, keys int or str) into ``into`` (int keys); returns ``into``."""
    for c, n in _int_counts(counts).items():
        into[c] = into.get(c, 0) + n
    return into
