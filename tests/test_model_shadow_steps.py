"""The golden model's device in the steps a shadow of the RTL DCOH takes (tb/system_tb.py): the rescan of the
waiting accesses as a step of its own (``Device.defer_service``), and a probe closed when the caches take it
and worked when the engine works its line (``close_probe`` / ``finish_probe``); a GO that comes while its
line's snoop waits for its probe is named."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenario import Scenario, load_waiting_for_a_cqid             # noqa: E402
from cxl.messages import Channel, D2HReqOpcode as Req, H2DReqOpcode as Snp  # noqa: E402
from models.dcoh import ProtocolError                                # noqa: E402
from models.link import Msg                                          # noqa: E402

L = 0x40            # set 0 of the 4-set snoop filter
M = 0x41            # set 1 (and N set 2): no victim needed for any of them
N = 0x42


def _deliver_raw(s, d, chan, op=None):
    """Deliver one message without the scenario's settle() (which runs every device's service())."""
    i = s.find(d, chan, op)
    assert i is not None and i in s.sys.deliverable(d, chan <= Channel.D2H_DATA), f"{chan.name} not deliverable"
    return s.sys.deliver(d, chan <= Channel.D2H_DATA, i)


def _second_load_waits_for_the_cqid(defer):
    """Caches 0 and 1 load L and N and hold both CQIDs; cache 2's load of M waits for one.  The GO and the
    Data that complete the first load are delivered; returns (whether M's load had issued by then, and
    after service())."""
    s, dev = load_waiting_for_a_cqid(L, N, M)
    dev.defer_service = defer
    _deliver_raw(s, 0, Channel.H2D_RSP)
    _deliver_raw(s, 0, Channel.H2D_DATA)
    assert s.state(0, 0, L)[0] == "S", "the first load did not complete"
    issued_at_completion = M in dev.by_line
    dev.service(0)
    return issued_at_completion, M in dev.by_line


def test_deferred_service_leaves_the_waiting_accesses_to_the_caller():
    assert _second_load_waits_for_the_cqid(defer=False) == (True, True)
    assert _second_load_waits_for_the_cqid(defer=True) == (False, True)


def _probing_snoop():
    """Device 0 holds L in M; device 1's load makes the host snoop it (SnpData): the snoop needs the
    M copy's data, so it probes device 0's cache and waits in the coalescer."""
    s = Scenario()
    s.cpu(0, 0, "store", L, value=7)
    s.drain()
    s.cpu(1, 0, "load", L)
    s.deliver(1, Channel.D2H_REQ, Req.RdShared)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpData)
    dev = s.dev(0)
    assert L in dev.work and dev.coal.groups, "the snoop should wait for its probe"
    return s, dev


def _flights(s):
    return [[(m.chan, m.op, m.uid, m.line, m.data) for _, m, _ in s.sys.links[d].flight[up]]
            for d in range(2) for up in (True, False)]


def test_a_probe_closed_then_worked_is_the_flush():
    whole, dev_w = _probing_snoop()
    block = next(iter(dev_w.coal.groups))
    dev_w.flush(block, 0)
    split, dev_s = _probing_snoop()
    lines = dev_s.close_probe(block)
    assert lines == [L] and not dev_s.coal.groups and L in dev_s.work, \
        "closing a probe should only take its group out of the coalescer"
    assert dev_s.caches[0][L][1] == 7 and not any(m.chan is Channel.D2H_RSP for _, m, _ in
                                                  split.sys.links[0].flight[True]), \
        "closing a probe should leave the copies and the snoop's answer to finish_probe"
    dev_s.finish_probe(lines, 0)
    assert dev_s.key() == dev_w.key() and _flights(split) == _flights(whole)
    split.drain()
    assert split.state(1, 0, L) == ("S", 7) and split.state(0, 0, L)[0] == "S"


def test_a_go_while_the_lines_snoop_is_pending_is_a_protocol_error():
    """Device 0's cache 0 holds L in S and stores to it (RdOwn, SM_AD); an SnpInv to L (put straight into
    the device: the golden host never sends it here) must probe the S copy, and while its probe is out the
    host sends the upgrade's GO.  CXL 3.x §3.2.5.2 forbids that GO (no GO to an address while a snoop to
    it is pending, docs/sources.md §1.7): the model names it; the RTL counts it (GO_DURING_SNOOP) and
    answers after the data (tests/test_rtl_dcoh.py)."""
    s = Scenario()
    s.cpu(0, 0, "load", L)
    s.drain()
    dev = s.dev(0)
    s.cpu(0, 0, "store", L, value=9)
    s.deliver(0, Channel.D2H_REQ, Req.RdOwn)
    dev.on_snoop(Msg(Channel.H2D_REQ, Snp.SnpInv, 99, L), 0)
    assert L in dev.work and dev.coal.groups, "the snoop should wait for its probe"
    with pytest.raises(ProtocolError, match="while the snoop SnpInv .UQID 99. to line 0x40 is still being answered"):
        _deliver_raw(s, 0, Channel.H2D_RSP)
