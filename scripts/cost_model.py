#!/usr/bin/env python3
"""scripts/cost_model.py - an alpha-beta cost model of one data-parallel step, dense AdamS vs SCAPE (plain python3).

  cost_model.py check DIR      fit on the unshaped runs of scripts/netem_bench.sh --out DIR (measured compute time
                               and byte counts) and predict its shaped runs; prints predicted vs measured step time
  cost_model.py project [...]  project step time to the paper's settings (32 and 64 ranks; GPT-345M, Llama-500M,
                               Llama-1.8B; 200 Gbit/s-class links) and set it beside the paper's claims

The model (Hockney's alpha-beta; ring collectives as in Thakur, Rabenseifner and Gropp 2005):
  ring all-reduce of S bytes over N ranks   2 (N-1) alpha + 2 (N-1)/N S / beta
  ring all-gather, S bytes in total         (N-1) alpha + (N-1)/N S / beta
  dense step    t_c + (1 - overlap) * allreduce(4 P)
  SCAPE step    t_c + t_topk + (1 - overlap) * allreduce(4 K) + max(0, allgather(P / 8) - t_c)
                K = d * P_sparse + P_dense values; the 1-bit mask all-gather hides behind the next step's compute
                (SCAPE.md sections 3 and 6), so only what is longer than the compute shows.
alpha is per message (s), beta the per-rank link bandwidth (bytes/s), t_c the forward+backward+update time.
Not for: anything but first-order estimates; it ignores congestion, stragglers and bucket pipelining.
"""
import argparse
import json
import math
import os
import statistics
import sys


def ring_allreduce_s(nbytes, n, alpha, beta):
    """Seconds for a ring all-reduce of nbytes per rank on n ranks: reduce-scatter then all-gather."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta


def ring_allgather_s(total_bytes, n, alpha, beta):
    """Seconds for a ring all-gather whose result is total_bytes (each rank contributes total_bytes / n)."""
    if n <= 1:
        return 0.0
    return (n - 1) * alpha + (n - 1) / n * total_bytes / beta


def bytes_sent_dense(p, n):
    """Bytes one rank sends per step in a fp32 ring all-reduce of p parameters (SCAPE.md section 6)."""
    return 2 * 4 * p * (n - 1) / n


def scape_k(p_sparse, p_dense, d):
    """Payload values per step: top-k of every sparse slice plus the always-dense norm gains and biases."""
    return d * p_sparse + p_dense


def bytes_sent_scape(p_sparse, p_dense, d, n):
    """Bytes one rank sends per step under SCAPE: the K-value payload all-reduce plus its share of the mask
    all-gather (1 bit per parameter, packed)."""
    p = p_sparse + p_dense
    return 2 * 4 * scape_k(p_sparse, p_dense, d) * (n - 1) / n + p / 8 * (n - 1) / n


def step_dense_s(t_c, p, n, alpha, beta, overlap=0.0):
    return t_c + (1 - overlap) * ring_allreduce_s(4 * p, n, alpha, beta)


def step_scape_s(t_c, p_sparse, p_dense, d, n, alpha, beta, overlap=0.0, t_topk=0.0):
    p = p_sparse + p_dense
    payload = ring_allreduce_s(4 * scape_k(p_sparse, p_dense, d), n, alpha, beta)
    mask = ring_allgather_s(p / 8, n, alpha, beta)
    return t_c + t_topk + (1 - overlap) * payload + max(0.0, mask - t_c)


# --- model sizes, from the architectures (norm gains and biases are the dense part) --------------------------------
def gpt2_params(L, C, V=50257, maxT=1024):
    """(sparse, dense) parameter counts of GPT-2 with tied embeddings (wte V x C, wpe maxT x C)."""
    sparse = V * C + maxT * C + L * (3 * C * C + C * C + 8 * C * C)
    dense = L * (2 * C + 3 * C + C + 2 * C + 4 * C + C) + 2 * C
    return sparse, dense


def llama_params(L, C, F, NH, NKV, V, tied=False):
    """(sparse, dense) parameter counts of Llama (no biases; RMSNorm gains dense; untied lm_head unless tied)."""
    hd = C // NH
    per_layer = C * C + 2 * C * NKV * hd + C * C + 3 * C * F
    sparse = L * per_layer + V * C * (1 if tied else 2)
    dense = L * 2 * C + C
    return sparse, dense


# the paper's settings (issue text / scripts/cluster/); Llama-1.8B's batch is not given there: same as Llama-500M
PAPER_MODELS = [
    ("GPT-345M", gpt2_params(24, 1024), 1024, 512),
    ("Llama-500M", llama_params(16, 1536, 4096, 16, 8, 32000), 4096, 1024),
    ("Llama-1.8B", llama_params(24, 2560, 6912, 32, 8, 128256), 4096, 1024),
]
PAPER_CLAIMS = ("the paper's claims (arXiv 2607.01678): up to 43.3% less end-to-end wall-clock, and up to 3.26x faster "
                "steps for Llama-1.8B on 64 GPUs, against dense baselines")


def project(args):
    alpha = args.alpha_us * 1e-6
    beta = args.link_gbit * 1e9 / 8 / args.gpus_per_node  # ranks of a node share its NIC on the ring's inter-node hops
    flops = args.peak_tflops * 1e12 * args.mfu
    print("projection: alpha %.1f us, link %.0f Gbit/s shared by %d rank(s) per node, compute %.0f TFLOP/s x MFU %.2f per rank, "
          "overlap %.2f, 6 P tokens FLOPs" % (args.alpha_us, args.link_gbit, args.gpus_per_node, args.peak_tflops, args.mfu, args.overlap))
    print("%-11s %4s %9s %10s %10s %10s %10s %9s %9s" % ("model", "N", "P (M)", "compute s", "dense s", "d=0.1 s",
                                                         "d=0.01 s", "x d=0.1", "x d=0.01"))
    for name, (ps, pd), T, gb in PAPER_MODELS:
        p = ps + pd
        for n in args.ranks:
            tokens = gb * T / n
            t_c = 6 * p * tokens / flops
            dense = step_dense_s(t_c, p, n, alpha, beta, args.overlap)
            s1 = step_scape_s(t_c, ps, pd, 0.1, n, alpha, beta, args.overlap)
            s2 = step_scape_s(t_c, ps, pd, 0.01, n, alpha, beta, args.overlap)
            print("%-11s %4d %9.0f %10.3f %10.3f %10.3f %10.3f %8.2fx %8.2fx" % (
                name, n, p / 1e6, t_c, dense, s1, s2, dense / s1, dense / s2))
    print("beside", PAPER_CLAIMS + ".")
    print("A step speedup of x saves 1 - 1/x of the wall-clock when every step is alike (43.3% less <=> 1.76x); "
          "the density warm-up's dense-ish steps lower the end-to-end figure below the step figure.")


def load_runs(d):
    """netem_bench.sh's runs.tsv -> {(rate, name): (median step s, mean compute s, bytes sent per step)}."""
    out = {}
    path = os.path.join(d, "runs.tsv")
    if not os.path.isfile(path):
        sys.exit("error: %s not found; pass the --out directory of scripts/netem_bench.sh" % path)
    for line in open(path):
        rate, name, run, _ = line.rstrip("\n").split("\t")
        ev = [json.loads(l) for l in open(os.path.join(run, "log.jsonl")) if l.strip()]
        tr = [e for e in ev if e["event"] == "train" and e["step"] >= 2]
        start = next(e for e in ev if e["event"] == "start")
        if not tr:
            sys.exit("error: %s has no train steps >= 2; run netem_bench.sh with --steps >= 2" % run)
        out[rate, name] = dict(step=statistics.median(e["ms"] for e in tr) / 1e3,
                               compute=statistics.median(e["ms"] - e["comm_wait_ms"] for e in tr) / 1e3,
                               sent=statistics.median(e["comm_bytes_sent"] for e in tr), world=start["world"])
    return out


def rate_bytes_per_s(rate):
    for u, f in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(u):
            return float(rate[:-len(u)]) * f / 8
    return math.inf


def check(args):
    runs = load_runs(args.dir)
    rates = sorted({r for r, _ in runs}, key=lambda r: -rate_bytes_per_s(r))
    if "unlimited" not in rates:
        sys.exit("error: %s has no 'unlimited' runs to take the compute time from; rerun netem_bench.sh with "
                 "--rates 'unlimited ...'" % args.dir)
    print("predicted vs measured median step time (s); compute = unshaped run's median (ms - comm_wait_ms), bytes ="
          " the trainer's comm_bytes_sent; all ranks share the link, so a rank's share of it is rate / N")
    print("%-10s %-11s %10s %10s %8s" % ("rate", "config", "predicted", "measured", "ratio"))
    for rate in rates:
        if rate == "unlimited":
            continue
        for name in ("adams", "scape_0.1", "scape_0.01"):
            if (rate, name) not in runs:
                continue
            base, r = runs["unlimited", name], runs[rate, name]
            n = r["world"]
            beta = rate_bytes_per_s(rate) / n
            # the measured bytes already include the ring's 2 (N-1)/N factor: time = bytes / beta, plus alphas
            pred = base["compute"] + r["sent"] / beta + 2 * (n - 1) * args.alpha_us * 1e-6
            print("%-10s %-11s %10.3f %10.3f %7.2fx" % (rate, name, pred, r["step"], r["step"] / pred))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("project", help="project to the paper's settings")
    p.add_argument("--alpha-us", type=float, default=5.0, help="per-message latency, microseconds [5]")
    p.add_argument("--link-gbit", type=float, default=200.0, help="per-rank link bandwidth, Gbit/s [200]")
    p.add_argument("--gpus-per-node", type=int, default=1, help="ranks sharing one link [1]; 8 for one NIC per 8-GPU node")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="peak dense bf16 TFLOP/s per GPU [989, H100 SXM]")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOP utilisation assumed [0.4]")
    p.add_argument("--overlap", type=float, default=0.0, help="share of the gradient all-reduce hidden [0]")
    p.add_argument("--ranks", type=int, nargs="+", default=[32, 64])
    c = sub.add_parser("check", help="fit on netem_bench.sh's unshaped runs, predict its shaped ones")
    c.add_argument("dir")
    c.add_argument("--alpha-us", type=float, default=50.0, help="per-message latency over loopback TCP [50]")
    args = ap.parse_args()
    for k in ("link_gbit", "peak_tflops", "mfu", "gpus_per_node"):
        if getattr(args, k, 1) <= 0:
            sys.exit("error: --%s must be > 0" % k.replace("_", "-"))
    if getattr(args, "overlap", 0) < 0 or getattr(args, "overlap", 0) > 1:
        sys.exit("error: --overlap must be in [0, 1]")
    project(args) if args.cmd == "project" else check(args)


if __name__ == "__main__":
    main()
