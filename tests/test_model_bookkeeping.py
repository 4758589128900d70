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
