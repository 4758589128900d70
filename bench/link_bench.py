"""Link-layer benchmark: the loopback (hdl/link/loopback.py) in amaranth.sim with streaming traffic.

Reports, as JSON on stdout (and ``--out FILE``):

* ``throughput``: wire flits per cycle in each direction, error-free, one direction streaming data lines
  with every source always valid and every sink always ready (target: 1 flit per cycle);
* ``efficiency``: payload efficiency measured on the wire for each workload of
  ``models.flit.WORKLOADS`` beside the analytic optimum ``models.flit.optimum`` (payload bytes /
  68 wire bytes per flit; every flit on the wire counts, credit/ack LLCRDs included, as in
  ``models.flit.efficiency``: the streaming workloads count the data wire, the snoop storm both);
* ``wait_sweep``: per workload and packer ``wait`` W (0 .. 16), the efficiency, its share of the optimum
  and the message latency (mean, max, and the mean added to W = 0's) of the golden packer
  (``models.flit.Packer(wait=W)``, bit-exact with the RTL's) in a cycle loop of both directions
  (:func:`wait_sweep`); ``efficiency`` above is the RTL at the packer's default W
  (``efficiency_wait``), and ``efficiency_by_config`` the same RTL runs with the link ports built
  with another packer wait and queue depth (``LinkPort(pack_wait=W, tx_depth=D)``) for each of
  ``--rtl-configs`` (default ``0x4,3x4,3x6``: the eager packer with 4-deep queues, W = 3 with them, and
  W = 3 with the former default's 6-deep queues);
  ``efficiency_paced``: the mixed workload at the defaults (and in each ``efficiency_by_config`` entry,
  at that setting) with *paced* sources, each channel kept to its share of its direction's messages all
  through the run (:func:`paced_offers`), where the runs above let every source offer a message per
  cycle;
* ``recovery``: retry recovery time in cycles, from the cycle a corrupted flit crosses the wire to the
  first replayed flit the receiver accepts (``rx_good`` after the receiver left its wait state),
  for single errors injected into a data stream;
* ``ber``: runs at bit error rates 1e-6 .. 1e-3 with streaming traffic both ways, checking that every
  message arrives once and in order, with flits, errors, retries and the simulation speed.  The
  target is >= 10^6 flits; amaranth.sim runs at ~10^2 cycles/s for this design, so the run
  is bounded by ``--budget`` seconds and reports the flit count it reached honestly (a Verilator build
  of the same RTL, ~10^4-10^5 x faster, is the way to 10^6 flits).

Usage: ``python -m bench.link_bench [--budget 300] [--out build/link_bench.json]``.
"""

import argparse
import json
import random
import sys
import time
from collections import Counter

from tb.reused_sim import ReusedSimulator

from hdl.link.loopback import LinkLoopback, flit_error_probability
from hdl.link.ports import direction_channels
from cxl.messages import CODECS
from cxl.credits import CREDIT_CLASSES
from cxl.flit import DEFAULT_PACK_WAIT, FLIT_BYTES, ORDERED_BEHIND, Direction
from models.flit import (MIXED, WIRE_BYTES, WORKLOADS, LINE_BYTES, Packer, Unpacker, optimum, random_msg,
                         stream_payload as encode)

D2H = direction_channels(True)
H2D = direction_channels(False)
ROUTES = {ch: (ch.name.lower(), f"host_{ch.name.lower()}") for ch in D2H}
ROUTES.update({ch: (f"host_{ch.name.lower()}", ch.name.lower()) for ch in H2D})




# Receive queues of the loopback's ports, i.e. each channel's credit pool.  A credit goes round two
# LinkPorts in about ``hdl.link.port.CREDIT_ROUND_TRIP`` (20) cycles, so a pool of 16 holds a streaming
# channel to about 16/20 of a message per cycle (measured: 0.82 flits per cycle, 0.954 of the optimum,
# for streaming writes); 32 keeps the pools from binding, as these runs intend, and lets the ports
# gather their credit returns 8 at a time (``hdl.link.port.default_credit_batch``).
RX_DEPTH = 32


class Bench(ReusedSimulator):
    """One loopback simulator, reset between runs."""

    def __init__(self, **params):
        t0 = time.time()
        super().__init__(LinkLoopback(**{"rx_depth": RX_DEPTH, **params}))
        self.elaboration_s = round(time.time() - t0, 1)

    def run(self, job):
        t0 = time.time()
        result = super().run(job)
        result["wall_s"] = time.time() - t0
        return result

    async def _bench(self, ctx):
        job = self.job
        if job is None:
            return
        dut = self.dut
        send = job["send"]                      # {channel: [payload ints]}
        got = {ch: 0 for ch in send}
        idx = {ch: 0 for ch in send}
        ins = {ch: getattr(dut, ROUTES[ch][0]) for ch in send}
        outs = {ch: getattr(dut, ROUTES[ch][1]) for ch in send}
        for w in ("up", "down"):
            ctx.set(getattr(dut, f"{w}_threshold"), job.get(f"{w}_threshold", 0))
        for ch in send:
            ctx.set(outs[ch].ready, 1)
            if send[ch]:
                ctx.set(ins[ch].valid, 1)
                ctx.set(ins[ch].payload.as_value(), send[ch][0])
        force_at = set(job.get("force_up", ()))  # up-wire flit numbers to corrupt
        # Flits per kind on each wire (error-free runs only: the golden receiver decodes each one).
        kinds = {"up": Counter(), "down": Counter()} if job.get("kinds") else None
        kind_rx = {"up": Unpacker(Direction.UPSTREAM), "down": Unpacker(Direction.DOWNSTREAM)}
        recov, pending_err, was_waiting = [], None, False
        cycle, limit = 0, job["limit"]
        while not all(got[ch] == len(send[ch]) for ch in send):
            if cycle >= limit or (job.get("wall") and time.time() > job["wall"]):
                break
            if force_at:
                num = ctx.get(dut.up_flits)
                hit = ctx.get(dut.up_wire.valid) and num in force_at
                ctx.set(dut.up_force, hit)
            if job.get("paced"):
                offer = paced_offers(send, idx)
                for ch in send:
                    ctx.set(ins[ch].valid, offer[ch])
                    if offer[ch]:
                        ctx.set(ins[ch].payload.as_value(), send[ch][idx[ch]])
            else:
                offer = {ch: idx[ch] < len(send[ch]) for ch in send}
            took = [ch for ch in send if offer[ch] and ctx.get(ins[ch].ready)]
            for ch in send:
                if ctx.get(outs[ch].valid):
                    v = ctx.get(outs[ch].payload.as_value())
                    assert v == send[ch][got[ch]], f"{ch.name} message {got[ch]} lost/duplicated/reordered"
                    got[ch] += 1
            if force_at:
                # The corrupted flit crosses the wire in a cycle where up_hit is high and it is taken.
                if ctx.get(dut.up_hit) and ctx.get(dut.up_wire.valid) and pending_err is None:
                    pending_err = cycle
                waiting = ctx.get(dut.host_waiting)
                if pending_err is not None and was_waiting and not waiting:
                    pending_err = ("resumed", pending_err)
                if isinstance(pending_err, tuple) and ctx.get(dut.host_good):
                    recov.append(cycle - pending_err[1])
                    pending_err = None
                was_waiting = waiting
            if kinds is not None:           # the flit each wire offers now, and its count before the edge
                seen = {w: (ctx.get(getattr(dut, f"{w}_wire").payload), ctx.get(getattr(dut, f"{w}_flits")))
                        for w in kinds if ctx.get(getattr(dut, f"{w}_wire").valid)}
            await ctx.tick()
            if kinds is not None:           # taken at this edge: its kind, as the golden receiver sees it
                for w, (flit, count) in seen.items():
                    if ctx.get(getattr(dut, f"{w}_flits")) != count:
                        kinds[w][kind_rx[w].receive(flit.to_bytes(FLIT_BYTES, "little")).kind] += 1
            cycle += 1
            for ch in took:                     # the handshake happened at this edge: next message
                idx[ch] += 1
                if idx[ch] < len(send[ch]):
                    ctx.set(ins[ch].payload.as_value(), send[ch][idx[ch]])
                else:
                    ctx.set(ins[ch].valid, 0)
        res = {"cycles": cycle, "complete": all(got[ch] == len(send[ch]) for ch in send),
               "messages": sum(got.values())}
        for k in ("up_flits", "down_flits", "up_injected", "down_injected", "dev_retries", "host_retries",
                  "dev_crc_errors", "host_crc_errors", "dev_flits_replayed", "host_flits_replayed",
                  "dev_rule_errors", "host_rule_errors"):
            res[k] = ctx.get(getattr(dut, k))
        if force_at:
            res["recovery_cycles"] = recov
        if kinds is not None:
            res["flit_kinds"] = {w: dict(k) for w, k in kinds.items()}
        self.result = res


PACE_SLACK = 2


def paced_offers(send, idx):
    """Which channels offer their next message this cycle when the sources are *paced*: a channel runs
    at most ``PACE_SLACK`` messages ahead of its share of the messages its direction has handed in so
    far (``len(send[ch]) / total`` of them).  So every channel of a direction keeps the workload's
    proportions all through the run, as transactions interleaved in that mix would hand them in;
    unpaced, every source offers a message per cycle and the channels with fewer messages finish
    first, leaving the rest of the run to the others alone (for ``mixed``: after the first third the
    upstream carries D2H Req only)."""
    offer = {}
    for chans in (D2H, H2D):
        total = sum(len(send.get(ch, ())) for ch in chans)
        done = sum(idx.get(ch, 0) for ch in chans)
        for ch in chans:
            if ch in send:
                k = len(send[ch])
                offer[ch] = idx[ch] < k and idx[ch] < k * (done + 1) / total + PACE_SLACK
    return offer


def messages(ch, n, rng, pool={}):
    if ch not in pool:
        r = random.Random(ch.value)
        pool[ch] = [encode(random_msg(r, ch)) for _ in range(64)]
    return [rng.choice(pool[ch]) for _ in range(n)]


def payload_bytes(ch, n):
    return n * (CODECS[ch].width / 8 + (LINE_BYTES if ch in (D2H[2], H2D[2]) else 0))


WAIT_SWEEP = (0, 1, 2, 3, 4, 6, 8, 12, 16)


def wait_sweep(workload, counts, wait, rng, depth=4, sent=None):
    """One workload through two golden packers (``models.flit.Packer(wait=...)``), one per direction,
    cycle by cycle: every source offers a message per cycle while its packer queue holds fewer than
    ``depth`` (4, the link port's former default packer depth), each packer decides one flit per cycle, the
    peer's unpacker takes it in the same cycle and returns one credit per delivered message and one
    ack per protocol or all-data flit.  No credit pools limit the sender (as in the loopback, whose
    pools the rx queues size so that they rarely bind).  Returns the wire flits as the RTL run counts
    them, the efficiency, and the latency from a message's push into its packer to the flit that
    completes it at the receiver (mean and max cycles).  ``sent``: a dict whose ``Direction`` keys get
    the list of that direction's flits, in order (bench/packing_study.py decodes them)."""
    up, down = Direction.UPSTREAM, Direction.DOWNSTREAM
    tx = {d: Packer(d, wait) for d in (up, down)}
    rx = {d: Unpacker(d) for d in (up, down)}
    peer = {up: down, down: up}
    left = {ch: [random_msg(rng, ch) for _ in range(counts.get(ch, 0))] for ch in D2H + H2D}
    pushed = {ch: [] for ch in left}            # push cycle of each message, in order
    behind = {req for req, _ in ORDERED_BEHIND.values()}
    push_order = sorted(left, key=lambda ch: ch in behind)
    done = {ch: 0 for ch in left}
    flits = {up: 0, down: 0}
    latency = []
    total = sum(map(len, left.values()))
    cycle = 0
    while len(latency) < total:
        assert cycle < 50 * total + 1000, f"{workload}, wait={wait}: the model does not drain"
        for ch in push_order:                    # a cycle's H2D Rsp before its H2D Req (Packer.push_together)
            msgs = left[ch]
            d = Direction.of(ch)
            if msgs and len(tx[d].queues[ch]) < depth:
                tx[d].push(msgs.pop(0))
                pushed[ch].append(cycle)
        for d in (up, down):
            flit = tx[d].next_flit()
            if flit is None:
                continue
            flits[d] += 1
            if sent is not None:
                sent.setdefault(d, []).append(flit)
            got = rx[d].receive(flit)
            back = dict.fromkeys(CREDIT_CLASSES, 0)
            for msg in got.messages:
                latency.append(cycle - pushed[msg.chan][done[msg.chan]])
                done[msg.chan] += 1
                back[CREDIT_CLASSES[d.channels.index(msg.chan)]] += 1
            tx[peer[d]].return_credits(**back)
            if got.kind != "control":
                tx[peer[d]].acknowledge(1)
        cycle += 1
    wire = {"streaming_writes": flits[up], "streaming_reads": flits[down]}.get(workload, flits[up] + flits[down])
    payload = sum(payload_bytes(ch, k) for ch, k in counts.items())
    return {"wire_flits": wire, "efficiency": payload / (WIRE_BYTES * wire), "cycles": cycle,
            "mean_latency": sum(latency) / len(latency), "max_latency": max(latency)}


def parse_configs(text):
    """``"3,3x6"`` -> ``[{"pack_wait": 3}, {"pack_wait": 3, "tx_depth": 6}]`` (LinkPort parameters)."""
    configs = []
    for item in filter(None, text.split(",")):
        wait, _, depth = item.partition("x")
        try:
            configs.append({"pack_wait": int(wait), **({"tx_depth": int(depth)} if depth else {})})
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: expected W or WxD (integers), e.g. 3 or 3x6") from None
    return configs


def rtl_efficiency(bench, runs, n, rng, paced=False):
    """Payload efficiency of each workload of ``runs`` ({workload: {channel: count}}, ``n`` lines,
    snoops or transactions) on the RTL loopback ``bench``, beside its optimum (the module docstring's
    ``efficiency``); ``paced``: the sources keep the workload's proportions (:func:`paced_offers`)."""
    eff = {}
    for w, counts in runs.items():
        send = {ch: messages(ch, counts.get(ch, 0), rng) for ch in D2H + H2D}
        r = bench.run({"send": send, "limit": 20 * n + 1000, "paced": paced, "kinds": True})
        assert r["complete"], (w, r)
        payload = sum(payload_bytes(ch, k) for ch, k in counts.items())
        if w == "streaming_writes":
            flits = r["up_flits"]
        elif w == "streaming_reads":
            flits = r["down_flits"]
        else:
            flits = r["up_flits"] + r["down_flits"]
        opt = optimum(w, n)
        eff[w] = {"n": n, "cycles": r["cycles"], "wire_flits": flits, "up_flits": r["up_flits"],
                  "down_flits": r["down_flits"], "efficiency": payload / (WIRE_BYTES * flits),
                  "optimum": opt["efficiency"], "optimum_flits": opt["flits"],
                  "flits_per_cycle": flits / r["cycles"], "sim_cycles_per_s": r["cycles"] / r["wall_s"],
                  "flit_kinds": r["flit_kinds"]}
    return eff


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.link_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=300.0, help="seconds for the BER runs (default 300)")
    ap.add_argument("--lines", type=int, default=512, help="lines / snoops per efficiency workload")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rtl-configs", type=parse_configs, default=parse_configs("0x4,3x4,3x6"),
                    help="link-port settings to measure the RTL's efficiency at besides the defaults: a comma "
                         "list of W (LinkPort pack_wait) or WxD (pack_wait W, tx_depth D); default 0x4,3x4,3x6; "
                         "empty for none")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    b = Bench()
    out = {"params": {"rx_depth": RX_DEPTH, **{k: getattr(b.dut.dev_port, k) for k in
                                         ("retry_depth", "ack_timer", "retry_timeout", "credits", "credit_batch")}},
           "elaboration_s": b.elaboration_s}
    n = args.lines

    # -------------------------------------------------- throughput and efficiency, error-free
    runs = {"streaming_writes": {D2H[2]: n}, "streaming_reads": {H2D[2]: n},
            "snoop_storm": {H2D[0]: n, D2H[1]: n},
            "mixed": {ch: k * n // 4 for ch, k in MIXED.items()}}
    assert set(runs) == set(WORKLOADS)
    eff = rtl_efficiency(b, runs, n, rng)
    out["efficiency"] = eff
    out["efficiency_wait"] = DEFAULT_PACK_WAIT      # the link ports build their packers with the default
    # The same RTL runs with the packers holding flits and deeper packer queues, one loopback per setting.
    # The mixed workload again with paced sources (the channels keep its proportions all through).
    out["efficiency_paced"] = rtl_efficiency(b, {"mixed": runs["mixed"]}, n, rng, paced=True)
    out["efficiency_by_config"] = []
    for cfg in args.rtl_configs:
        bc = Bench(**cfg)
        out["efficiency_by_config"].append({**cfg, "efficiency": rtl_efficiency(bc, runs, n, rng),
                                            "efficiency_paced": rtl_efficiency(bc, {"mixed": runs["mixed"]}, n,
                                                                               rng, paced=True)})

    # -------------------------------------------------- packer wait sweep (golden model)
    sweep = {}
    for w, counts in runs.items():
        opt = optimum(w, n)["efficiency"]
        rows = {}
        for wait in WAIT_SWEEP:
            r = wait_sweep(w, counts, wait, random.Random(args.seed))
            r["of_optimum"] = r["efficiency"] / opt
            rows[str(wait)] = r
        for r in rows.values():
            r["added_mean_latency"] = r["mean_latency"] - rows["0"]["mean_latency"]
        reaching = [int(k) for k, r in rows.items() if r["of_optimum"] >= 0.97]
        sweep[w] = {"optimum": opt, "by_wait": rows, "least_wait_reaching_0.97": min(reaching, default=None)}
    out["wait_sweep"] = {"workloads": sweep,
                         "note": "golden model (models.flit.Packer, bit-exact with the RTL packer in lockstep) "
                                 "in a cycle loop of both directions, see wait_sweep(); efficiency and "
                                 "efficiency_by_config are the RTL loopback at the default and other settings"}
    out["throughput"] = {"up_flits_per_cycle": eff["streaming_writes"]["flits_per_cycle"],
                         "down_flits_per_cycle": eff["streaming_reads"]["flits_per_cycle"],
                         "note": "flits on the data wire / cycles of the whole run (includes the first "
                                 "flit's latency and the drain); target 1"}

    # -------------------------------------------------- retry recovery time
    send = {ch: messages(ch, n if ch == D2H[2] else 0, rng) for ch in D2H + H2D}
    r = b.run({"send": send, "limit": 40 * n + 2000, "force_up": [100, 200, 300, 400]})
    assert r["complete"], r
    rc = r["recovery_cycles"]
    out["recovery"] = {"samples": rc, "mean_cycles": sum(rc) / len(rc) if rc else None,
                       "errors_injected": r["up_injected"], "host_retries": r["host_retries"],
                       "replayed_flits": r["dev_flits_replayed"],
                       "definition": "cycle the corrupted flit crosses the wire -> cycle of the first "
                                     "rx_good pulse at the receiver after it resumed"}

    # -------------------------------------------------- BER runs within the budget
    bers = (1e-6, 1e-5, 1e-4, 1e-3)
    ber_out = {}
    total = 0
    for i, ber in enumerate(bers):
        thr = round(flit_error_probability(ber) * 2**32)
        share = args.budget / len(bers)
        k = 20000                               # more than fits: the run stops at the wall-clock share
        send = {ch: messages(ch, k, rng) for ch in D2H + H2D}
        r = b.run({"send": send, "limit": 10**9, "wall": time.time() + share,
                   "up_threshold": thr, "down_threshold": thr})
        flits = r["up_flits"] + r["down_flits"]
        total += flits
        ber_out[f"{ber:g}"] = {"p_flit": flit_error_probability(ber), "cycles": r["cycles"], "flits": flits,
                               "messages_delivered_in_order": r["messages"],
                               "errors_injected": r["up_injected"] + r["down_injected"],
                               "crc_errors": r["dev_crc_errors"] + r["host_crc_errors"],
                               "rule_errors": r["dev_rule_errors"] + r["host_rule_errors"],
                               "retries": r["dev_retries"] + r["host_retries"],
                               "replayed": r["dev_flits_replayed"] + r["host_flits_replayed"],
                               "flits_per_cycle_both_ways": flits / max(r["cycles"], 1),
                               "sim_cycles_per_s": r["cycles"] / r["wall_s"], "wall_s": r["wall_s"]}
    out["ber"] = {"runs": ber_out, "total_flits": total, "target_flits": 10**6,
                  "reached_target": total >= 10**6,
                  "note": "amaranth.sim speed limits the count; every delivered message was checked "
                          "(no loss, duplication or reordering) while the run went on"}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
