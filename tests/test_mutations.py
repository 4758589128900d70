"""The checks must be able to fail.  Each test breaks one protocol rule on purpose (monkeypatched)
and requires that both the exhaustive search and the Hypothesis state machine catch it, with the
invariant that should catch it named in the error.

Each mutation patches the model's class (``host.Host``, ``dcoh.Device``, ``link.Link``), or the subclass
of it given as ``cls``: tests/model_trace.py breaks its recording subclasses, which it can do in the
compiled build too, whose classes are extension types that take no new attributes (models/compiled.py)."""

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from cxl.messages import Channel, H2DReqOpcode as Snp
from models import dcoh, host, link
from models.explore import explore, tiny
from cxl.coherence import STALL, DevState
from test_model_stateful import CoherenceMachine


def _skip_one_sharer(monkeypatch, cls=None):
    """Host forgets to SnpInv the highest-numbered other holder."""
    cls = cls or host.Host
    orig = cls._start

    def start(self, txn, now):
        holders = self.dir.get(txn.line, {})
        others = sorted(d for d in holders if d != txn.dev)
        if txn.dev is not None and others and host.HOST_TABLE[txn.op]["snoop"] and \
                host.HOST_TABLE[txn.op]["snoop"][0] is Snp.SnpInv:
            hidden = holders.pop(others[-1])
            orig(self, txn, now)
            holders[others[-1]] = hidden
            return
        orig(self, txn, now)
    monkeypatch.setattr(cls, "_start", start)


def _drop_writeback(monkeypatch, cls=None):
    """Host acknowledges a DirtyEvict but does not write its data to memory."""
    cls = cls or host.Host
    orig = cls._pulled

    def pulled(self, txn, msg, now):
        old = self.mem.get(txn.line)
        orig(self, txn, msg, now)
        if txn.op.name == "DirtyEvict":
            if old is None:
                self.mem.pop(txn.line, None)
            else:
                self.mem[txn.line] = old
    monkeypatch.setattr(cls, "_pulled", pulled)


def _forget_presence(monkeypatch, cls=None):
    """DCOH fills an internal cache from a peer but does not record it in the snoop filter."""
    cls = cls or dcoh.Device
    orig = cls._internal_fill

    def fill(self, e, k, line, write):
        before = e.presence
        orig(self, e, k, line, write)
        if not write:
            e.presence = before
    monkeypatch.setattr(cls, "_internal_fill", fill)


def _double_credit(monkeypatch, cls=None):
    """The snoop-response channel returns two credits for one message."""
    cls = cls or link.Link
    orig = cls.consumed

    def consumed(self, chan, now):
        orig(self, chan, now)
        if chan is Channel.D2H_RSP:
            self.credits[chan] += 1
    monkeypatch.setattr(cls, "consumed", consumed)


def _stall_forever(monkeypatch, cls=None):
    """The snoop handler holds SnpData to an E line forever (a table entry: ``cls`` is not used)."""
    monkeypatch.setitem(dcoh.snoop_transition.__globals__["SNOOP_TABLE"], (DevState.E, Snp.SnpData),
                        (STALL, DevState.E, 0))


def _evict_without_snoop(monkeypatch):
    """The finite host directory drops its pseudo-LRU entry instead of back-invalidating the holders."""
    def maybe_evict(self, s, now):
        q, sf = self.set_wait.get(s), self.sf
        if not q or s in self.evicting or sf.free_way(s) is not None or \
                not any(self._needs_entry(t) for t in q):
            return
        way = sf.victim(s, self.active)
        if way is not None:
            victim = sf.tags[s][way]
            sf.free(victim)
            self.dir.pop(victim, None)
            self._retry_set(s, now)
    monkeypatch.setattr(host.Host, "_maybe_evict", maybe_evict)


def test_exhaustive_search_catches_a_host_directory_eviction_without_snoop(monkeypatch):
    _evict_without_snoop(monkeypatch)
    r = explore(tiny(1, 2, host_dir="finite"), lines=(0, 1), cpu_kinds=("load", "store", "evict"), variants=(0,),
                budget=3, max_states=200000, stop_at_first=True)
    assert r["first_violation"], f"exhaustive search found nothing in {r['states']} states"
    assert "host directory inclusion" in r["first_violation"]["error"], r["first_violation"]


def test_hypothesis_catches_a_host_directory_eviction_without_snoop(monkeypatch):
    _evict_without_snoop(monkeypatch)
    with pytest.raises(BaseException) as info:
        run_state_machine_as_test(CoherenceMachine, settings=settings(
            max_examples=400, stateful_step_count=40, deadline=None, derandomize=True, database=None,
            phases=[Phase.generate], report_multiple_bugs=False, suppress_health_check=list(HealthCheck)))
    assert "host directory inclusion" in str(info.value), str(info.value)


MUTATIONS = [
    ("skip SnpInv to one sharer", _skip_one_sharer, 1, ("SWMR", "data value", "host directory inclusion")),
    ("drop the data of a DirtyEvict", _drop_writeback, 1, ("data value",)),
    ("forget the presence bit on an internal fill", _forget_presence, 2, ("inclusion", "snoop filter")),
    ("return two credits for one snoop response", _double_credit, 1, ("credit conservation",)),
    ("hold a snoop forever", _stall_forever, 1, ("deadlock",)),
]


@pytest.mark.parametrize("name, mutate, caches, expect", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_exhaustive_search_catches(monkeypatch, name, mutate, caches, expect):
    mutate(monkeypatch)
    r = explore(tiny(caches, 1), lines=(0,), cpu_kinds=("load", "store", "evict"), variants=(0, 1),
                budget=5, max_states=200000, stop_at_first=True)
    found = r["first_violation"] or r["first_deadlock"]
    assert found, f"{name}: exhaustive search found nothing in {r['states']} states"
    text = r["first_violation"]["error"] if r["first_violation"] else "deadlock"
    assert any(e in text for e in expect), text


@pytest.mark.parametrize("name, mutate, caches, expect", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_hypothesis_catches(monkeypatch, name, mutate, caches, expect):
    mutate(monkeypatch)
    with pytest.raises(BaseException) as info:
        run_state_machine_as_test(CoherenceMachine, settings=settings(
            max_examples=400, stateful_step_count=40, deadline=None, derandomize=True, database=None,
            phases=[Phase.generate], report_multiple_bugs=False, suppress_health_check=list(HealthCheck)))
    text = str(info.value)
    assert any(e in text for e in expect), text
