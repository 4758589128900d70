"""The golden model's bookkeeping for speed: the device's count of outstanding accesses (checked by
``Device.check``) and the timed loop's wake times."""

import pytest

from models.config import Config
from models.dcoh import CpuOp
from models.link import WakeTimes
from models.system import System


def test_the_access_count_follows_the_caches_and_the_check_names_a_count_out_of_step():
    """``Device.active_ops`` (what the timed loop reads instead of scanning ``ops`` for an idle cache)
    counts the accesses outstanding; a count out of step with ``ops`` fails the device's check."""
    sysm = System(Config(), timed=True)
    dev = sysm.devices[0]
    assert dev.active_ops == 0
    assert dev.accept(CpuOp("load", 0, 0x40, 0, 0), 0)
    assert dev.active_ops == 1 and dev.ops[0] is not None
    dev.check()
    dev.active_ops = 0                      # out of step on purpose
    with pytest.raises(AssertionError, match="counts 0 accesses outstanding, its caches 1"):
        dev.check()


def test_wake_times_keep_each_time_once_and_come_out_in_order():
    """A time pushed again while pending is not a second entry; once popped it can be pushed again."""
    w = WakeTimes()
    for t in (7, 3, 7, 5, 3, 7):
        w.push(t)
    assert sorted(w.heap) == [3, 5, 7] and w.pending == {3, 5, 7}
    assert [w.pop(), w.pop()] == [3, 5]
    w.push(3)
    assert [w.pop(), w.pop()] == [3, 7] and not w.heap and not w.pending


def test_the_watchdogs_oldest_age_is_the_oldest_outstanding_item():
    """``System.watchdog`` compares ``_oldest_age`` (no description built) before it describes anything:
    it must be the largest age ``outstanding()`` lists, whichever kind of item is the oldest (a host
    transaction active or queued, a device request, a waiting access): at every step of a busy run, each
    kind present is made the oldest in turn."""
    import random
    from models.system import Workload, drive
    sysm = System(Config(host_traffic=0.3, max_outstanding=4), timed=True)
    wl, host_rng = Workload(sysm.cfg, random.Random(3)), random.Random(4)
    made_oldest = set()

    def check():
        out = sysm.outstanding()
        assert sysm._oldest_age() == (out[0][0] if out else -1)

    def next_op(d, k):
        if host_rng.random() < 0.3:
            sysm.host.host_access(*wl.host_op(host_rng), sysm.now)
        check()
        host = sysm.host
        kinds = {"host active": list(host.active.values()), "host queued": [t for q in host.queue.values() for t in q],
                 "device request": [t for dev in sysm.devices for t in dev.txns.values()],
                 "waiting access": [op for dev in sysm.devices for op in dev.queue]}
        for kind, items in kinds.items():
            if items:
                item, t0 = items[-1], items[-1].t0
                item.t0 = -10 ** 6             # the oldest by far
                check()
                item.t0 = t0
                made_oldest.add(kind)
        return wl.next_op(k)
    drive(sysm, next_op, lambda: 1, 600)
    assert made_oldest == {"host active", "host queued", "device request", "waiting access"}, made_oldest


def test_messages_are_values():
    """``Msg`` (a class of its own, so that the compiled build gives it C fields) compares, hashes and
    prints by its fields as the NamedTuple it replaced did; ``replace`` copies with fields changed."""
    from cxl.messages import Channel, D2HReqOpcode
    from models.link import Msg
    a = Msg(Channel.D2H_REQ, D2HReqOpcode.RdOwn, 3, 0x40, data=7)
    b = Msg(Channel.D2H_REQ, D2HReqOpcode.RdOwn, 3, 0x40, 0, 7, False)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1 and not (a != b)
    assert a != a.replace(uid=4) and a.replace(uid=4).fields()[2] == 4 and a.uid == 3
    assert a != (Channel.D2H_REQ, D2HReqOpcode.RdOwn, 3, 0x40, 0, 7, False)      # not a tuple
    assert repr(a) == (f"Msg(chan={Channel.D2H_REQ!r}, op={D2HReqOpcode.RdOwn!r}, uid=3, line=64, "
                       "rsp_data=0, data=7, bogus=False)")
    with pytest.raises(TypeError, match="no field color"):
        a.replace(color=1)
