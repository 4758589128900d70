"""The golden model's wake-up rule for waiting accesses (``Device.woken``): the rescan after an event runs
only when the event freed something a failed try waits for.  Checked three ways: a scripted race where
the rule must skip and then must wake, the rule's own check (``Device.verify_wake``: every skipped
rescan is done anyway and must change nothing) over seeded runs at the edge sizes, and that check
catching a completion that forgets to wake."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenario import Scenario                                      # noqa: E402
from cxl.messages import Channel, D2HReqOpcode as Req               # noqa: E402
from models.config import Config                                   # noqa: E402
from models.dcoh import Device                                     # noqa: E402
from models.system import run                                      # noqa: E402

L, M, N = 0x40, 0x41, 0x42      # three sets of the scenario's 4-set snoop filter: no victim needed


def _load_waiting_for_a_cqid():
    """Caches 0 and 1 load L and N and hold both CQIDs; cache 2's load of M waits for one."""
    s = Scenario(caches=3, max_outstanding=2)
    dev = s.dev(0)
    s.cpu(0, 0, "load", L)
    s.cpu(0, 1, "load", N)
    s.cpu(0, 2, "load", M)
    assert [op.line for op in dev.queue] == [M], "the third load should wait for a CQID"
    s.deliver(0, Channel.D2H_REQ, Req.RdShared)       # L's request (the first in flight)
    return s, dev


def test_an_event_that_frees_nothing_skips_the_rescan_and_a_completion_wakes_it(monkeypatch):
    monkeypatch.setattr(Device, "verify_wake", True)
    s, dev = _load_waiting_for_a_cqid()
    skipped = dev.skipped_services
    s.deliver(0, Channel.H2D_RSP)                      # L's GO: its data is still to come, no CQID freed
    assert M not in dev.by_line and dev.skipped_services > skipped, \
        "a GO that completes nothing should leave the waiting load untried"
    s.deliver(0, Channel.H2D_DATA)                     # L completes: its CQID is free
    assert M in dev.by_line, "the completion should wake the waiting load, which takes the freed CQID"


def test_a_completion_that_forgets_to_wake_is_caught(monkeypatch):
    """The rule's own check can fail: a completion made not to wake (the mutation) leaves a rescan
    skipped that would issue the waiting load, and ``verify_wake`` names it."""
    monkeypatch.setattr(Device, "verify_wake", True)
    complete = Device._complete

    def complete_without_waking(self, t, now):
        defer, self.defer_service = self.defer_service, True
        complete(self, t, now)
        self.defer_service, self.woken = defer, False
        if not defer:
            self.service(now)

    monkeypatch.setattr(Device, "_complete", complete_without_waking)
    s, dev = _load_waiting_for_a_cqid()
    s.deliver(0, Channel.H2D_RSP)
    with pytest.raises(AssertionError, match="wake-up rule skipped a rescan"):
        s.deliver(0, Channel.H2D_DATA)


# the sizes where accesses wait most: few CQIDs and work entries, small or narrow snoop filters, the
# host's own traffic snooping lines away
EDGES = [dict(),
         dict(max_outstanding=2, work_entries=1, sf_sets=2, sf_ways=2),
         dict(max_outstanding=3, work_entries=2, sf_sets=4, sf_ways=1, caches=3),
         dict(sf_ways=8, sf_sets=2, work_entries=2),
         dict(host_traffic=0.3, max_outstanding=4, sf_sets=2, sf_ways=2)]


@pytest.mark.parametrize("edge", range(len(EDGES)))
def test_every_skipped_rescan_would_have_changed_nothing(monkeypatch, edge):
    monkeypatch.setattr(Device, "verify_wake", True)
    skipped = 0
    made = Device.__init__

    def counted(self, *a, **k):
        made(self, *a, **k)
        devices.append(self)

    monkeypatch.setattr(Device, "__init__", counted)
    for seed in (1, 2):
        devices = []
        r = run(Config(**EDGES[edge]), 1500, seed=seed)
        assert r["transactions"] >= 1500 and r["violations"] == 0, f"seed {seed}: {r['violations']}"
        skipped += sum(d.skipped_services for d in devices)
    assert skipped > 0, "the wake-up rule never skipped a rescan: the check above checked nothing"
