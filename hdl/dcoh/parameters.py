"""The DCOH's parameters, checked once for both of its tops (hdl/dcoh/dcoh.py, hdl/dcoh/pipe/dcoh_top.py).

A bad parameter raises ValueError naming it and saying what it must be, at elaboration's start.
"""

from amaranth.utils import exact_log2

from cxl.messages import MAX_IDS

__all__ = ["check_parameters"]


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_parameters(who, *, caches, sf_sets, sf_ways, tracker, work, coalesce_window, coalesce_block,
                     coalesce_groups, starvation_bound, credits, addr_width):
    """Raise ValueError("``who``: name=value: why") for the first bad parameter."""
    def bad(name, value, why):
        raise ValueError(f"{who}: {name}={value!r}: {why}")
    if not _is_int(caches) or not 1 <= caches <= 32:
        bad("caches", caches, "must be an integer in 1..32")
    for name, v in (("sf_sets", sf_sets), ("sf_ways", sf_ways), ("coalesce_block", coalesce_block)):
        if not _is_int(v) or v < 1 or v & (v - 1):
            bad(name, v, "must be a power of two >= 1")
    if not _is_int(tracker) or not 2 <= tracker <= MAX_IDS:
        bad("tracker", tracker, f"must be 2..{MAX_IDS} (12-bit CQID; a miss may need a second CQID "
                                "for its victim's eviction)")
    if not _is_int(work) or work < 1:
        bad("work", work, "must be an integer >= 1")
    if not _is_int(coalesce_groups) or coalesce_groups < 1:
        bad("coalesce_groups", coalesce_groups, "must be an integer >= 1")
    if not _is_int(coalesce_window) or coalesce_window < 0:
        bad("coalesce_window", coalesce_window, "must be an integer >= 0")
    if not _is_int(starvation_bound) or starvation_bound < 2:
        bad("starvation_bound", starvation_bound, "must be an integer >= 2 (PriorityArbiter)")
    if not _is_int(credits) or not 1 <= credits <= 1023:
        bad("credits", credits, "must be 1..1023 (10-bit credit counters, docs/sources.md §2.4)")
    if not _is_int(addr_width) or addr_width <= max(exact_log2(sf_sets), exact_log2(coalesce_block)):
        bad("addr_width", addr_width, "must exceed log2(sf_sets) and log2(coalesce_block)")
