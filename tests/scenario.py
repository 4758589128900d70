"""Scripted runs of the untimed golden model, for race tests: start accesses, deliver chosen
messages in a chosen order, then drain everything and check all invariants.  Every move is recorded in
``trace`` (the move format of tests/dcoh_cosim.py), so the same race replays against the RTL."""

from cxl.messages import Channel, D2HReqOpcode
from models.config import Config
from models.dcoh import CpuOp
from models.system import System


class Scenario:
    def __init__(self, **cfg):
        # the host's directory is exact unless a race asks for the finite one; its own accesses come
        # only from the race (host())
        base = dict(devices=2, caches=1, sf_sets=4, sf_ways=2, max_outstanding=4, credits=4,
                    coalesce_window=0, coalesce_block=4, host_dir="exact", host_traffic=0, host_data_first=0,
                    host_data_late=0, clean_evict_pull=0)
        base.update(cfg)
        self.cfg = Config(**base)
        self.sys = System(self.cfg, timed=False)
        self.log = []
        self.trace = []

    def dev(self, d):
        return self.sys.devices[d]

    def host(self, kind, line, value=0):
        """The host's own access (models/host.py ``host_access``), recorded so that the RTL replay makes it too."""
        self.sys.host.host_access(kind, line, value, 0)
        self.trace.append(("host", kind, line, value))
        self.sys.settle()
        self.sys.check_all()

    def cpu(self, d, k, kind, line, value=0, variant=0):
        assert self.sys.devices[d].accept(CpuOp(kind, k, line, value, variant), 0), "cache busy"
        self.trace.append(("cpu", d, k, kind, line, value, variant))
        self.sys.settle()
        self.sys.check_all()

    def find(self, d, chan, op=None, line=None):
        """Index of the first in-flight message on link d matching, or None."""
        up = chan <= Channel.D2H_DATA
        for i, (_, m, _) in enumerate(self.sys.links[d].flight[up]):
            if m.chan is chan and (op is None or m.op is op) and (line is None or m.line == line):
                return i
        return None

    def deliverable(self, d, chan, op=None, line=None):
        i = self.find(d, chan, op, line)
        return i is not None and i in self.sys.deliverable(d, chan <= Channel.D2H_DATA)

    def deliver(self, d, chan, op=None, line=None):
        i = self.find(d, chan, op, line)
        assert i is not None, f"no {chan.name} {getattr(op, 'name', '')} in flight on link {d}"
        up = chan <= Channel.D2H_DATA
        assert i in self.sys.deliverable(d, up), f"{chan.name} {getattr(op, 'name', '')} on link {d} is not deliverable"
        msg = self.sys.deliver(d, up, i)
        self.trace.append(("deliver", d, up, i))
        self.log.append((d, msg))
        self.sys.settle()
        self.sys.check_all()
        return msg

    def flush(self, d):
        dev = self.sys.devices[d]
        for b in list(dev.coal.groups):
            dev.flush(b, 0)
            self.trace.append(("flush", d, b))
        self.sys.settle()
        self.sys.check_all()

    def drain(self, limit=10000):
        """Deliver (oldest first) and flush until quiescent; fails on a deadlock."""
        for _ in range(limit):
            if self.sys.quiescent():
                return
            moved = False
            for d in range(self.sys.cfg.devices):
                if self.sys.devices[d].coal.groups:
                    self.flush(d)
                    moved = True
                for up in (True, False):
                    idx = self.sys.deliverable(d, up)
                    if idx:
                        msg = self.sys.deliver(d, up, idx[0])
                        self.trace.append(("deliver", d, up, idx[0]))
                        self.log.append((d, msg))
                        self.sys.settle()
                        self.sys.check_all()
                        moved = True
            if not moved:
                raise AssertionError(f"deadlock: nothing deliverable; outstanding {self.sys.outstanding()}")
        raise AssertionError("drain did not finish")

    def state(self, d, k, line):
        c = self.sys.devices[d].caches[k].get(line)
        return (c[0].name, c[1]) if c else ("I", None)


def load_waiting_for_a_cqid(first, second, waiting):
    """Device 0, three caches and two CQIDs: caches 0 and 1 load lines ``first`` and ``second`` (different
    snoop-filter sets) and hold both CQIDs, so cache 2's load of ``waiting`` waits for one; the first
    load's request is delivered to the host.  Returns the scenario and device 0."""
    s = Scenario(caches=3, max_outstanding=2)
    dev = s.dev(0)
    s.cpu(0, 0, "load", first)
    s.cpu(0, 1, "load", second)
    s.cpu(0, 2, "load", waiting)
    assert [op.line for op in dev.queue] == [waiting], "the third load should wait for a CQID"
    s.deliver(0, Channel.D2H_REQ, D2HReqOpcode.RdShared, line=first)
    return s, dev
