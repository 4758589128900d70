"""One test per race of the protocol (a snoop crossing a GO, an eviction crossing a snoop, ...).
Each forces the interleaving by choosing which message is delivered when, checks every invariant after every step, checks that the racy path was
really taken (the device's (state, event) coverage), and checks the final states."""

from cxl.messages import Channel, D2HReqOpcode as Req, D2HRspOpcode as Rsp, H2DReqOpcode as Snp, \
    H2DRspOpcode as HRsp
from scenario import Scenario

L = 0x10


def test_two_devices_rdown_one_line_at_once():
    s = Scenario()
    s.cpu(0, 0, "store", L, value=1)
    s.cpu(1, 0, "store", L, value=2)
    s.deliver(0, Channel.D2H_REQ, Req.RdOwn)         # dev0 reaches the host first: serialized first
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)         # dev1 waits behind it at the host
    # the host answered dev0 and snooped it for dev1; the snoop may not pass dev0's GO
    assert not s.deliverable(0, Channel.H2D_REQ, Snp.SnpInv)
    s.deliver(0, Channel.H2D_RSP, HRsp.GO)
    # GO seen, data not yet: dev0 holds the snoop until its data arrives
    assert s.dev(0).line_state(L).name == "IM_D"
    assert not s.deliverable(0, Channel.H2D_REQ, Snp.SnpInv)
    s.deliver(0, Channel.H2D_DATA)
    assert s.state(0, 0, L) == ("M", 1)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    s.drain()
    assert s.state(0, 0, L) == ("I", None)
    assert s.state(1, 0, L) == ("M", 2)
    assert s.sys.checker.value(L) == 2
    assert s.dev(0).coverage[("M", "SnpInv")] == 1


def test_snpinv_while_own_rdown_pending():
    s = Scenario()
    s.cpu(0, 0, "load", L)
    s.drain()
    s.cpu(1, 0, "load", L)
    s.drain()
    assert s.state(0, 0, L)[0] == "S" and s.state(1, 0, L)[0] == "S"
    s.cpu(0, 0, "store", L, value=5)                 # dev0: RdOwn from S, SM_AD
    s.cpu(1, 0, "store", L, value=6)                 # dev1: RdOwn from S
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)         # dev1 first: the host sends SnpInv to dev0
    s.deliver(0, Channel.D2H_REQ, Req.RdOwn)
    assert s.dev(0).line_state(L).name == "SM_AD"
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    assert s.dev(0).line_state(L).name == "SM_AD"    # its S copy is still readable until the probe
    s.flush(0)
    assert s.dev(0).line_state(L).name == "IM_AD"    # lost its S copy, request still pending
    assert s.dev(0).coverage[("SM_AD", "SnpInv")] == 1
    s.drain()
    assert s.state(0, 0, L) == ("M", 5)              # dev0 was serialized after dev1
    assert s.state(1, 0, L) == ("I", None)
    assert s.sys.checker.value(L) == 5


def test_dirtyevict_racing_snpdata():
    s = Scenario()
    s.cpu(0, 0, "store", L, value=7)
    s.drain()
    s.cpu(0, 0, "evict", L)                          # DirtyEvict, MI_A
    s.cpu(1, 0, "load", L)                           # RdShared
    s.deliver(1, Channel.D2H_REQ, Req.RdShared)      # the read wins: SnpData to dev0
    s.deliver(0, Channel.D2H_REQ, Req.DirtyEvict)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpData)
    assert s.dev(0).coverage[("MI_A", "SnpData")] == 1
    rsp = s.deliver(0, Channel.D2H_RSP)
    assert rsp.op is Rsp.RspIFwdM
    s.drain()
    assert s.dev(0).coverage[("II_A", "GO_WritePull")] == 1
    assert s.sys.host.bogus_dropped == 1             # the stale write-back was dropped
    assert s.state(1, 0, L) == ("S", 7)
    assert s.sys.host.memory(L) == 7


def _fill_victim(s):
    s.cpu(0, 0, "store", L, value=3)
    s.drain()


def test_sf_capacity_eviction_while_snoop_to_victim_in_flight_snoop_first():
    s = Scenario(sf_sets=1, sf_ways=1, coalesce_window=4)
    _fill_victim(s)
    s.cpu(1, 0, "store", L, value=4)                 # dev1 RdOwn -> SnpInv to dev0 on its way
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)
    s.cpu(0, 0, "load", L + 1)                       # needs dev0's only SF way: back-invalidate L
    assert L in s.dev(0).work                        # back-invalidation waits in the coalescer
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)        # the snoop joins it
    assert s.dev(0).work[L].snoop is not None
    s.flush(0)
    assert s.dev(0).coverage[("M", "SnpInv")] == 1
    s.drain()
    assert s.state(1, 0, L) == ("M", 4)
    assert s.state(0, 0, L) == ("I", None)
    assert s.state(0, 0, L + 1)[0] in ("S", "E")
    assert s.sys.host.bogus_dropped == 0             # the snoop took the data; no eviction was needed


def test_sf_capacity_eviction_while_snoop_to_victim_in_flight_eviction_first():
    s = Scenario(sf_sets=1, sf_ways=1, coalesce_window=4)
    _fill_victim(s)
    s.cpu(1, 0, "store", L, value=4)
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)
    s.cpu(0, 0, "load", L + 1)
    s.flush(0)                                       # back-invalidation done: DirtyEvict queued, MI_A
    assert s.dev(0).line_state(L).name == "MI_A"
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    assert s.dev(0).coverage[("MI_A", "SnpInv")] == 1
    s.drain()
    assert s.sys.host.bogus_dropped == 1
    assert s.state(1, 0, L) == ("M", 4)
    assert s.sys.checker.value(L) == 4


def test_cleanevict_of_line_being_snooped():
    s = Scenario()
    s.cpu(0, 0, "load", L, variant=1)                # RdAny: granted E (nobody else holds it)
    s.drain()
    assert s.state(0, 0, L)[0] == "E"
    s.cpu(0, 0, "evict", L)                          # E -> CleanEvict, EI_A
    s.cpu(1, 0, "store", L, value=9)                 # RdOwn -> SnpInv to dev0
    s.deliver(1, Channel.D2H_REQ, Req.RdOwn)
    s.deliver(0, Channel.D2H_REQ, Req.CleanEvict)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    assert s.dev(0).coverage[("EI_A", "SnpInv")] == 1
    assert s.dev(0).line_state(L).name == "II_A"
    s.drain()
    assert s.dev(0).coverage[("II_A", "GO_WritePull_Drop")] == 1
    assert s.state(1, 0, L) == ("M", 9)


def test_itomwr_against_concurrent_readers():
    s = Scenario(devices=3)
    for d in (0, 1):
        s.cpu(d, 0, "load", L)
    s.drain()
    s.cpu(2, 0, "itomwr", L, value=11)
    s.deliver(2, Channel.D2H_REQ, Req.ItoMWr)        # host snoops both readers
    s.cpu(0, 0, "load", L)                           # hit on its S copy: still the old value
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    s.flush(0)                                       # the invalidation probe reaches the cache
    s.cpu(0, 0, "load", L)                           # miss now; its RdShared queues behind the ItoMWr
    s.deliver(0, Channel.D2H_REQ, Req.RdShared)
    s.deliver(1, Channel.H2D_REQ, Snp.SnpInv)
    s.drain()
    assert s.state(0, 0, L) == ("S", 11)             # the reader serialized after the write sees it
    assert s.state(1, 0, L) == ("I", None)
    assert s.sys.host.memory(L) == 11


def _exclusive_then_evict(s, variant=0):
    s.cpu(0, 0, "load", L, variant=1)                # RdAny: granted E (nobody else holds it)
    s.drain()
    assert s.state(0, 0, L)[0] == "E"
    s.cpu(0, 0, "evict", L, variant=variant)         # E -> CleanEvict (variant 0), EI_A


def test_cleanevict_pending_answers_snpdata_with_rspihiti():
    """CXL 1.1 Table 19 / CXL 3.x Table 3-26 allow no RspIHitSE to SnpData; the evicting device no
    longer has the line (CXL 1.1 §3.2.4.1.14), so it answers RspIHitI and marks its write-back Bogus."""
    s = Scenario(clean_evict_pull=1)
    _exclusive_then_evict(s)
    s.cpu(1, 0, "load", L)                           # RdShared -> SnpData to the owner, dev0
    s.deliver(1, Channel.D2H_REQ, Req.RdShared)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpData)
    assert s.dev(0).coverage[("EI_A", "SnpData")] == 1
    assert s.deliver(0, Channel.D2H_RSP).op is Rsp.RspIHitI
    assert s.dev(0).line_state(L).name == "II_A"
    s.drain()
    assert s.dev(0).coverage[("II_A", "GO_WritePull")] == 1       # write-back sent Bogus
    assert s.state(1, 0, L)[0] in ("S", "E")


def test_cleanevict_pending_answers_snpcur_with_rspihiti():
    """As above for SnpCur (a RdCurr from another device): Table 3-26 allows RspIHitI, not RspIHitSE."""
    s = Scenario()
    _exclusive_then_evict(s)
    s.cpu(1, 0, "rdcurr", L)                         # RdCurr -> SnpCur to the owner, dev0
    s.deliver(1, Channel.D2H_REQ, Req.RdCurr)
    s.deliver(0, Channel.H2D_REQ, Snp.SnpCur)
    assert s.dev(0).coverage[("EI_A", "SnpCur")] == 1
    assert s.deliver(0, Channel.D2H_RSP).op is Rsp.RspIHitI
    s.drain()
    assert s.state(0, 0, L) == ("I", None)


def test_shared_line_evicts_with_cleanevictnodata_in_either_variant():
    """CleanEvict is for an Exclusive line only (CXL 1.1 §3.2.4.1.14, CXL 3.x §3.2.4.2.14 and Table
    3-28): an S line leaves with CleanEvictNoData whichever opcode variant the access asks for."""
    s = Scenario()
    for d in (0, 1):
        s.cpu(d, 0, "load", L)
    s.drain()
    s.cpu(0, 0, "evict", L, variant=1)
    assert s.dev(0).line_state(L).name == "SI_A"
    s.deliver(0, Channel.D2H_REQ, Req.CleanEvictNoData)
    s.drain()
    assert s.dev(0).coverage[("SI_A", "GO-I")] == 1
    assert s.state(0, 0, L) == ("I", None) and s.state(1, 0, L)[0] == "S"


def _one_way_host_directory(**cfg):
    """A host directory of one entry (1 set x 1 way), no host traffic of its own."""
    return Scenario(host_dir="finite", host_dir_sets=1, host_dir_ways=1, **cfg)


def test_host_directory_eviction_racing_the_holders_dirtyevict():
    s = _one_way_host_directory()
    s.cpu(0, 0, "store", L, value=3)
    s.drain()
    assert L in s.sys.host.sf.entries
    s.cpu(0, 0, "evict", L)                          # dev0: DirtyEvict, MI_A
    s.cpu(1, 0, "load", L + 1)                       # dev1: RdShared of another line of the only set
    s.deliver(1, Channel.D2H_REQ, Req.RdShared)      # no free way: the host back-invalidates L
    assert s.sys.host.evicting == {0: L} and s.sys.host.counts["back_invalidations"] == 1
    s.deliver(0, Channel.D2H_REQ, Req.DirtyEvict)    # waits behind the back-invalidation of its line
    assert [t.op for t in s.sys.host.queue[L]] == [Req.DirtyEvict]
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    assert s.dev(0).coverage[("MI_A", "SnpInv")] == 1
    assert s.deliver(0, Channel.D2H_RSP).op is Rsp.RspIFwdM
    s.drain()
    assert s.dev(0).coverage[("II_A", "GO_WritePull")] == 1
    assert s.sys.host.bogus_dropped == 1             # the snoop took the data; the write-back is stale
    assert s.sys.host.memory(L) == 3
    assert s.state(1, 0, L + 1) == ("S", 0)
    assert set(s.sys.host.sf.entries) == {L + 1} and L not in s.sys.host.dir


def test_host_directory_eviction_racing_a_read_of_the_victim_line():
    s = _one_way_host_directory(devices=3)
    s.cpu(0, 0, "store", L, value=5)
    s.drain()
    s.cpu(1, 0, "load", L + 1)
    s.deliver(1, Channel.D2H_REQ, Req.RdShared)      # back-invalidation of L: SnpInv to dev0
    s.cpu(2, 0, "load", L)                           # dev2 reads the victim line meanwhile
    s.deliver(2, Channel.D2H_REQ, Req.RdShared)
    assert [t.op for t in s.sys.host.queue[L]] == [Req.RdShared]     # waits for the back-invalidation
    assert s.sys.host.active[L + 1].op is Req.RdShared and L + 1 not in s.sys.host.sf.entries
    s.deliver(0, Channel.H2D_REQ, Snp.SnpInv)
    s.flush(0)                                       # the invalidation probe reaches dev0's cache
    s.deliver(0, Channel.D2H_RSP)
    s.deliver(0, Channel.D2H_DATA)                   # the dirty line goes to memory; the way is free
    assert set(s.sys.host.sf.entries) == {L + 1}
    # dev1 took the way; dev2's read of L now needs it back: L+1 is back-invalidated in turn
    s.drain()
    assert s.sys.host.counts["back_invalidations"] == 2
    assert s.state(2, 0, L) == ("S", 5)
    assert s.state(1, 0, L + 1) == ("I", None)
    assert s.state(0, 0, L) == ("I", None)
    assert s.dev(1).coverage[("S", "SnpInv")] == 1


def test_host_write_racing_a_device_read_of_the_line():
    """The host's own write snoops every device (Config.host_snoop_scope "all"): one whose RdShared
    was granted but whose GO has not arrived answers only after it (the snoop may not pass the GO);
    the one without the line answers RspIHitI, the snoop-filter-miss answer."""
    s = Scenario(host_snoop_scope="all")
    s.cpu(0, 0, "load", L)
    s.deliver(0, Channel.D2H_REQ, Req.RdShared)      # granted: GO-S and data on their way to dev0
    s.host("write", L, 7)
    assert not s.deliverable(0, Channel.H2D_REQ, Snp.SnpInv)
    s.deliver(1, Channel.H2D_REQ, Snp.SnpInv)
    assert s.dev(1).coverage[("I", "SnpInv")] == 1
    s.drain()
    assert s.dev(0).coverage[("S", "SnpInv")] == 1
    assert s.state(0, 0, L) == ("I", None)
    assert s.sys.host.memory(L) == 7 and s.sys.checker.value(L) == 7
