"""RTL traffic generator and checker (hdl/link/traffic.py) around the loopback, in amaranth.sim.

Short runs only (amaranth.sim does ~10^2 cycles/s on this design; the long runs are
bench/link_verilator.py on a Verilator build of the same RTL):

* the generators' first message on every channel is the one the Python model predicts and decodes as a
  legal message (valid 1, reserved 0, legal enum encodings);
* BER 0 and BER 1e-3 (p_flit ~ 0.41) with random offer/ready patterns: every message arrives, the
  checkers see no mismatch, and at 1e-3 errors were injected and retried;
* the checker can fail: one design with a flipped bit (D2H Req), a dropped message (H2D Rsp) and a
  duplicated one (D2H Data) between the port and the checker; ``errors`` rises on exactly those
  channels.

Two designs are elaborated (clean, faulty); the clean one is ``reset()`` between its runs.
"""

import pytest

from hdl.link.loopback import flit_error_probability
from hdl.link.traffic import CHANNELS, LinkTraffic, channel_seeds, message_value
from cxl.messages import CODECS, Channel
from tb.reused_sim import ReusedSimulator


def _n(ch):
    return ch.name.lower()


class Harness(ReusedSimulator):
    def __init__(self, **params):
        super().__init__(LinkTraffic(**params))

    async def _bench(self, ctx):
        job = self.job
        if job is None:
            return
        dut = self.dut
        for k in ("up_threshold", "down_threshold", "offer_rate", "ready_rate", "target"):
            if k in job:
                ctx.set(getattr(dut, k), job[k])
        first = {}
        cycle = 0
        while cycle < job["limit"]:
            for ch in CHANNELS:
                src = getattr(dut.loop, _n(ch) if ch.upstream else f"host_{_n(ch)}")
                if ch not in first and ctx.get(src.valid):
                    first[ch] = ctx.get(src.payload.as_value())
            if job.get("until") and job["until"](ctx, dut):
                break
            await ctx.tick()
            cycle += 1
        res = {"cycles": cycle, "first": first}
        for name in ("sent", "received", "errors", "up_injected", "down_injected", "dev_retries",
                     "host_retries", "up_flits", "down_flits", "done", "idle"):
            res[name] = ctx.get(getattr(dut, name))
        for ch in CHANNELS:
            for c in ("sent", "received", "errors"):
                res[f"{_n(ch)}_{c}"] = ctx.get(getattr(dut, f"{_n(ch)}_{c}"))
        self.result = res


@pytest.fixture(scope="module")
def clean():
    return Harness()


def _done(ctx, dut):
    return ctx.get(dut.done)


def test_first_messages_legal(clean):
    r = clean.run({"target": 3, "limit": 200, "until": _done})
    for ch in CHANNELS:
        want = message_value(ch, 0, channel_seeds(ch)[0])
        assert r["first"][ch] == want, ch
        CODECS[ch].decode(want & ((1 << CODECS[ch].width) - 1))   # strict: legal encodings
    assert r["done"] and r["sent"] == r["received"] == 18 and r["errors"] == 0, r


@pytest.mark.parametrize("ber,target", [(0.0, 40), (1e-3, 12)])
def test_traffic_clean(clean, ber, target):
    thr = round(flit_error_probability(ber) * 2**32) if ber else 0
    r = clean.run({"up_threshold": thr, "down_threshold": thr, "offer_rate": 170, "ready_rate": 190,
                   "target": target, "limit": 3000, "until": _done})
    assert r["done"], f"ber {ber}: not done after {r['cycles']} cycles: {r}"
    assert r["sent"] == r["received"] == 6 * target and r["errors"] == 0, r
    for ch in CHANNELS:
        assert r[f"{_n(ch)}_sent"] == r[f"{_n(ch)}_received"] == target and r[f"{_n(ch)}_errors"] == 0, (ch, r)
    if ber:
        assert r["up_injected"] + r["down_injected"] > 0 and r["dev_retries"] + r["host_retries"] > 0, r
    else:
        assert r["up_injected"] + r["down_injected"] == 0, r


def test_checker_catches_faults():
    faults = [("flip", Channel.D2H_REQ, 3), ("drop", Channel.H2D_RSP, 5), ("dup", Channel.D2H_DATA, 2)]
    h = Harness(fault=faults)
    target = 12

    def enough(ctx, dut):   # every channel got at least target - 1 (a drop leaves one uncounted)
        return all(ctx.get(getattr(dut, f"{_n(ch)}_received")) >= target - 1 for ch in CHANNELS)

    r = h.run({"target": target, "offer_rate": 200, "ready_rate": 220, "limit": 600, "until": enough})
    broken = {ch for _, ch, _ in faults}
    for ch in CHANNELS:
        e = r[f"{_n(ch)}_errors"]
        if ch in broken:
            assert e > 0, f"{ch.name}: the checker missed a {[f for f in faults if f[1] == ch][0][0]}: {r}"
        else:
            assert e == 0, (ch, r)
    # flip: one bad message, the rest in step; drop / dup: every later message is out of step
    assert r["d2h_req_errors"] == 1, r
    assert r["h2d_rsp_errors"] >= target - 1 - 5 - 1, r
    assert not r["idle"], r     # received != sent on the drop / dup channels
