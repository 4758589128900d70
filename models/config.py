"""Configuration of the golden-model system, validated up front.

Every default either has a source or is labelled an assumption.  A bad value raises
:class:`ConfigError` naming the parameter, before any simulation starts.
"""

from dataclasses import dataclass, fields, replace

from cxl.messages import MAX_IDS
from .params import ParamSet

__all__ = ["ConfigError", "Config", "MAX_DEVICES", "HOST_DIR_POLICIES", "HOST_SNOOP_SCOPES", "parse_assignments",
           "parse_overrides"]

# Ref: docs/sources.md §1.6: CXL 3.0 allows up to 16 CXL.cache devices below one root port (4-bit CacheID).
MAX_DEVICES = 16

# The host home agent's directory (models/host.py): "exact" tracks every line any device holds, without
# bound; "finite" is a sets x ways snoop filter that back-invalidates the holders of the entry it evicts.
HOST_DIR_POLICIES = ("exact", "finite")
# Whom the host's own accesses snoop: "holders" (the devices its directory lists, as a device request's
# snoops do) or "all" (every device: a host whose own accesses are not filtered per device).
HOST_SNOOP_SCOPES = ("holders", "all")


class ConfigError(ValueError):
    """A configuration parameter is out of range; the message names it."""


def _pow2(n):
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class Config(ParamSet):
    devices: int = 4
    caches: int = 2                 # internal caches behind each DCOH (assumption: 2, e.g. two SM-local caches)
    sf_sets: int = 64               # snoop-filter sets (assumption; no published CXL device SF size, facts §3.3)
    sf_ways: int = 4                # snoop-filter ways (assumption)
    max_outstanding: int = 16       # CQIDs in use at once per device (assumption; field allows 4096, facts §1.6)
    # Lines with probes outstanding at once per device (a snoop waiting for the internal caches' answer, a
    # back-invalidation): the RTL DCOH's work table (hdl/dcoh/dcoh.py, ``work``).  0: as many as there are
    # lines (the model's default).  With N > 0 the device holds a snoop that would need a new entry while
    # N are in use (it is answered when one frees, as a snoop the device stalls), and an access whose
    # victim or own copies must be back-invalidated waits, as the RTL does.
    work_entries: int = 0
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
    # The fraction of CleanEvicts the host answers with GO_WritePull (the device sends its clean copy) rather
    # than GO_WritePull_Drop (the host has the clean data in memory already): the host's choice per request
    # (docs/sources.md §1.2).  Assumption: 1 in 8, every 8th (no randomness), so that a default run takes both
    # answers; 0 always drops, 1 always pulls.
    clean_evict_pull: float = 0.125
    # The host's directory (docs/sources.md §3.3: a host's snoop filter is finite, and bounds what the
    # devices may cache).  Assumption: by default (0) the geometry of one device's own filter, sf_sets x
    # sf_ways (64 x 4 here, 16 x 2 in the RTL system of make sim), so the host tracks 1/N of what N devices
    # could hold, and the workload's set-conflict lines (models/system.py Workload: a stride of sf_sets)
    # fall into one host set too: a default run evicts entries both for capacity and for conflicts.  A real
    # CPU snoop filter is far larger (e.g. 12 ways x 512 sets, §3.3) against far larger caches.
    host_dir: str = "finite"        # one of HOST_DIR_POLICIES
    host_dir_sets: int = 0          # with host_dir="finite"; 0: sf_sets (see host_dir_shape)
    host_dir_ways: int = 0          # with host_dir="finite"; 0: sf_ways
    # The host's own reads and writes to lines the devices use, per device access (assumption: 1 in 20,
    # enough for a default run to send each snoop class a few hundred times without crowding out device
    # traffic), and whom they snoop (assumption: "all", so that they reach devices that do not hold the
    # line: the snoop-filter-miss answer RspIHitI, legal for every snoop, docs/sources.md §1.5).
    host_traffic: float = 0.05
    host_snoop_scope: str = "all"   # one of HOST_SNOOP_SCOPES
    # The fraction of reads whose H2D Data the host sends before the GO (H2D Rsp and H2D Data are separate
    # channels with no ordering between them, docs/sources.md §1.1).  Assumption: 1 in 8, chosen every
    # 8th read (no randomness: the same run for the same seed), so that a default run takes the
    # data-before-GO transitions (IS_AD / Data, IS_A / GO-S, ...) that a host sending the GO first never does.
    host_data_first: float = 0.125
    # The fraction of the other reads (those whose GO goes first) whose H2D Data the host sends
    # ``host_data_lag`` cycles after the GO: a home agent may send the GO once its directory has ordered
    # the request and the data when memory returns it (no ordering between the two channels, docs/sources.md
    # §1.1).  Assumptions: 1 in 8 (every 8th, no randomness) and 100 cycles, the order of a DRAM access at
    # the model's 1 GHz; they open the window in which a snoop reaches a device that has its GO and waits
    # for the data (IS_D, IM_D, SM_D), which a host sending both at once leaves a few cycles wide.
    host_data_late: float = 0.125
    host_data_lag: int = 100

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
        if not isinstance(self.work_entries, int) or self.work_entries < 0:
            bad("work_entries", "must be >= 0 (0: no limit)")
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
        if self.host_dir not in HOST_DIR_POLICIES:
            bad("host_dir", f"must be one of {', '.join(HOST_DIR_POLICIES)}")
        for name in ("host_dir_sets", "host_dir_ways"):
            v = getattr(self, name)
            if not isinstance(v, int) or not (v == 0 or _pow2(v)):
                bad(name, "must be a power of two (or 0: the device snoop filter's)")
        if not isinstance(self.host_traffic, (int, float)) or not 0 <= self.host_traffic <= 1:
            bad("host_traffic", "must be a fraction in [0, 1] (host accesses per device access)")
        if self.host_snoop_scope not in HOST_SNOOP_SCOPES:
            bad("host_snoop_scope", f"must be one of {', '.join(HOST_SNOOP_SCOPES)}")
        if not isinstance(self.host_data_first, (int, float)) or not 0 <= self.host_data_first <= 1:
            bad("host_data_first", "must be a fraction in [0, 1] (reads whose data goes before the GO)")
        if not isinstance(self.clean_evict_pull, (int, float)) or not 0 <= self.clean_evict_pull <= 1:
            bad("clean_evict_pull", "must be a fraction in [0, 1] (CleanEvicts whose clean data the host pulls)")
        if not isinstance(self.host_data_late, (int, float)) or not 0 <= self.host_data_late <= 1:
            bad("host_data_late", "must be a fraction in [0, 1] (reads whose data lags the GO)")
        if not isinstance(self.host_data_lag, int) or self.host_data_lag < 0:
            bad("host_data_lag", "must be a whole number of cycles >= 0")

    @property
    def host_dir_shape(self):
        """(sets, ways) of the finite host directory: host_dir_sets/ways, 0 meaning sf_sets/sf_ways."""
        return self.host_dir_sets or self.sf_sets, self.host_dir_ways or self.sf_ways

    def with_overrides(self, text):
        """This configuration with the ``name=value,...`` overrides of :func:`parse_overrides` applied."""
        return replace(self, **parse_overrides(text))


def parse_overrides(text):
    """``"host_dir=finite,host_dir_sets=8,host_traffic=0.1"`` -> a dict of Config fields with values of the
    fields' types (the command-line form of ``make model``, ``make sim`` and ``make regress``).  An unknown
    name or a value of the wrong type raises ConfigError naming it; the ranges are checked by Config."""
    return parse_assignments(text, {f.name: type(getattr(Config, f.name)) for f in fields(Config)},
                             "the Config fields")


def parse_assignments(text, kinds, what):
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}`` with each value converted to ``kinds[name]`` (bool: 0/1/true/
    false; tuple: floats separated by ``:``).  A name not in ``kinds`` or a value that does not convert
    raises ConfigError naming it (``what`` names the set of names in the message).  The one parser of the
    project's ``NAME=VALUE,...`` options (``HOST=``, ``DCOH=``)."""
    out = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or name not in kinds:
            raise ConfigError(f"{item!r}: expected name=value with name one of {what} "
                              f"({', '.join(sorted(kinds))})")
        kind = kinds[name]
        try:
            if kind is bool:
                if value.lower() not in ("0", "1", "true", "false"):
                    raise ValueError(value)
                out[name] = value.lower() in ("1", "true")
            elif kind is tuple:
                out[name] = tuple(float(v) for v in value.split(":"))
            else:
                out[name] = kind(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r}: not a {kind.__name__}") from None
    return out
