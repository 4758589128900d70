"""Reachability witness (mode cover) for link_retry_unbounded: in its harness, with its invariants
asserted, the corners of the retry rules happen and the flits still arrive in order (so the
states the invariants describe include these).  Receiver ``a`` (flits from ``b``):

* a late RETRY.Ack (the answer to a re-sent Req, after the receiver resumed on the first answer) makes
  it drop a replayed flit it already has;
* a rule error on a flit ahead of a CRC error moves a waiting receiver's Eseq back;
* a RETRY.Ack the receiver cannot place (behind its resume point) makes it ask for a replay;
* a flit of the second lap of sequence numbers (tag >= depth) retired good after a replay;
* both ends waiting for a replay at once;
* a resuming RETRY.Ack that comes while the unpacker still holds forwarded flits, taken and ignored,
  and a resume after it with a flit retired good.

PASS means SBY found each within ``DEPTH`` steps (all by step 17)."""

import functools

from amaranth.hdl import Cover, Signal

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.link_retry_harness import Kind, LinkRetryPair

DEPTH = 20


class Reached(LinkRetryPair):
    def elaborate(self, platform):
        m = super().elaborate(platform)
        D = self.params["depth"]
        a, b = self.ends["a"], self.ends["b"]
        pre, dbg = self.pre["a"], a.debug
        taken = a.rx_valid & a.rx_ready & ~a.stopped & pre.crc_ok
        ack_in_normal = Signal()
        m.d.sync += ack_in_normal.eq(taken & (pre.kind == Kind.ACK) & ~a.waiting & ~a.up_bad)
        replayed = Signal()
        with m.If(b.send_rep):
            m.d.sync += replayed.eq(1)
        ignored_ack = Signal()                  # a resuming Ack taken while the unpacker holds flits
        m.d.comb += ignored_ack.eq(taken & (pre.kind == Kind.ACK) & a.waiting & ~a.up_bad
                                   & (a.rx_ack_eseq == dbg["eseq"]) & (dbg["inflight"] != 0))
        ignored_once, resumed = Signal(), Signal()
        with m.If(ignored_ack):
            m.d.sync += ignored_once.eq(1)
        with m.If(ignored_once & ~a.waiting):
            m.d.sync += resumed.eq(1)
        m.d.comb += [
            Cover(ignored_ack, "a resuming RETRY.Ack while the unpacker still holds flits: taken and ignored"),
            Cover(resumed & a.up_good, "after an ignored RETRY.Ack the receiver resumes and retires a flit good"),
            Cover(taken & (pre.kind == Kind.DATA) & ~a.waiting & ~a.up_bad & (dbg["skip"] != 0),
                  "a late RETRY.Ack: the receiver drops a replayed flit it already has"),
            Cover(a.waiting & a.up_bad, "a rule error moves a waiting receiver's Eseq back"),
            Cover(ack_in_normal & a.waiting, "a RETRY.Ack the receiver cannot place: it asks for a replay"),
            Cover(a.up_good & (self.stat["a"].tag >= D) & replayed,
                  "a flit of the second lap of sequence numbers retired good after a replay"),
            Cover(a.waiting & b.waiting, "both ends wait for a replay at once"),
        ]
        return m


PROOF = Proof(
    name="link_retry_reached",
    mode="cover", depth=DEPTH,
    harness=functools.partial(Reached, invariants=True),
    engine=ENGINE,
    description="WITNESS for link_retry_unbounded (the invariants asserted): a late Ack's skip, a rule error while waiting, an Ack the receiver "
                "cannot place, a second-lap flit after a replay, both ends waiting, a resuming Ack ignored while the unpacker holds flits "
                "and a resume after it",
    quick=False,
)
