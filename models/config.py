"""Configuration of the golden-model system, validated up front.

Every default either has a source or is labelled an assumption.  A bad value raises
:class:`ConfigError` naming the parameter, before any simulation starts.
"""

from dataclasses import dataclass, fields, replace

from cxl.messages import MAX_IDS

__all__ = ["ConfigError", "Config", "MAX_DEVICES"]

# Ref: docs/sources.md §1.6: CXL 3.0 allows up to 16 CXL.cache devices below one root port (4-bit CacheID).
MAX_DEVICES = 16


class ConfigError(ValueError):
    """A configuration parameter is out of range; the message names it."""


def _pow2(n):
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class Config:
    devices: int = 4
    caches: int = 2                 # internal caches behind each DCOH (assumption: 2, e.g. two SM-local caches)
    sf_sets: int = 64               # snoop-filter sets (assumption; no published CXL device SF size, facts §3.3)
    sf_ways: int = 4                # snoop-filter ways (assumption)
    max_outstanding: int = 16       # CQIDs in use at once per device (assumption; field allows 4096, facts §1.6)
    credits: int = 8                # per channel, per direction (assumption; counters allow 1023, facts §2.4)
    link_latency: int = 24          # cycles one way, host<->device (assumption: ~24 cycles at 1 GHz ~ one CXL
                                    # port+PHY hop; facts §4.1 list 15-62 ns simulator defaults)
    host_latency: int = 10          # home-agent lookup before the host answers (assumption)
    probe_latency: int = 2          # DCOH -> internal cache invalidation/downgrade and ack (assumption)
    coalesce_window: int = 4        # cycles an invalidation waits for others to merge (0 = no coalescing)
    coalesce_block: int = 4         # lines per aligned block that one merged invalidation may cover (power of 2)
    starvation_bound: int = 4       # a waiting lower-priority D2H request is granted after at most this many
                                    # higher-priority grants
    devload_thresholds: tuple = (0.25, 0.5, 0.75)  # tracker occupancy fractions for DevLoad 01/10/11
                                    # (assumption; encodings from facts §3.2)
    watchdog: int = 20000           # cycles a request may stay outstanding before forward progress fails
    clean_evict_data: bool = False  # host answers CleanEvict with GO_WritePull (True) or GO_WritePull_Drop

    def __post_init__(self):
        def bad(name, why):
            raise ConfigError(f"{name}={getattr(self, name)!r}: {why}")
        if not 1 <= self.devices <= MAX_DEVICES:
            bad("devices", f"must be 1..{MAX_DEVICES} (CXL.cache CacheID is 4 bits)")
        if not 1 <= self.caches <= 32:
            bad("caches", "must be 1..32")
        if not _pow2(self.sf_sets):
            bad("sf_sets", "must be a power of two")
        if not _pow2(self.sf_ways):
            bad("sf_ways", "must be a power of two")
        if not 1 <= self.max_outstanding <= MAX_IDS:
            bad("max_outstanding", f"must be 1..{MAX_IDS} (12-bit CQID)")
        if self.max_outstanding < 2:
            bad("max_outstanding", "must be at least 2 (a miss may need a CQID for its victim's eviction too)")
        if not 1 <= self.credits <= 1023:
            bad("credits", "must be 1..1023 (10-bit credit counters, facts §2.4); zero credits can never send")
        for name in ("link_latency", "host_latency", "probe_latency", "coalesce_window"):
            if getattr(self, name) < 0:
                bad(name, "must be >= 0")
        if self.link_latency < 1:
            bad("link_latency", "must be >= 1 cycle")
        if not _pow2(self.coalesce_block):
            bad("coalesce_block", "must be a power of two")
        if self.starvation_bound < 2:
            bad("starvation_bound", "must be >= 2 (with 1, two classes that are starved in turn are granted alternately and the third waits forever)")
        t = self.devload_thresholds
        if len(t) != 3 or not all(0 < x < 1 for x in t) or list(t) != sorted(t):
            bad("devload_thresholds", "must be three increasing fractions in (0, 1)")
        if self.watchdog < 1:
            bad("watchdog", "must be >= 1")

    def with_(self, **changes):
        return replace(self, **changes)

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}
