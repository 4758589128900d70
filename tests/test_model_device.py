"""The golden model device's own consistency check (``Device.check``) on its bookkeeping."""

import pytest

from models.config import Config
from models.dcoh import CpuOp
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
