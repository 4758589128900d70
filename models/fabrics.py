"""The four fabrics side by side on the same workloads: CXL.cache, RDMA WRITE + polling, a PCIe device
polling pinned host memory, and two GPUs polling each other's memory over NVLink.

For each fabric (``results.json`` ``fabrics.<name>``):

* ``flag_round_trip_p50_ns``: ping-pong between two agents with relaxed flag accesses, each fabric in
  its own terms (models/cxl_timing.py, rdma.py, pcie_polling.py, nvlink_polling.py:
  ``flag_round_trips``);
* ``sync_p50_ns`` / ``sync_p99_ns``: workload 1 (one writer, N-1 readers);
* ``atomics_mops``: CXL and RDMA as in workload 2 (N devices contending for one counter); PCIe: one
  device's AtomicOps on one host address; NVLink: one GPU's atomics on one address in its peer;
* ``bandwidth_gbs``: workload 3 (one device's bulk transfer).

:func:`spread` repeats every workload over several seeds and keeps p1/p50/p99 (the spread bars of the
plot); :func:`verdicts` says for each of the article's claims which fabric makes it true at its
defaults, and what parameter regime would make it true on the others.
"""

import os

from . import cxl_timing as C
from . import nvlink_polling as NV
from . import pcie_polling as P
from . import rdma as R
from .latency import percentile

__all__ = ["NAMES", "LABELS", "measure", "summarize", "spread", "grad_sync_s", "regimes", "verdicts",
           "plot"]

NAMES = ("cxl", "rdma", "pcie_host_polling", "nvlink_polling")
LABELS = {"cxl": "CXL.cache", "rdma": "RDMA WRITE + polling", "pcie_host_polling": "PCIe host polling",
          "nvlink_polling": "NVLink polling"}


def _pct(vals, *ps):
    s = sorted(vals)
    return [percentile(s, p) for p in ps]


def measure(name, fp, W, trials, seed, atomic_ops):
    """Samples and figures of fabric ``name`` (``fp``: models.fabric_params.FabricParams, ``W``: the
    report's workload values)."""
    n = W["n_gpus"]
    flag = W["flag_bytes"]
    if name == "cxl":
        p = fp.cxl
        return {"sync": C.sync_latencies(p, n, trials, seed=seed)[0],
                "flag_round_trip": C.flag_round_trips(p, trials, seed=seed),
                "atomics_mops": C.atomic_throughput(p, n, ops=atomic_ops, seed=seed) / 1e6,
                "bandwidth_gbs": C.bulk_bandwidth(p)["gbs"]}
    if name == "rdma":
        p = fp.rdma
        return {"sync": R.sample_sync(p, n, flag, trials, seed=seed),
                "flag_round_trip": R.flag_round_trips(p, flag, trials, seed=seed),
                "atomics_mops": R.atomic_throughput(p, n, ops=atomic_ops, seed=seed) / 1e6,
                "bandwidth_gbs": R.bulk_bandwidth_gbs(p, W["bulk_msg_bytes"])}
    if name == "pcie_host_polling":
        p = fp.pcie_host_polling
        return {"sync": P.sync_latencies(p, n, trials, seed=seed),
                "flag_round_trip": P.flag_round_trips(p, trials, seed=seed),
                "atomics_mops": P.atomic_throughput(p, ops=atomic_ops, seed=seed) / 1e6,
                "bandwidth_gbs": P.bulk_bandwidth_gbs(p)}
    if name == "nvlink_polling":
        p = fp.nvlink_polling
        return {"sync": NV.sync_latencies(p, n, trials, seed=seed),
                "flag_round_trip": NV.flag_round_trips(p, trials, seed=seed),
                "atomics_mops": NV.atomic_throughput(p) / 1e6,
                "bandwidth_gbs": NV.bulk_bandwidth_gbs(p)}
    raise ValueError(f"unknown fabric {name!r} (known: {', '.join(NAMES)})")


def summarize(m):
    """The five figures results.json keeps per fabric."""
    s50, s99 = _pct(m["sync"], 50, 99)
    return {"sync_p50_ns": round(s50, 2), "sync_p99_ns": round(s99, 2),
            "flag_round_trip_p50_ns": round(_pct(m["flag_round_trip"], 50)[0], 2),
            "atomics_mops": round(m["atomics_mops"], 3), "bandwidth_gbs": round(m["bandwidth_gbs"], 3)}


def spread(fp, W, seeds, trials, atomic_ops, log=None):
    """p1/p50/p99 per fabric and figure over ``seeds``: latencies pooled over every seed's samples,
    throughputs over the per-seed figures."""
    out = {}
    for name in NAMES:
        sync, rtt, atom, bw = [], [], [], []
        for s in seeds:
            m = measure(name, fp, W, trials, s, atomic_ops)
            sync += m["sync"]
            rtt += m["flag_round_trip"]
            atom.append(m["atomics_mops"])
            bw.append(m["bandwidth_gbs"])
        out[name] = {k: [round(v, 3) for v in _pct(vals, 1, 50, 99)]
                     for k, vals in (("sync_ns", sync), ("flag_round_trip_ns", rtt), ("atomics_mops", atom),
                                     ("bandwidth_gbs", bw))}
        if log:
            log(f"  spread {name}: sync p1/p50/p99 {out[name]['sync_ns']}")
    return out


def grad_sync_s(name, fp, W, sync_p50_ns, bandwidth_gbs):
    """Workload 4 (ring all-reduce of the gradient) on ``name``.  CXL.cache and PCIe host polling move
    the data through host memory (the devices share it); RDMA as in models/rdma.py; NVLink GPU to GPU."""
    total = W["model_params"] * W["bytes_per_param"]
    n, bucket = W["n_gpus"], W["bucket_bytes"]
    if name == "rdma":
        return R.ring_allreduce_s(fp.rdma, total, n, bucket)
    host = fp.cxl if name == "cxl" else None
    if name == "pcie_host_polling":
        host = fp.cxl.with_(host_mem_gbs=fp.pcie_host_polling.host_mem_gbs)
    if host is not None:
        return C.ring_allreduce_s(host, total, n, bucket, sync_p50_ns, bandwidth_gbs, via_host_memory=True)
    return C.ring_allreduce_s(fp.cxl, total, n, bucket, sync_p50_ns, bandwidth_gbs, via_host_memory=False)


def bisect_monotone(f, lo, hi, target, iters=40, tol=None):
    """x in [lo, hi] with f(x) = target for a monotone f (either direction), or None if the target is
    outside [f(lo), f(hi)]; stops early once the bracket is narrower than ``tol``."""
    flo, fhi = f(lo), f(hi)
    if not min(flo, fhi) <= target <= max(flo, fhi):
        return None
    up = fhi >= flo
    for _ in range(iters):
        mid = (lo + hi) / 2
        if (f(mid) < target) == up:
            lo = mid
        else:
            hi = mid
        if tol is not None and hi - lo <= tol:
            break
    return (lo + hi) / 2


def regimes(fp, W, article, trials, seed):
    """What the PCIe, NVLink and RDMA fabrics would need to deliver the article's CXL figures (sync p99,
    atomics, bandwidth); the CXL fabric's own needs and the RDMA claims come from the report's
    sensitivity sweep.  Returns claim key -> fabric -> text."""
    n = W["n_gpus"]
    target = article["sync_p99_ns"]["cxl"]
    pc, nv, rd = fp.pcie_host_polling, fp.nvlink_polling, fp.rdma

    def pcie_p99(k):
        q = pc.with_(rtt_min_ns=pc.rtt_min_ns * k, rtt_max_ns=pc.rtt_max_ns * k)
        return _pct(P.sync_latencies(q, n, trials, seed=seed), 99)[0]

    def nv_p99(k):
        q = nv.with_(step_ns=nv.step_ns * k, poll_ns=nv.poll_ns * k)
        return _pct(NV.sync_latencies(q, n, trials, seed=seed), 99)[0]

    out = {"cxl_sync": {}, "cxl_atomics": {}, "cxl_bandwidth": {}}
    k = bisect_monotone(pcie_p99, 1e-3, 1.0, target)
    out["cxl_sync"]["pcie_host_polling"] = (
        "unreachable" if k is None else
        f"PCIe round trips of {pc.rtt_min_ns * k:.0f}-{pc.rtt_max_ns * k:.0f} ns (defaults "
        f"{pc.rtt_min_ns:g}-{pc.rtt_max_ns:g})")
    k = bisect_monotone(nv_p99, 1e-3, 1.0, target)
    out["cxl_sync"]["nvlink_polling"] = (
        "unreachable" if k is None else
        f"an NVLink flag step of {nv.step_ns * k:.0f} ns with polling every {nv.poll_ns * k:.0f} ns "
        f"(defaults {nv.step_ns:g}, {nv.poll_ns:g})")
    out["cxl_sync"]["rdma"] = ("unreachable: the unloaded write alone takes "
                               f"{R.fixed_latency_ns(rd, W['flag_bytes']):.0f} ns before any polling")
    out["cxl_atomics"]["rdma"] = (f"a NIC atomic rate >= {article['atomics_mops']['cxl']:g} M/s (default "
                                  f"{rd.atomic_mops:g})")
    need_bw = article["bandwidth_gbs"]["cxl"]
    b = P.bulk_bandwidth(pc)
    out["cxl_bandwidth"]["pcie_host_polling"] = (
        f"{pc.gts * need_bw / b['link_gbs']:.1f} GT/s at x{pc.lanes} (a Gen6 64 GT/s link, whose flit "
        f"mode is not modelled; Gen5 x16 carries {b['link_gbs']:.1f} GB/s of {b['raw_gbs']:.1f} raw)")
    g = bisect_monotone(lambda x: R.bulk_bandwidth_gbs(rd.with_(line_gbps=x), W["bulk_msg_bytes"]), 10.0, 3200.0,
                need_bw)
    out["cxl_bandwidth"]["rdma"] = ("unreachable: the NIC's PCIe Gen5 x16 caps it" if g is None else
                                    f"a {g:.0f} Gb/s line (default {rd.line_gbps:g})")
    return out


# claim key, title, figure, (fabric, article key), test, unit.  A claim about CXL is checked on every
# fabric (which of them delivers the article's CXL figure?); a claim about RDMA on RDMA.
CLAIMS = (
    ("cxl_sync", "CXL sync p99 152 ns", "sync_p99_ns", "cxl", "at_most", "ns"),
    ("rdma_sync", "RDMA sync p99 2.7 µs", "sync_p99_ns", "rdma", "about", "ns"),
    ("cxl_atomics", "CXL atomics 8.3 M/s", "atomics_mops", "cxl", "at_least", "M/s"),
    ("rdma_atomics", "RDMA atomics 0.9 M/s", "atomics_mops", "rdma", "about", "M/s"),
    ("cxl_bandwidth", "CXL bandwidth 72 GB/s", "bandwidth_gbs", "cxl", "at_least", "GB/s"),
    ("rdma_bandwidth", "RDMA bandwidth 38 GB/s", "bandwidth_gbs", "rdma", "about", "GB/s"),
    ("cxl_grad", "CXL gradient sync 0.9 s (530B params, 8 GPUs)", "grad_sync_s", "cxl", "at_most", "s"),
    ("rdma_grad", "RDMA gradient sync 2.4 s", "grad_sync_s", "rdma", "about", "s"),
)
_ARTICLE_KEY = {"sync_p99_ns": "sync_p99_ns", "atomics_mops": "atomics_mops", "bandwidth_gbs": "bandwidth_gbs",
                "grad_sync_s": "grad_sync_s"}


def verdicts(heads, grads, needs, article, tol):
    """One row per claim of the article: the fabrics on which it holds at their defaults, and what would
    make it hold on the others.  ``heads``: name -> summarize(); ``grads``: name -> gradient sync (s);
    ``needs``: claim key -> fabric -> text (regimes() merged with the report's sensitivity sweep)."""
    def ok(v, claim, how):
        if how == "at_most":
            return v <= claim * (1 + tol)
        if how == "at_least":
            return v >= claim * (1 - tol)
        return abs(v / claim - 1) <= tol

    figs = {name: dict(heads[name], grad_sync_s=grads[name]) for name in NAMES}
    word = {"at_most": "<=", "at_least": ">=", "about": "~"}
    rows = []
    for key, title, fig, side, how, unit in CLAIMS:
        claim = article[_ARTICLE_KEY[fig]][side]
        subjects = NAMES if side == "cxl" else ("rdma",)
        holds = [n for n in subjects if ok(figs[n][fig], claim, how)]
        need = [f"{LABELS[n]}: {needs[key][n]}" for n in subjects
                if n not in holds and needs.get(key, {}).get(n)]
        rows.append({"claim": title, "figure": fig, "test": f"{word[how]} {claim:g} {unit} (±{tol:.0%})",
                     "checked_on": [LABELS[n] for n in subjects],
                     "values": {n: figs[n][fig] for n in NAMES},
                     "holds_on": [LABELS[n] for n in holds], "would_need": "; ".join(need)})
    # the article's direction claims (CXL ahead of RDMA), fabric by fabric
    for fig, title, lower in (("sync_p99_ns", "ahead of RDMA: lower sync p99", True),
                              ("atomics_mops", "ahead of RDMA: more atomics", False),
                              ("bandwidth_gbs", "ahead of RDMA: more bandwidth", False),
                              ("grad_sync_s", "ahead of RDMA: faster gradient sync", True)):
        r = figs["rdma"][fig]
        others = [n for n in NAMES if n != "rdma"]
        beats = [n for n in others if (figs[n][fig] < r if lower else figs[n][fig] > r)]
        rows.append({"claim": f"CXL {title}", "figure": fig, "test": f"vs RDMA {r:g}",
                     "checked_on": [LABELS[n] for n in others],
                     "values": {n: figs[n][fig] for n in NAMES}, "holds_on": [LABELS[n] for n in beats],
                     "would_need": "" if "cxl" in beats else
                     f"CXL.cache is behind RDMA here ({figs['cxl'][fig]:g} vs {r:g})"})
    return rows


def plot(out_dir, heads, spr, article):
    """fabrics.png: each figure per fabric, the bar at the headline value, the whiskers p1-p99 over the
    seeds of :func:`spread` (latencies: of the samples pooled over the seeds; throughputs: of the
    per-seed figures)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = (("flag_round_trip_p50_ns", "flag_round_trip_ns", "flag ping-pong, p50 (ns)", None),
              ("sync_p50_ns", "sync_ns", "sync to 7 readers, p50; top whisker p99 (ns)", "sync_p99_ns"),
              ("atomics_mops", "atomics_mops", "atomics on one address (M ops/s)", "atomics_mops"),
              ("bandwidth_gbs", "bandwidth_gbs", "bulk, one device (GB/s)", "bandwidth_gbs"))
    fig, axes = plt.subplots(1, 4, figsize=(15, 4))
    xs = list(range(len(NAMES)))
    for ax, (key, skey, title, akey) in zip(axes, panels):
        vals = [heads[n][key] for n in NAMES]
        lo = [max(0.0, v - spr[n][skey][0]) for v, n in zip(vals, NAMES)]
        hi = [max(0.0, spr[n][skey][2] - v) for v, n in zip(vals, NAMES)]
        ax.bar(xs, vals, color=[f"C{i}" for i in xs], yerr=[lo, hi], capsize=4)
        if akey:
            ax.axhline(article[akey]["cxl"], ls=":", c="k", lw=.8, label="article CXL")
            ax.axhline(article[akey]["rdma"], ls="--", c="k", lw=.8, label="article RDMA")
            ax.legend(fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([LABELS[n].replace(" + ", "\n+ ").replace(" polling", "\npolling") for n in NAMES],
                           fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=.3, axis="y")
    fig.suptitle("four fabrics; whiskers: p1-p99 over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "fabrics.png"), dpi=110)
    plt.close(fig)
