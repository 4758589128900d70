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

from cxl.control import CONTROL_KINDS
from cxl.flit import SLOT_FORMATS, Direction
from cxl.coherence import REQUEST_START, RESPONSE_TABLE, SNOOP_TABLE

__all__ = ["state_event_universe", "slot_format_universe", "flit_kind_universe", "closure",
           "closure_report"]


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
