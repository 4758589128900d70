"""The parameters of the four fabrics `make report` compares, as one set: named presets and parameter files.

A parameter file is JSON with any of these keys (every one optional)::

    {"preset": "simulator",
     "cxl": {"port_ns": 62.0, "jitter_ns": 0.0},
     "rdma": {"poll_min_ns": 500.0, "poll_max_ns": 1000.0},
     "pcie_host_polling": {"rtt_min_ns": 400.0, "rtt_max_ns": 600.0},
     "nvlink_polling": {"links": 12}}

The preset is applied first, then the file's values.  Every name is checked: an unknown key, a value of
the wrong type, or a value the model rejects raises :class:`ParamError` naming ``fabric.parameter``.
The parameter names, units and sources are those of each model's ``SOURCES`` (docs/comparison.md has
the table).
"""

import json
import math
from dataclasses import dataclass, fields

from .cxl_timing import CxlParams, PRESETS as CXL_PRESETS
from .nvlink_polling import NvlinkParams
from .pcie_polling import PcieParams
from .rdma import RdmaParams

__all__ = ["ParamError", "FabricParams", "FABRICS", "PRESETS", "load", "from_dict"]

# results.json name -> parameter class
FABRICS = {"cxl": CxlParams, "rdma": RdmaParams, "pcie_host_polling": PcieParams,
           "nvlink_polling": NvlinkParams}

# Presets: fabric -> overrides of its defaults.
PRESETS = {
    "measured": {},
    "simulator": {"cxl": CXL_PRESETS["simulator"]},
    "unloaded": {"cxl": CXL_PRESETS["unloaded"]},
    "nvl-pair": {"nvlink_polling": {"links": 12}},
}
PRESET_NOTES = {
    "measured": "defaults: CXL per-hop cost from measured hardware, every fabric at its sourced defaults",
    "simulator": "CXL port and interconnect at the cxlsim2 simulator defaults (62 + 15 ns per hop)",
    "unloaded": "CXL at the simulator defaults without home-agent occupancy, link bandwidth limit or "
                "jitter (the golden model's bare structure)",
    "nvl-pair": "NVLink with 12 links (the 600 GB/s bridge of an H100 NVL pair) instead of 18",
}


class ParamError(ValueError):
    """A parameter file or preset is malformed; the message names the key."""


@dataclass(frozen=True)
class FabricParams:
    cxl: CxlParams
    rdma: RdmaParams
    pcie_host_polling: PcieParams
    nvlink_polling: NvlinkParams
    preset: str = "measured"

    def overrides(self):
        """fabric -> {parameter: value} for every parameter that differs from its default."""
        out = {}
        for name, cls in FABRICS.items():
            base = cls().as_dict()
            mine = getattr(self, name).as_dict()
            diff = {k: v for k, v in mine.items() if base[k] != v}
            if diff:
                out[name] = diff
        return out


def _check_value(where, default, value):
    """``value`` must be of the kind the default is: a number for a float, an integer for an int, a
    bool for a bool, a dict for a dict (a None default takes a number or null)."""
    def is_num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if isinstance(value, str) and value.lower() in ("inf", "infinity") and isinstance(default, float):
        return math.inf
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        kind = "true or false"
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        kind = "an integer"
    elif isinstance(default, float) or default is None:
        ok = is_num(value) or (default is None and value is None)
        kind = "a number" + (" or null" if default is None else "")
    elif isinstance(default, dict):
        ok = isinstance(value, dict) and all(is_num(v) for v in value.values())
        kind = "an object of numbers"
    else:
        ok, kind = True, ""
    if not ok:
        raise ParamError(f"{where}: expected {kind}, got {value!r}")
    return float(value) if isinstance(default, float) and is_num(value) else value


def _build(name, overrides):
    cls = FABRICS[name]
    defaults = {f.name: getattr(cls(), f.name) for f in fields(cls)}
    kw = {}
    for key, value in overrides.items():
        if key not in defaults:
            raise ParamError(f"{name}.{key}: unknown parameter (known: {', '.join(sorted(defaults))})")
        kw[key] = _check_value(f"{name}.{key}", defaults[key], value)
    try:
        return cls().with_(**kw) if kw else cls()
    except ValueError as e:
        msg = str(e)
        key = msg.split("=", 1)[0]
        raise ParamError(f"{name}.{msg}" if key in defaults else f"{name}: {msg}") from None


def from_dict(d, preset=None):
    """FabricParams from a parsed parameter file (``preset`` names a preset applied first; the file's
    own "preset" key overrides it)."""
    if not isinstance(d, dict):
        raise ParamError(f"a parameter file must be a JSON object, got {type(d).__name__}")
    unknown = set(d) - set(FABRICS) - {"preset"}
    if unknown:
        raise ParamError(f"{sorted(unknown)[0]}: unknown key (known: preset, {', '.join(FABRICS)})")
    name = d.get("preset", preset) or "measured"
    if name not in PRESETS:
        raise ParamError(f"preset: unknown preset {name!r} (known: {', '.join(PRESETS)})")
    built = {}
    for fab in FABRICS:
        given = d.get(fab, {})
        if not isinstance(given, dict):
            raise ParamError(f"{fab}: expected an object of parameters, got {given!r}")
        built[fab] = _build(fab, {**PRESETS[name].get(fab, {}), **given})
    return FabricParams(preset=name, **built)


def load(path=None, preset=None):
    """FabricParams from a JSON parameter file (None: defaults) and/or a preset name."""
    if path is None:
        return from_dict({}, preset)
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise ParamError(f"{path}: cannot read the parameter file ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ParamError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    try:
        return from_dict(d, preset)
    except ParamError as e:
        raise ParamError(f"{path}: {e}") from None
