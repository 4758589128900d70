"""The golden model's wake-up rule for waiting accesses (``Device.woken``, ``CpuOp.why``): a waiting access
is tried again only after an event freed what its last failed try waits for.  Checked three ways: scripted
races where the rule must leave an access out and then must wake it, the rule's own check
(``Device.verify_wake``: after every rescan, a rescan of every waiting access must change nothing) over
seeded runs at the edge sizes, and that check catching a completion that forgets to wake."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenario import Scenario, load_waiting_for_a_cqid             # noqa: E402
from cxl.messages import Channel, D2HReqOpcode as Req               # noqa: E402
from models.config import Config                                   # noqa: E402
from models.dcoh import Device                                     # noqa: E402
from models.system import run                                      # noqa: E402

L, M, N = 0x40, 0x41, 0x42      # three sets of the scenario's 4-set snoop filter: no victim needed


def test_an_event_that_frees_nothing_skips_the_rescan_and_a_completion_wakes_it(monkeypatch):
    monkeypatch.setattr(Device, "verify_wake", True)
    s, dev = load_waiting_for_a_cqid(L, N, M)
    skipped = dev.skipped_services
    s.deliver(0, Channel.H2D_RSP)                      # L's GO: its data is still to come, no CQID freed
    assert M not in dev.by_line and dev.skipped_services > skipped, \
        "a GO that completes nothing should leave the waiting load untried"
    s.deliver(0, Channel.H2D_DATA)                     # L completes: its CQID is free
    assert M in dev.by_line, "the completion should wake the waiting load, which takes the freed CQID"


def test_an_access_waiting_for_its_line_is_woken_by_its_line_alone(monkeypatch):
    """Cache 2's load of L waits while cache 0's load of L is outstanding (its line busy): N's completion
    frees a CQID and N's line, which it does not wait for, so the rescan leaves it out; L's completion
    wakes it (an internal fill from cache 0's new copy)."""
    monkeypatch.setattr(Device, "verify_wake", True)
    s = Scenario(caches=3, max_outstanding=4)
    dev = s.dev(0)
    s.cpu(0, 0, "load", L)
    s.cpu(0, 1, "load", N)
    s.cpu(0, 2, "load", L)
    assert [op.line for op in dev.queue] == [L] and dev.queue[0].why == (("line", L),)
    for line in (L, N):
        s.deliver(0, Channel.D2H_REQ, Req.RdShared, line=line)
    left_out = dev.skipped_tries
    s.deliver(0, Channel.H2D_RSP, line=N)
    s.deliver(0, Channel.H2D_DATA, line=N)
    assert s.state(0, 1, N)[0] == "S" and [op.line for op in dev.queue] == [L], "N's load should complete alone"
    assert dev.skipped_tries > left_out, "N's completion should leave the load of L out of the rescan"
    s.deliver(0, Channel.H2D_RSP, line=L)
    s.deliver(0, Channel.H2D_DATA, line=L)
    assert not dev.queue and s.state(0, 2, L)[0] == "S", "L's completion should wake cache 2's load of L"


def test_a_completion_that_forgets_to_wake_is_caught(monkeypatch):
    """The rule's own check can fail: a completion made not to wake (the mutation) leaves a rescan
    skipped that would issue the waiting load, and ``verify_wake`` names it."""
    monkeypatch.setattr(Device, "verify_wake", True)
    complete = Device._complete

    def complete_without_waking(self, t, now):
        defer, self.defer_service = self.defer_service, True
        complete(self, t, now)
        self.defer_service, self.woken = defer, set()
        if not defer:
            self.service(now)

    monkeypatch.setattr(Device, "_complete", complete_without_waking)
    s, dev = load_waiting_for_a_cqid(L, N, M)
    s.deliver(0, Channel.H2D_RSP)
    with pytest.raises(AssertionError, match="wake-up rule left out an access"):
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
