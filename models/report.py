"""`make report`: CXL.cache against RDMA WRITE + polling, beside the source article's claims.

Writes to ``--out`` (default build/report/):

* ``results.json``: model numbers per side (the keys the issue fixes, and more), every parameter with
  its value, unit and source, the claims table, the sensitivity sweep and the curves behind the plots;
* ``report.md``: the claims side by side (metric | article CXL | article RDMA | model CXL | model RDMA |
  verdict), the parameter table, the sensitivity sweep, a validation of the RDMA model against the
  measurements in the facts, and what is assumed;
* ``latency_cdf.png``, ``throughput_vs_devices.png``, ``efficiency_vs_size.png``, ``sensitivity.png``.

Everything random is drawn from ``random.Random`` seeded from ``--seed``; results.json is the same for
the same seed and sample count (no wall-clock times go into it).  Progress goes to stderr.

    python -m models.report --out build/report --seed 1 [--samples 1000]
"""

import argparse
import json
import math
import os
import sys
import time

from dataclasses import replace

from . import cxl_timing as C
from . import fabric_params as FP
from . import fabrics as F
from . import rdma as R
from .config import Config
from .latency import percentile

__all__ = ["ARTICLE", "WORKLOAD", "build", "main"]

# The article's claims.
ARTICLE = {
    "sync_p99_ns": {"cxl": 152.0, "rdma": 2700.0},
    "atomics_mops": {"cxl": 8.3, "rdma": 0.9},
    "bandwidth_gbs": {"cxl": 72.0, "rdma": 38.0},
    "dcoh_invalidation_ns": {"cxl": (90.0, 150.0)},
    "rdma_poll_ns": {"rdma": (1000.0, 2000.0)},
    "rdma_end_to_end_ns": {"rdma": (3000.0, 5000.0)},
    "granularity_bytes": {"rdma": 4096, "update": 2},
    "payload_efficiency": {"cxl": 0.92, "rdma": 0.57},     # "43 % of RDMA bandwidth lost to metadata"
    "grad_sync_s": {"cxl": 0.9, "rdma": 2.4},
}

# Workload parameters: name -> (value, unit, source)
WORKLOAD = {
    "n_gpus": (8, "devices", "article: the 530B-parameter case runs on 8 GPUs; used for every headline"),
    "flag_bytes": (8, "B", "assumption: an 8 B flag (facts §4.3's flag-write example); fits one 64 B line"),
    "update_bytes": (2, "B", "article: 2-byte update (granularity claim)"),
    "model_params": (530e9, "parameters", "article: 530B-parameter model"),
    "bytes_per_param": (2, "B", "assumption: bf16/fp16 gradients"),
    "bucket_bytes": (25 * 2 ** 20, "B", "PyTorch DDP default bucket_cap_mb=25 (pytorch.org DDP docs; "
                                        "outside the facts file)"),
    "bulk_msg_bytes": (2 ** 20, "B", "assumption: 1 MiB RDMA WRITEs for bulk transfer"),
    "devices_curve": ([2, 4, 8, 16], "devices", "16 = CXL.cache devices per root port (facts §1.6)"),
    "verdict_tolerance": (0.25, "fraction", "assumption: a model number within ±25 % of the article's "
                                            "'matches'"),
    "spread_seeds": (5, "seeds", "assumption: every workload is rerun on 5 seeds (seed .. seed+4, a tenth "
                                 "of the samples each) for the spread bars, p1-p99 over seeds"),
}


def _log(msg):
    print(f"[report] {msg}", file=sys.stderr, flush=True)


def _pct(vals, *ps):
    s = sorted(vals)
    return [percentile(s, p) for p in ps]


def _judge(article, model, tol, lower_is_better):
    """Verdict of one side: 'matches' within tol, else how far off and in which direction."""
    if isinstance(article, tuple):
        lo, hi = article
        if lo <= model <= hi:
            return "within the article's range"
        return f"outside {lo:g}-{hi:g} (model {'above' if model > hi else 'below'})"
    r = model / article
    if abs(r - 1) <= tol:
        return "matches (±%d%%)" % round(tol * 100)
    better = (r < 1) == lower_is_better
    return f"model {r:.2g}x the article ({'better' if better else 'worse'})"


# ---------------------------------------------------------------- the run
def build(out_dir, seed=1, samples=1000, cxl=None, rdma=None, plots=True, params=None):
    """Run everything and write ``out_dir``.  ``params``: a models.fabric_params.FabricParams (default:
    the "measured" preset); ``cxl`` / ``rdma`` replace its CXL / RDMA parameters."""
    t_start = time.perf_counter()
    params = params or FP.load()
    if cxl is not None:
        params = replace(params, cxl=cxl)
    if rdma is not None:
        params = replace(params, rdma=rdma)
    cxl, rdma = params.cxl, params.rdma
    W = {k: v[0] for k, v in WORKLOAD.items()}
    tol = W["verdict_tolerance"]
    N = W["n_gpus"]
    curve_trials = max(5, samples // 5)
    sweep_trials = max(5, samples // 50)
    atomic_ops = max(200, 2 * samples)
    os.makedirs(out_dir, exist_ok=True)

    # ---- workload 1: sync latency
    _log(f"CXL sync: {N} devices, {samples} trials on the golden model")
    cl, cw = C.sync_latencies(cxl, N, samples, seed=seed,
                              progress=lambda i, n: _log(f"  CXL sync trial {i}/{n}"))
    _log(f"RDMA sync: {N} devices, {samples} trials")
    rl = R.sample_sync(rdma, N, W["flag_bytes"], samples, seed=seed)
    rl_page = R.sample_sync(rdma.with_(page_bytes=4096), N, W["update_bytes"], samples, seed=seed)
    c50, c99, c999 = _pct(cl, 50, 99, 99.9)
    r1, r50, r99, r999 = _pct(rl, 1, 50, 99, 99.9)
    rp50, rp99 = _pct(rl_page, 50, 99)
    cw50 = _pct(cw, 50)[0]

    # ---- workload 2: atomics
    _log(f"atomics: contended counter, N in {W['devices_curve']} ({atomic_ops} ops each)")
    at_c, at_r = {}, {}
    for n in W["devices_curve"]:
        at_c[n] = C.atomic_throughput(cxl, n, ops=atomic_ops, seed=seed) / 1e6
        at_r[n] = R.atomic_throughput(rdma, n, ops=atomic_ops, seed=seed) / 1e6
        _log(f"  N={n}: CXL {at_c[n]:.2f} M/s, RDMA {at_r[n]:.2f} M/s")
    rdma_atomic_rtt = sum(R.atomic_rtt_parts(rdma).values())

    # ---- sync p99 against N
    _log(f"sync p99 against N ({curve_trials} trials each)")
    sync_n = {}
    for n in W["devices_curve"]:
        a = C.sync_latencies(cxl, n, curve_trials, seed=seed)[0]
        b = R.sample_sync(rdma, n, W["flag_bytes"], curve_trials, seed=seed)
        sync_n[n] = {"cxl_p99_ns": _pct(a, 99)[0], "rdma_p99_ns": _pct(b, 99)[0]}

    # ---- workload 3: bulk bandwidth and efficiency
    bulk_c = C.bulk_bandwidth(cxl)
    bulk_r = R.bulk_bandwidth_gbs(rdma, W["bulk_msg_bytes"])
    r_eff_bulk = R.wire_efficiency(W["bulk_msg_bytes"], rdma.eth_mtu, rdma.vlan)
    sizes = [2 ** k for k in range(1, 21)]
    eff_curve = {
        "bytes": sizes,
        "rdma_exact": [R.wire_efficiency(s, rdma.eth_mtu, rdma.vlan) for s in sizes],
        "rdma_mtu1500": [R.wire_efficiency(s, 1500, rdma.vlan) for s in sizes],
        "rdma_4k_pages": [R.wire_efficiency(s, rdma.eth_mtu, rdma.vlan, 4096) for s in sizes],
        "pcie_mwr": [R.pcie_efficiency(s, rdma.mps, "MWr") for s in sizes],
        "cxl_flit": [C.message_efficiency(s) for s in sizes],
    }
    agg_bw = {n: {"cxl_gbs": min(n * bulk_c["gbs"], cxl.host_mem_gbs), "rdma_gbs": n * bulk_r}
              for n in W["devices_curve"]}

    # ---- workload 4: gradient sync
    total = W["model_params"] * W["bytes_per_param"]
    bucket = W["bucket_bytes"]
    grad_r = R.ring_allreduce_s(rdma, total, N, bucket)
    grad_c = C.ring_allreduce_s(cxl, total, N, bucket, c50, bulk_c["gbs"], via_host_memory=True)
    grad_c_link = C.ring_allreduce_s(cxl, total, N, bucket, c50, bulk_c["gbs"], via_host_memory=False)
    rdma_release = sum(R.write_parts(rdma, W["flag_bytes"]).values()) + R.poll_wait_mean_ns(rdma)
    lock_r = R.lock_allreduce_s(total, N, bucket, rdma_atomic_rtt, rdma_release, bulk_r)
    lock_c = R.lock_allreduce_s(total, N, bucket, 1e3 / at_c[N], c50,
                                min(bulk_c["gbs"], cxl.host_mem_gbs / 2))

    # ---- sensitivity: what each article number would need
    _log(f"sensitivity sweep (golden-model bisections with {sweep_trials} trials each)")
    sens = []

    def cxl_sync_p99(hop, host, bare=False):
        q = cxl.with_(port_ns=hop, interconnect_ns=0.0, host_ns=host)
        if bare:                                   # without occupancy and jitter
            q = q.with_(host_occupancy_ns=0.0, jitter_ns=0.0)
        return _pct(C.sync_latencies(q, N, sweep_trials, seed=seed)[0], 99)[0]

    for host, bare in ((cxl.host_ns, False), (10.0, False), (0.0, False), (10.0, True), (0.0, True)):
        x = F.bisect_monotone(lambda h: cxl_sync_p99(h, host, bare), 0.0, 200.0, ARTICLE["sync_p99_ns"]["cxl"], tol=0.5)
        floor = cxl_sync_p99(0.0, host, bare)
        cond = f"host_ns = {host:g}" + (", no home-agent occupancy, no jitter" if bare else "")
        sens.append({"claim": "CXL sync p99 152 ns", "parameter": "port_ns + interconnect_ns per hop",
                     "condition": cond,
                     "needed": None if x is None else round(x, 1),
                     "default": cxl.port_ns + cxl.interconnect_ns,
                     "note": (f"p99 is {floor:.0f} ns even with 0-ns ports" if x is None else
                              f"p99 <= 152 ns needs <= {x:.1f} ns per hop")})
        _log(f"  CXL sync p99=152 ns with {cond}: per hop {x}")

    def cxl_atomics(hop):
        q = cxl.with_(port_ns=hop, interconnect_ns=0.0)
        return C.atomic_throughput(q, N, ops=max(100, atomic_ops // 4), seed=seed) / 1e6

    x = F.bisect_monotone(cxl_atomics, 0.0, 200.0, ARTICLE["atomics_mops"]["cxl"], tol=0.5)
    sens.append({"claim": "CXL atomics 8.3 M/s", "parameter": "port_ns + interconnect_ns per hop",
                 "condition": f"host_ns = {cxl.host_ns:g}", "needed": None if x is None else round(x, 1),
                 "default": cxl.port_ns + cxl.interconnect_ns,
                 "note": "every fetch-add migrates the line: 1 / (host + 2 hops + DCOH)"})
    _log(f"  CXL atomics 8.3 M/s: per hop {x}")

    snoop_dc = (cxl.dcoh_cycles["coalesce_window"] + cxl.dcoh_cycles["probe"]) * cxl.cycle_ns
    flits = cxl.flits_per_msg * cxl.flit_ns
    lo, hi = ARTICLE["dcoh_invalidation_ns"]["cxl"]
    sens.append({"claim": "DCOH invalidation 90-150 ns (snoop round trip)",
                 "parameter": "port_ns + interconnect_ns per hop", "condition": "SnpInv -> response at host",
                 "needed": [round((lo - snoop_dc) / 2 - flits, 1), round((hi - snoop_dc) / 2 - flits, 1)],
                 "default": cxl.port_ns + cxl.interconnect_ns,
                 "note": "2 hops + DCOH coalescing window and probe"})
    wr = [((v - 2 * 10.0 - snoop_dc) / 4 - flits) for v in (lo, hi)]
    sens.append({"claim": "DCOH invalidation 90-150 ns (writer's upgrade, RdOwn to GO)",
                 "parameter": "port_ns + interconnect_ns per hop", "condition": "host_ns = 10",
                 "needed": [round(v, 1) for v in wr], "default": cxl.port_ns + cxl.interconnect_ns,
                 "note": "4 hops + 2 host lookups + DCOH; with host_ns = 45 the range needs "
                         f"{(lo - 90 - snoop_dc) / 4 - flits:.1f}..{(hi - 90 - snoop_dc) / 4 - flits:.1f} ns"})

    def rdma_pct(scale, q):
        r = rdma.with_(poll_min_ns=scale, poll_max_ns=2 * scale)
        return _pct(R.sample_sync(r, N, W["flag_bytes"], samples, seed=seed), q)[0]

    x = F.bisect_monotone(lambda s: rdma_pct(s, 99), 0.0, 5000.0, ARTICLE["sync_p99_ns"]["rdma"], tol=1.0)
    sens.append({"claim": "RDMA sync p99 2.7 µs", "parameter": "poll interval U(s, 2s): s",
                 "condition": "article's polling shape", "needed": None if x is None else round(x),
                 "default": rdma.poll_min_ns, "note": "ns"})
    _log(f"  RDMA p99 2.7 µs: poll from {x} ns")
    x50 = F.bisect_monotone(lambda s: rdma_pct(s, 50), 0.0, 10000.0, 4000.0, tol=1.0)
    extra = 3000.0 - r1
    sens.append({"claim": "RDMA end to end 3-5 µs", "parameter": "poll interval U(s, 2s): s",
                 "condition": "median at 4 µs", "needed": None if x50 is None else round(x50),
                 "default": rdma.poll_min_ns,
                 "note": f"or, with the article's 1-2 µs polls, {extra:.0f} ns more fixed latency "
                         f"(about {extra / (rdma.switch_ns + 2 * rdma.cable_ns):.1f} more switch hops)"})
    sens.append({"claim": "RDMA atomics 0.9 M/s", "parameter": "atomic_mops (NIC atomic rate)",
                 "condition": f"{N} clients, one op outstanding each",
                 "needed": ARTICLE["atomics_mops"]["rdma"], "default": rdma.atomic_mops,
                 "note": f"without a rate limit {N} clients give {N / rdma_atomic_rtt * 1e3:.1f} M/s "
                         f"(round trip {rdma_atomic_rtt:.0f} ns); facts: ConnectX-3 2.7 (1.8 from DRAM), "
                         "Connect-IB 42"})
    need_raw = ARTICLE["bandwidth_gbs"]["cxl"] / bulk_c["payload_efficiency"]
    sens.append({"claim": "CXL bandwidth 72 GB/s", "parameter": "transfer rate (GT/s, x16, 68B flits)",
                 "condition": "one direction", "needed": round(32 * need_raw / C.LINK_GBS, 1), "default": 32,
                 "note": f"needs {need_raw:.1f} GB/s raw per direction; a 32 GT/s x16 link carries "
                         f"{C.LINK_GBS:.1f}; both directions together carry {2 * bulk_c['gbs']:.1f}"})
    x = F.bisect_monotone(lambda g: R.bulk_bandwidth_gbs(rdma.with_(line_gbps=g), W["bulk_msg_bytes"]), 10.0, 800.0,
                ARTICLE["bandwidth_gbs"]["rdma"], tol=0.1)
    xs = F.bisect_monotone(lambda s: R.bulk_bandwidth_gbs(rdma, max(1, int(s))), 1.0, 65536.0,
                 ARTICLE["bandwidth_gbs"]["rdma"], tol=1.0)
    sens.append({"claim": "RDMA bandwidth 38 GB/s", "parameter": "line_gbps", "condition": "1 MiB writes",
                 "needed": None if x is None else round(x), "default": rdma.line_gbps,
                 "note": "" if xs is None else f"or, at {rdma.line_gbps:g}G, messages of about {xs:.0f} B"})
    xm = F.bisect_monotone(lambda s: 1 - R.wire_efficiency(max(1, int(s)), rdma.eth_mtu, rdma.vlan), 1.0, 4096.0,
                 1 - ARTICLE["payload_efficiency"]["rdma"], tol=0.5)
    sens.append({"claim": "43 % of RDMA bandwidth lost to metadata", "parameter": "bytes per WRITE",
                 "condition": "one frame per WRITE", "needed": None if xm is None else round(xm),
                 "default": W["bulk_msg_bytes"],
                 "note": f"at 1 MiB writes the loss is {100 * (1 - r_eff_bulk):.1f} %; 64 B writes lose "
                         f"{100 * (1 - R.wire_efficiency(64)):.1f} %"})
    sens.append({"claim": "CXL 92 % payload", "parameter": "what counts as payload",
                 "condition": "models.flit streaming reads", "needed": "message header bits",
                 "default": "64 B lines only",
                 "note": f"{100 * bulk_c['header_inclusive_efficiency']:.1f} % if header bits count, "
                         f"{100 * bulk_c['payload_efficiency']:.1f} % for the data alone"})
    moved = 2 * (N - 1) / N * total
    for side in ("cxl", "rdma"):
        t = ARTICLE["grad_sync_s"][side]
        bw = bulk_c["gbs"] if side == "cxl" else bulk_r
        sens.append({"claim": f"{side.upper()} gradient sync {t} s (530B params, 8 GPUs)",
                     "parameter": "per-GPU bandwidth (GB/s)", "condition": "ring all-reduce, no latency",
                     "needed": round(moved / t / 1e9), "default": round(bw, 1),
                     "note": f"or a model of {t * bw * 1e9 / (2 * (N - 1) / N * W['bytes_per_param']) / 1e9:.1f}B "
                             f"parameters at the modelled {bw:.1f} GB/s"})

    # sensitivity curves for the plot
    hops = [0.0, 12.0, 24.0, 48.0, 77.0, 120.0]
    sens_curve = {"hop_ns": hops,
                  "cxl_p99_host45": [cxl_sync_p99(h, cxl.host_ns) for h in hops],
                  "cxl_p99_host10": [cxl_sync_p99(h, 10.0) for h in hops]}
    scales = [0.0, 250.0, 500.0, 1000.0, 1500.0, 2000.0, 3000.0]
    sens_curve["poll_min_ns"] = scales
    sens_curve["rdma_p99"] = [rdma_pct(s, 99) for s in scales]
    sens_curve["rdma_p50"] = [rdma_pct(s, 50) for s in scales]

    # ---- the four fabrics on the same workloads
    _log("fabrics: flag ping-pong, sync, atomics and bulk on CXL, RDMA, PCIe host polling, NVLink polling")
    heads = {}
    for name in F.NAMES:
        heads[name] = F.summarize(F.measure(name, params, W, samples, seed, atomic_ops))
        _log(f"  {name}: {heads[name]}")
    seeds = [seed + k for k in range(W["spread_seeds"])]
    _log(f"fabrics: spread over seeds {seeds} ({max(5, samples // 10)} trials each)")
    spread = F.spread(params, W, seeds, max(5, samples // 10), max(100, atomic_ops // 4), log=_log)
    fab_grad = {n: round(F.grad_sync_s(n, params, W, heads[n]["sync_p50_ns"], heads[n]["bandwidth_gbs"]), 3)
                for n in F.NAMES}
    regime = F.regimes(params, W, ARTICLE, sweep_trials * 10, seed)

    def sens_rows(claim):
        return [r for r in sens if r["claim"] == claim]

    def needed(claim, fmt):
        rows = [r for r in sens_rows(claim) if r["needed"] is not None]
        return "; ".join(fmt(r) for r in rows) if rows else "unreachable by this parameter alone"

    needs = {k: dict(v) for k, v in regime.items()}
    needs.setdefault("cxl_sync", {})["cxl"] = "; ".join(
        (f"<= {r['needed']} ns per hop" if r["needed"] is not None else r["note"]) + f" ({r['condition']})"
        for r in sens_rows("CXL sync p99 152 ns"))
    needs.setdefault("cxl_atomics", {})["cxl"] = needed("CXL atomics 8.3 M/s",
                                                        lambda r: f"<= {r['needed']} ns per hop ({r['condition']})")
    needs.setdefault("cxl_bandwidth", {})["cxl"] = needed("CXL bandwidth 72 GB/s",
                                                          lambda r: f">= {r['needed']} GT/s at x16 ({r['note']})")
    needs["rdma_sync"] = {"rdma": needed("RDMA sync p99 2.7 µs",
                                         lambda r: f"polling every U(s, 2s) with s = {r['needed']} ns")}
    needs["rdma_atomics"] = {"rdma": f"a NIC atomic rate of {ARTICLE['atomics_mops']['rdma']:g} M/s "
                                     f"(default {rdma.atomic_mops:g})"}
    needs["rdma_bandwidth"] = {"rdma": needed("RDMA bandwidth 38 GB/s",
                                              lambda r: f"a {r['needed']} Gb/s line {r['note']}".strip())}
    for side in ("cxl", "rdma"):
        r = next(r for r in sens if r["claim"].startswith(f"{side.upper()} gradient sync"))
        needs[f"{side}_grad"] = {n: f"{r['needed']} GB/s per GPU (it has {heads[n]['bandwidth_gbs']:.4g})"
                                 for n in F.NAMES}
    fab_verdicts = F.verdicts(heads, fab_grad, needs, ARTICLE, tol)

    # ---- validation of the RDMA model against facts §4.2 (Gen3 x16, EDR 100G, back to back, no poll)
    v = rdma.with_(pcie_tlp_gbs=R.gen3_x16_tlp_gbs(), line_gbps=rdma.cal_line_gbps)
    measured = {32: (810, 830), 1024: (1520, 1610), 4096: (2250, 2250), 32768: (4570, 4570)}
    validation = [{"bytes": s, "model_ns": round(sum(R.write_parts(v, s, switch=False).values()), 1),
                   "measured_ns": list(m)} for s, m in measured.items()]

    # ---- parameters with sources
    fparams, params = params, {}
    for k, (unit, src) in C.SOURCES.items():
        val = getattr(cxl, k)
        params[f"cxl.{k}"] = {"value": val, "unit": unit, "source": src}
    for k, (unit, src) in R.SOURCES.items():
        params[f"rdma.{k}"] = {"value": getattr(rdma, k), "unit": unit, "source": src}
    for fab, mod in (("pcie_host_polling", F.P), ("nvlink_polling", F.NV)):
        for k, (unit, src) in mod.SOURCES.items():
            params[f"{fab}.{k}"] = {"value": getattr(getattr(fparams, fab), k), "unit": unit, "source": src}
    for k, (val, unit, src) in WORKLOAD.items():
        params[f"workload.{k}"] = {"value": val, "unit": unit, "source": src}
    params["nvlink_polling.store_one_way_ns (derived)"] = {
        "value": round(fparams.nvlink_polling.store_one_way_ns, 3), "unit": "ns",
        "source": "derived [D]: step_ns - poll_ns / 2"}
    params["cxl.hop_ns (derived)"] = {"value": round(C.hop_ns(cxl), 3), "unit": "ns",
                                      "source": "derived [D]: port + interconnect + flits_per_msg x flit_ns + "
                                                "DCOH (rx + tx) / 2 cycles"}

    results = {
        "seed": seed, "samples": samples,
        "preset": fparams.preset, "overrides": fparams.overrides(),
        "fabrics": heads, "fabric_spread": {"seeds": seeds, **spread}, "fabric_grad_sync_s": fab_grad,
        "fabric_verdicts": fab_verdicts,
        "cxl": {
            "sync_p50_ns": round(c50, 2), "sync_p99_ns": round(c99, 2), "sync_p999_ns": round(c999, 2),
            "writer_upgrade_p50_ns": round(cw50, 2),
            "dcoh_invalidation_ns": round(C.snoop_round_trip_ns(cxl), 2),
            "atomics_mops": round(at_c[N], 3),
            "bandwidth_gbs": round(bulk_c["gbs"], 3),
            "payload_efficiency": round(bulk_c["payload_efficiency"], 4),
            "header_inclusive_efficiency": round(bulk_c["header_inclusive_efficiency"], 4),
            "read_rtt_ns": round(bulk_c["read_rtt_ns"], 2),
            "outstanding_for_link_rate": bulk_c["outstanding_for_link_rate"],
            "bandwidth_with_golden_16_outstanding_gbs": round(16 * 64 / bulk_c["read_rtt_ns"], 3),
            "update_wire_bytes": round(W["update_bytes"] / C.message_efficiency(W["update_bytes"])),
            "grad_sync_s": round(grad_c, 3), "grad_sync_link_only_s": round(grad_c_link, 3),
            "grad_sync_lock_s": round(lock_c, 3),
        },
        "rdma": {
            "sync_p50_ns": round(r50, 2), "sync_p99_ns": round(r99, 2), "sync_p999_ns": round(r999, 2),
            "sync_p1_ns": round(r1, 2),
            "sync_4k_page_p50_ns": round(rp50, 2), "sync_4k_page_p99_ns": round(rp99, 2),
            "atomics_mops": round(at_r[N], 3), "atomic_rtt_ns": round(rdma_atomic_rtt, 2),
            "bandwidth_gbs": round(bulk_r, 3),
            "payload_efficiency": round(r_eff_bulk, 4),
            "payload_efficiency_64B": round(R.wire_efficiency(64), 4),
            "update_wire_bytes": R.message_wire_bytes(W["update_bytes"], rdma.eth_mtu, rdma.vlan),
            "update_wire_bytes_4k_page": R.message_wire_bytes(W["update_bytes"], rdma.eth_mtu, rdma.vlan, 4096),
            "nic_tx_plus_rx_ns": round(rdma.nic_tx_ns + rdma.nic_rx_ns, 2),
            "grad_sync_s": round(grad_r, 3), "grad_sync_lock_s": round(lock_r, 3),
        },
        "parameters": params,
        "sensitivity": sens,
        "validation_rdma": validation,
        "curves": {"atomics_mops": {"devices": W["devices_curve"], "cxl": [at_c[n] for n in W["devices_curve"]],
                                    "rdma": [at_r[n] for n in W["devices_curve"]]},
                   "sync_p99_vs_devices": {str(n): v for n, v in sync_n.items()},
                   "aggregate_bandwidth_gbs": {str(n): v for n, v in agg_bw.items()},
                   "efficiency_vs_size": eff_curve, "sensitivity": sens_curve},
    }
    results["claims"] = _claims(results, tol)
    results = _finite(json.loads(json.dumps(results, default=_jsonable)))   # one canonical form, strict JSON
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2, sort_keys=True, allow_nan=False)
    if plots:
        _log("plots")
        _plots(out_dir, cl, rl, results)
        F.plot(out_dir, results["fabrics"], results["fabric_spread"], ARTICLE)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(_markdown(results, cxl, rdma))
    _log(f"wrote {out_dir}/results.json, report.md and plots in {time.perf_counter() - t_start:.1f} s")
    return results


def _finite(o):
    """Infinite floats (e.g. a link without a bandwidth limit) as the string "inf": strict JSON has no
    Infinity, and models.fabric_params reads "inf" back."""
    if isinstance(o, float) and math.isinf(o):
        return "inf" if o > 0 else "-inf"
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o


def _jsonable(o):
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _claims(res, tol):
    c, r = res["cxl"], res["rdma"]
    A = ARTICLE
    rows = []

    def row(metric, a_c, a_r, m_c, m_r, verdict):
        rows.append({"metric": metric, "article_cxl": a_c, "article_rdma": a_r, "model_cxl": m_c,
                     "model_rdma": m_r, "verdict": verdict})

    ratio_a = A["sync_p99_ns"]["rdma"] / A["sync_p99_ns"]["cxl"]
    ratio_m = r["sync_p99_ns"] / c["sync_p99_ns"]
    row("sync p99 latency to visibility, 8 B flag, 1 writer + 7 readers (ns)",
        A["sync_p99_ns"]["cxl"], A["sync_p99_ns"]["rdma"], c["sync_p99_ns"], r["sync_p99_ns"],
        f"CXL: {_judge(A['sync_p99_ns']['cxl'], c['sync_p99_ns'], tol, True)}; RDMA: "
        f"{_judge(A['sync_p99_ns']['rdma'], r['sync_p99_ns'], tol, True)}; CXL faster holds "
        f"({ratio_m:.1f}x, article {ratio_a:.1f}x)" if ratio_m > 1 else "CXL is not faster")
    row("sync p50 latency (ns)", None, None, c["sync_p50_ns"], r["sync_p50_ns"], "no article figure")
    ratio_m = c["atomics_mops"] / r["atomics_mops"]
    row("contended atomic counter, 8 devices (M ops/s)", A["atomics_mops"]["cxl"], A["atomics_mops"]["rdma"],
        c["atomics_mops"], r["atomics_mops"],
        f"CXL: {_judge(A['atomics_mops']['cxl'], c['atomics_mops'], tol, False)}; RDMA: "
        f"{_judge(A['atomics_mops']['rdma'], r['atomics_mops'], tol, False)}; CXL ahead by {ratio_m:.1f}x "
        f"(article {A['atomics_mops']['cxl'] / A['atomics_mops']['rdma']:.1f}x)")
    row("coherent bulk bandwidth, one device (GB/s)", A["bandwidth_gbs"]["cxl"], A["bandwidth_gbs"]["rdma"],
        c["bandwidth_gbs"], r["bandwidth_gbs"],
        f"CXL: {_judge(A['bandwidth_gbs']['cxl'], c['bandwidth_gbs'], tol, False)} (72 GB/s exceeds the "
        f"{C.LINK_GBS:.1f} GB/s raw rate of a 32 GT/s x16 direction); RDMA: "
        f"{_judge(A['bandwidth_gbs']['rdma'], r['bandwidth_gbs'], tol, False)}; CXL ahead by "
        f"{c['bandwidth_gbs'] / r['bandwidth_gbs']:.2f}x (article "
        f"{A['bandwidth_gbs']['cxl'] / A['bandwidth_gbs']['rdma']:.2f}x)")
    row("DCOH invalidation: SnpInv round trip / writer's RdOwn-to-GO (ns)", "90-150", None,
        f"{c['dcoh_invalidation_ns']} / {c['writer_upgrade_p50_ns']}", None,
        f"snoop round trip {_judge(A['dcoh_invalidation_ns']['cxl'], c['dcoh_invalidation_ns'], tol, True)}; "
        f"writer's upgrade {_judge(A['dcoh_invalidation_ns']['cxl'], c['writer_upgrade_p50_ns'], tol, True)}")
    row("RDMA polling 1-2 µs, end to end 3-5 µs (model p1-p99, ns)", None, "3000-5000", None,
        f"{r['sync_p1_ns']:.0f}-{r['sync_p99_ns']:.0f}",
        "polling 1-2 µs is a model input (article); with it the model's end to end is "
        f"{r['sync_p1_ns'] / 1e3:.1f}-{r['sync_p99_ns'] / 1e3:.1f} µs: "
        + ("within 3-5 µs" if r["sync_p1_ns"] >= 3000 and r["sync_p99_ns"] <= 5000 else
           "below the article's 3-5 µs" if r["sync_p99_ns"] < 3000 else "overlaps 3-5 µs only in part"))
    row("wire bytes for a 2-byte update (CXL: one 64 B line in 68B flits)", "64 B line", "4096 B page",
        c["update_wire_bytes"],
        f"{r['update_wire_bytes']} (exact) / {r['update_wire_bytes_4k_page']} (4 KB page)",
        "refuted as a protocol property: an RDMA WRITE moves its exact length (facts §4.3), fewer wire bytes "
        "than CXL's line; 4 KB only if software moves pages (then p99 "
        f"{r['sync_4k_page_p99_ns']:.0f} ns vs {r['sync_p99_ns']:.0f})")
    row("payload efficiency (useful bytes / wire bytes)", A["payload_efficiency"]["cxl"],
        A["payload_efficiency"]["rdma"], c["payload_efficiency"], r["payload_efficiency"],
        f"CXL: 92 % only if message header bits count as payload ({c['header_inclusive_efficiency']}); "
        f"data alone {c['payload_efficiency']}. RDMA: 43 % lost does not hold for bulk "
        f"({100 * (1 - r['payload_efficiency']):.1f} % lost at 1 MiB); 64 B writes lose "
        f"{100 * (1 - r['payload_efficiency_64B']):.1f} %")
    row("gradient sync, 530B params, 8 GPUs, ring all-reduce (s)", A["grad_sync_s"]["cxl"],
        A["grad_sync_s"]["rdma"], c["grad_sync_s"], r["grad_sync_s"],
        f"refuted: the model is {c['grad_sync_s'] / A['grad_sync_s']['cxl']:.0f}x (CXL) and "
        f"{r['grad_sync_s'] / A['grad_sync_s']['rdma']:.0f}x (RDMA) slower than the article; CXL through "
        f"host memory is {'slower' if c['grad_sync_s'] > r['grad_sync_s'] else 'faster'} than RDMA "
        f"(link-only CXL: {c['grad_sync_link_only_s']} s)")
    row("gradient sync, lock-based all-reduce (the article's method) (s)", None, None,
        c["grad_sync_lock_s"], r["grad_sync_lock_s"], "no article figure; shown for the method")
    return rows


# ---------------------------------------------------------------- plots
def _plots(out_dir, cl, rl, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def cdf(ax, vals, label):
        s = sorted(vals)
        n = len(s)
        ax.plot(s, [(i + 1) / n for i in range(n)], label=label)

    fig, ax = plt.subplots(figsize=(7, 4))
    cdf(ax, cl, "CXL.cache (golden model)")
    cdf(ax, rl, "RDMA WRITE + polling")
    ax.axvline(ARTICLE["sync_p99_ns"]["cxl"], ls=":", c="C0", label="article CXL p99 152 ns")
    ax.axvline(ARTICLE["sync_p99_ns"]["rdma"], ls=":", c="C1", label="article RDMA p99 2.7 µs")
    ax.set_xscale("log"); ax.set_xlabel("latency to visibility (ns)"); ax.set_ylabel("CDF")
    ax.set_title("Workload 1: 1 writer, 7 readers, 8 B flag"); ax.legend(fontsize=8); ax.grid(alpha=.3)
    fig.tight_layout(); fig.savefig(os.path.join(out_dir, "latency_cdf.png"), dpi=110); plt.close(fig)

    cur = res["curves"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    n = cur["atomics_mops"]["devices"]
    a1.plot(n, cur["atomics_mops"]["cxl"], "o-", label="CXL.cache (line migrates per op)")
    a1.plot(n, cur["atomics_mops"]["rdma"], "s-", label="RDMA NIC atomics")
    a1.plot([8], [ARTICLE["atomics_mops"]["cxl"]], "C0x", ms=10, label="article CXL")
    a1.plot([8], [ARTICLE["atomics_mops"]["rdma"]], "C1x", ms=10, label="article RDMA")
    a1.set_xlabel("devices"); a1.set_ylabel("M ops/s"); a1.set_title("contended counter")
    a1.legend(fontsize=8); a1.grid(alpha=.3)
    agg = cur["aggregate_bandwidth_gbs"]
    a2.plot(n, [agg[str(k)]["cxl_gbs"] for k in n], "o-", label="CXL.cache (host memory caps)")
    a2.plot(n, [agg[str(k)]["rdma_gbs"] for k in n], "s-", label="RDMA (one NIC per device)")
    a2.set_xlabel("devices"); a2.set_ylabel("aggregate GB/s"); a2.set_title("bulk transfer")
    a2.legend(fontsize=8); a2.grid(alpha=.3)
    fig.tight_layout(); fig.savefig(os.path.join(out_dir, "throughput_vs_devices.png"), dpi=110)
    plt.close(fig)

    e = cur["efficiency_vs_size"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, lab in (("cxl_flit", "CXL.cache 68B flits (64 B lines)"), ("rdma_exact", "RoCEv2 WRITE, MTU 4096"),
                   ("rdma_mtu1500", "RoCEv2 WRITE, MTU 1024"), ("rdma_4k_pages", "RoCEv2, 4 KB pages"),
                   ("pcie_mwr", "PCIe MWr, MPS 256")):
        ax.plot(e["bytes"], e[k], label=lab)
    ax.axhline(0.92, ls=":", c="k", lw=.8); ax.axhline(0.57, ls="--", c="k", lw=.8)
    ax.set_xscale("log", base=2); ax.set_xlabel("message size (B)"); ax.set_ylabel("useful / wire bytes")
    ax.set_title("payload efficiency (dotted: article CXL 92 %, dashed: article RDMA 57 %)", fontsize=9)
    ax.legend(fontsize=8); ax.grid(alpha=.3)
    fig.tight_layout(); fig.savefig(os.path.join(out_dir, "efficiency_vs_size.png"), dpi=110); plt.close(fig)

    s = cur["sensitivity"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.plot(s["hop_ns"], s["cxl_p99_host45"], "o-", label="host 45 ns")
    a1.plot(s["hop_ns"], s["cxl_p99_host10"], "s-", label="host 10 ns")
    a1.axhline(152, ls=":", c="k", label="article 152 ns")
    a1.set_xlabel("port + interconnect per hop (ns)"); a1.set_ylabel("CXL sync p99 (ns)")
    a1.legend(fontsize=8); a1.grid(alpha=.3)
    a2.plot(s["poll_min_ns"], s["rdma_p99"], "o-", label="p99")
    a2.plot(s["poll_min_ns"], s["rdma_p50"], "s-", label="p50")
    a2.axhline(2700, ls=":", c="k", label="article p99 2.7 µs")
    a2.axhspan(3000, 5000, color="k", alpha=.08, label="article 3-5 µs")
    a2.set_xlabel("poll interval U(s, 2s): s (ns)"); a2.set_ylabel("RDMA sync latency (ns)")
    a2.legend(fontsize=8); a2.grid(alpha=.3)
    fig.tight_layout(); fig.savefig(os.path.join(out_dir, "sensitivity.png"), dpi=110); plt.close(fig)


# ---------------------------------------------------------------- markdown
def _fmt(v):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def _markdown(res, cxl, rdma):
    c, r = res["cxl"], res["rdma"]
    L = ["# CXL.cache against RDMA WRITE + polling: the article's claims, modelled", "",
         f"Generated by `make report` (`python -m models.report`, seed {res['seed']}, {res['samples']} "
         "samples). Method, sources and caveats: `docs/comparison.md`. Numbers: `results.json`.", "",
         "CXL side: the golden model (`models/system.py`) driven by directed workloads with the time base of "
         "`models/cxl_timing.py`. RDMA side: `models/rdma.py` (analytic + Monte Carlo). Headlines use "
         "8 devices (the article's 8 GPUs).", "",
         "## The article's claims beside the model", "",
         "| metric | article CXL | article RDMA | model CXL | model RDMA | verdict |",
         "|---|---|---|---|---|---|"]
    for row in res["claims"]:
        L.append("| " + " | ".join(_fmt(row[k]) for k in ("metric", "article_cxl", "article_rdma", "model_cxl",
                                                            "model_rdma", "verdict")) + " |")
    L += ["", f"Parameter set: preset `{res['preset']}`"
          + (f", overrides {json.dumps(res['overrides'], default=str)}" if res["overrides"] else "") + ".", "",
          "## Four fabrics on the same workloads", "",
          "Flag ping-pong between two agents, sync to 7 readers (workload 1), atomics on one address "
          "(CXL and RDMA: 8 devices contending; PCIe: one device's AtomicOps to host memory; NVLink: one "
          "GPU's atomics in its peer's memory), bulk bandwidth of one device (workload 3). In brackets: "
          f"p1-p99 over seeds {res['fabric_spread']['seeds']} (`fabrics.png`): of the samples pooled over "
          "the seeds for latencies, of the per-seed figures for throughputs.", "",
          "| fabric | flag round trip p50 (ns) | sync p50 (ns) | sync p99 (ns) | atomics (M ops/s) | "
          "bandwidth (GB/s) | gradient sync, ring (s) |", "|---|---|---|---|---|---|---|"]
    for name in F.NAMES:
        h, sp = res["fabrics"][name], res["fabric_spread"][name]
        rng = lambda k: f"[{sp[k][0]:.4g}-{sp[k][2]:.4g}]"
        L.append(f"| {F.LABELS[name]} | {h['flag_round_trip_p50_ns']:.0f} {rng('flag_round_trip_ns')} | "
                 f"{h['sync_p50_ns']:.0f} {rng('sync_ns')} | {h['sync_p99_ns']:.0f} | "
                 f"{h['atomics_mops']:.4g} {rng('atomics_mops')} | {h['bandwidth_gbs']:.4g} {rng('bandwidth_gbs')} | "
                 f"{res['fabric_grad_sync_s'][name]:.3g} |")
    L += ["", "## Verdict per claim: which fabric, which regime", "",
          "A claim about CXL is checked on every fabric (which of them delivers the article's CXL "
          "figure?), a claim about RDMA on RDMA. \"would need\": the parameter regime that makes the claim "
          "true on a fabric where it does not hold at the defaults.", "",
          "| claim | test | " + " | ".join(F.LABELS[n] for n in F.NAMES) + " | holds on | would need |",
          "|---|---|" + "---|" * len(F.NAMES) + "---|---|"]
    for v in res["fabric_verdicts"]:
        L.append(f"| {v['claim']} | {v['test']} | " + " | ".join(_fmt(v["values"][n]) for n in F.NAMES)
                 + f" | {', '.join(v['holds_on']) or 'none of ' + ', '.join(v['checked_on'])} | "
                 f"{v['would_need'] or '–'} |")
    L += ["", "## Headline figures", "",
          "| | CXL.cache | RDMA |", "|---|---|---|",
          f"| sync latency p50 / p99 / p99.9 (ns) | {c['sync_p50_ns']:.0f} / {c['sync_p99_ns']:.0f} / "
          f"{c['sync_p999_ns']:.0f} | {r['sync_p50_ns']:.0f} / {r['sync_p99_ns']:.0f} / {r['sync_p999_ns']:.0f} |",
          f"| contended atomics, 8 devices (M ops/s) | {c['atomics_mops']:.2f} | {r['atomics_mops']:.2f} |",
          f"| bulk bandwidth, one device (GB/s) | {c['bandwidth_gbs']:.1f} | {r['bandwidth_gbs']:.1f} |",
          f"| payload efficiency (bulk) | {c['payload_efficiency']:.3f} | {r['payload_efficiency']:.3f} |",
          f"| gradient sync 530B/8 GPUs, ring (s) | {c['grad_sync_s']:.1f} (link only {c['grad_sync_link_only_s']:.1f}) "
          f"| {r['grad_sync_s']:.1f} |",
          f"| gradient sync, lock-based (s) | {c['grad_sync_lock_s']:.1f} | {r['grad_sync_lock_s']:.1f} |",
          "", "Other model outputs: CXL read round trip "
          f"{c['read_rtt_ns']:.1f} ns; the link rate needs {c['outstanding_for_link_rate']} outstanding reads "
          f"(the golden model's 16 CQIDs would cap a device at {c['bandwidth_with_golden_16_outstanding_gbs']:.1f} GB/s); "
          f"RDMA atomic round trip {r['atomic_rtt_ns']:.0f} ns; calibrated NIC time (tx + rx) "
          f"{r['nic_tx_plus_rx_ns']:.1f} ns.", "",
          "Plots: `latency_cdf.png`, `throughput_vs_devices.png`, `efficiency_vs_size.png`, `sensitivity.png`, "
          "`fabrics.png`.",
          "", "## What each article number would need (sensitivity)", "",
          "| claim | parameter | condition | needed | model default | note |", "|---|---|---|---|---|---|"]
    for s in res["sensitivity"]:
        needed = s["needed"]
        if needed is None:
            needed = "unreachable"
        L.append("| " + " | ".join(_fmt(x) for x in (s["claim"], s["parameter"], s["condition"], needed,
                                                       s["default"], s["note"])) + " |")
    L += ["", "## Assumptions in the model's structure", "",
          "- CXL: the golden model's links are replaced by timed links (`models/cxl_timing.TimedLink`): the "
          "home agent is one server that sends a message per `host_occupancy_ns` (later ones queue), each "
          "direction's wire carries one message at a time at `link_gbs`, and every message takes U(0, "
          "`jitter_ns`) extra. Bulk bandwidth uses the same wire bytes per message and the same link rate.",
          "- CXL: one switchless hop host<->device; every fetch-add migrates the counter line (no batching); "
          "gradient traffic goes through host memory (the golden model's topology; `grad_sync_link_only_s` "
          "drops that bound).",
          "- RDMA: one cut-through switch; RC QPs, so one WRITE per reader; one doorbell for the batch; large "
          "messages pipelined behind their first MTU; payload padded to 4 B (BTH PadCnt); the receiver's "
          "poll read itself costs nothing.",
          "- PCIe host polling: the CPU's store is visible to the next device read at once; every device has its "
          "own x16 link to the root complex. NVLink polling: a direct link (no NVSwitch hop) from the writer "
          "to each reader; the store crossing is NCCL's step less the mean polling wait.",
          "- All: one bucket at a time in the all-reduce (no overlap with compute or between buckets).",
          "", "## RDMA model against the measurements in the facts (§4.2)", "",
          "Setup of the measurement: ib_send_lat, ConnectX-4 EDR 100G, PCIe Gen3 x16, back to back, "
          "busy polling. The 32 B point is the calibration (it fixes the NIC time); the others are checks.", "",
          "| bytes | model (ns) | measured (ns) |", "|---|---|---|"]
    for v in res["validation_rdma"]:
        m = v["measured_ns"]
        L.append(f"| {v['bytes']} | {v['model_ns']:.0f} | {m[0]}" + (f"-{m[1]}" if m[1] != m[0] else "") + " |")
    L += ["", "## Parameters and their sources", "", "| parameter | value | unit | source |",
          "|---|---|---|---|"]
    for k, v in res["parameters"].items():
        L.append(f"| `{k}` | {_fmt(v['value'])} | {v['unit']} | {v['source']} |")
    L += ["", "Facts are docs/sources.md; \"article\" is the source article under test; "
          "\"assumption\" means no source was found for the number.", ""]
    return "\n".join(L)


def host_directory_effect(cxl, host_dir):
    """What a finite host directory (``host_dir`` "SETSxWAYS", models/host.py) changes on the CXL side, on
    the golden model: an unloaded read miss whose set is full of lines another device holds waits for the
    back-invalidation of one of them (SnpInv and its answer) before the host answers it; with a free way it
    costs what it does with the exact directory.  The report's workloads each use one line per set (the flag,
    the counter; bulk transfers stream), so their numbers are those of the exact directory."""
    try:
        sets, ways = (int(x) for x in host_dir.lower().split("x"))
        cfg = C.golden_config(cxl, 2, host_dir="finite", host_dir_sets=sets, host_dir_ways=ways)
    except ValueError as e:            # ConfigError is a ValueError
        raise ValueError(f"--host-dir {host_dir!r}: expected SETSxWAYS, powers of two ({e})") from None

    def read_ns(sim, line):
        t0 = sim.now
        sim.issue(0, "load", line)
        sim.service()
        while sim.advance():
            sim.step()
            if sim.idle(0):
                return (sim.now - t0) * cxl.tick_ns
            sim.service()
        raise AssertionError("read did not complete")

    sim = C.GoldenSim(cfg)
    free = read_ns(sim, 0x40)                    # a free way: no back-invalidation
    sim.settle()
    sim.issue(0, "evict", 0x40)                  # its entry goes with its only holder
    sim.settle()
    for i in range(1, ways + 1):                 # device 1 fills the set of 0x40
        sim.issue(1, "load", 0x40 + i * sets)
        sim.settle()
    full = read_ns(sim, 0x40)                    # the set is full of device 1's lines: one goes first
    sim.settle()
    evicted = sim.sys.host.counts["back_invalidations"]
    return {"host_dir": f"{sets}x{ways}", "read_miss_free_way_ns": free, "read_miss_full_set_ns": full,
            "back_invalidation_ns": full - free, "back_invalidations": evicted,
            "snoop_round_trip_ns": C.snoop_round_trip_ns(cxl),
            "workloads_changed": "none: each uses one line per directory set (flag, counter, streamed bulk)"}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m models.report", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/report")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--samples", type=int, default=1000,
                    help="sync trials per side (each gives N-1 samples); atomics use 2x this many ops")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--preset", choices=sorted(FP.PRESETS), default=None,
                    help="named parameter set (" + "; ".join(f"{k}: {v}" for k, v in FP.PRESET_NOTES.items())
                    + ")")
    ap.add_argument("--params", metavar="FILE", default=None,
                    help="JSON parameter file: {\"preset\": ..., \"cxl\": {...}, \"rdma\": {...}, "
                         "\"pcie_host_polling\": {...}, \"nvlink_polling\": {...}} (see models/fabric_params.py)")
    ap.add_argument("--host-dir", default="{}x{}".format(*Config().host_dir_shape),
                    help="SETSxWAYS of the finite host directory whose cost the report states, or 'exact' "
                         "(default: the golden model's, models/config.py)")
    args = ap.parse_args(argv)
    if args.samples < 1:
        ap.error("--samples must be >= 1")
    try:
        params = FP.load(args.params, args.preset)
        hd = None if args.host_dir == "exact" else host_directory_effect(params.cxl, args.host_dir)
    except ValueError as e:                 # FP.ParamError is one too
        ap.error(str(e))
    res = build(args.out, seed=args.seed, samples=args.samples, plots=not args.no_plots, params=params)
    if hd is not None:                 # appended: what the finite directory changes on the CXL side
        res["host_directory"] = hd
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(_jsonable(res), f, indent=2)
        with open(os.path.join(args.out, "report.md"), "a") as f:
            f.write(f"\n## Finite host directory ({hd['host_dir']})\n\nWith the golden host's finite directory "
                    f"(models/host.py), a read miss whose set is full of lines other devices hold waits for "
                    f"one back-invalidation (SnpInv and its answer): {hd['read_miss_full_set_ns']:.0f} ns "
                    f"against {hd['read_miss_free_way_ns']:.0f} ns with a free way (+"
                    f"{hd['back_invalidation_ns']:.0f} ns; one snoop round trip is "
                    f"{hd['snoop_round_trip_ns']:.0f} ns).  The workloads above use one line per set, so "
                    f"their numbers are those of the exact directory.\n")
    c, r = res["cxl"], res["rdma"]
    print(f"CXL  sync p50/p99 {c['sync_p50_ns']:.0f}/{c['sync_p99_ns']:.0f} ns, atomics {c['atomics_mops']:.2f} M/s, "
          f"{c['bandwidth_gbs']:.1f} GB/s, efficiency {c['payload_efficiency']:.3f}")
    print(f"RDMA sync p50/p99 {r['sync_p50_ns']:.0f}/{r['sync_p99_ns']:.0f} ns, atomics {r['atomics_mops']:.2f} M/s, "
          f"{r['bandwidth_gbs']:.1f} GB/s, efficiency {r['payload_efficiency']:.3f}")
    for name in F.NAMES:
        h = res["fabrics"][name]
        print(f"{name:18s} flag round trip p50 {h['flag_round_trip_p50_ns']:.0f} ns, sync p50/p99 "
              f"{h['sync_p50_ns']:.0f}/{h['sync_p99_ns']:.0f} ns, atomics {h['atomics_mops']:.4g} M/s, "
              f"{h['bandwidth_gbs']:.4g} GB/s")
    print(f"wrote {args.out}/report.md, results.json and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
