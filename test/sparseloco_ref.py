"""test/sparseloco_ref.py - an independent float64 numpy SparseLoCo (Sarfi, Therien, Lidin, Belilovsky, arXiv
2508.15706: DiLoCo's inner steps; at an outer step each rank's error feedback e_i <- beta e_i + (theta_prev -
theta_i), the top-k of each chunk of each tensor quantized (sign and level of a per-chunk scale) and sent, e_i minus
what was sent, theta <- theta_prev - alpha mean_i(sent_i)), checked step by step against optim/dist_sparseloco.c's
dumps from test/scape_ref_driver.c (the toy problem of test/scape_ref.py, each rank's gradient from its own
parameters).
Usage: python3 sparseloco_ref.py OUT_PREFIX SPEC CLIP NAME [MISTAKE]
SPEC: the driver's "flag=value,..." (sparseloco-h, -inner, -beta, -chunk, -topk, -bits, -alpha; the defaults
otherwise). The run's last step also takes an outer step.
The quantizer (optim/dist_sparseloco.c's header): s = the largest |e| the chunk selected; y = |e| / s (2^b - 1); level
l = min(2^(b-1) - 1, max(0, floor((y - 1) / 2 + 1/2))), the value sign(e) s (2l + 1) / (2^b - 1).
With sparseloco-mask=shared: one mask for every rank, each tensor's owner's (the dump's owner table) top-k per chunk
of its own e, chosen at the outer step before (after e minus what was sent; at the first outer step, there), each
rank's values on it quantized with its own per-chunk scale and averaged; the dump's mask (the pending one) is checked
exactly.
MISTAKE (a negative control: the reference then makes this mistake and must FAIL): decay (the error feedback not
decayed, beta 1), rounding (the level truncated, not rounded to the nearest), chunks (chunks of the flat parameter
vector, across tensor boundaries, instead of each tensor's own), sum (what the ranks sent summed, not averaged); with
the shared mask also own (each rank's own top-k instead) and stale (the mask chosen from this outer step's e, not the
one chosen a step ahead).
Each step starts from the C's state after the previous one and checks what the step makes of it. Written from the
paper and the C's header; shares no code with the C. Prints "ok NAME" or "FAIL NAME: ..." and exits non-zero on
failure.
Not for: training or performance.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scape_ref import grads, read, rel  # noqa: E402
from diloco_ref import WD, inner_step, read_dl  # noqa: E402


def chunks(slices, C, P, flat):
    if flat:
        return [(a, min(C, P - a)) for a in range(0, P, C)]
    return [(off + a, min(C, n - a)) for off, n, _, _ in slices for a in range(0, n, C)]


def main():
    prefix, spec, clip, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    mistake = sys.argv[5] if len(sys.argv) > 5 else ""
    opt = {"sparseloco-h": "30", "sparseloco-inner": "adamw", "sparseloco-beta": "0.95", "sparseloco-chunk": "4096",
           "sparseloco-topk": "64", "sparseloco-bits": "2", "sparseloco-alpha": "1", "sparseloco-mask": "own"}
    opt.update(kv.split("=", 1) for kv in spec.split(",") if kv)
    H, adams = int(opt["sparseloco-h"]), opt["sparseloco-inner"] == "adams"
    beta = float(np.float32(float(opt["sparseloco-beta"])))
    C, K, b = int(opt["sparseloco-chunk"]), int(opt["sparseloco-topk"]), int(opt["sparseloco-bits"])
    alpha = float(np.float32(float(opt["sparseloco-alpha"])))
    shared = opt["sparseloco-mask"] == "shared"
    if mistake == "decay":
        beta = 1.0
    if mistake == "own":
        shared = False
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D0 = dumps[0]
    P, N, slices, owners = D0["P"], D0["world"], D0["slices"], D0["owners"]
    T = len(D0["steps"])
    dls = [read_dl(prefix, k, P, T) for k in range(N)]
    decay = np.zeros(P)
    for off, n, dec, _ in slices:
        decay[off:off + n] = WD if dec else 0.0
    worst = dict(theta=0.0, m=0.0, v=0.0, prev=0.0, e=0.0, gn=0.0)
    fails, outer_steps, sent = [], 0, 0
    L, top = 1 << (b - 1), (1 << b) - 1

    def quantize(x, s):  # the dequantized values of x (s > 0)
        y = np.abs(x) / s * top
        lev = np.floor((y - 1) / 2) if mistake == "rounding" else np.floor((y - 1) / 2 + 0.5)
        lev = np.clip(lev, 0, L - 1)
        return np.where(x < 0, -1.0, 1.0) * s * (2 * lev + 1) / top

    def owner_of(off):
        return [i for i, (lo, hi) in enumerate(owners) if lo <= off < hi][0]

    def shared_mask(e):  # each tensor's owner's top-k per chunk of its own e
        M = np.zeros(P, bool)
        for off, n, _, _ in slices:
            o = owner_of(off)
            for lo, cn in chunks([(off, n, 0, 0)], C, P, mistake == "chunks"):
                x = e[o][lo:lo + cn]
                M[lo + np.argsort(-np.abs(x), kind="stable")[:min(K, cn)]] = True
        return M
    for t in range(1, T + 1):
        lr = float(np.float32(0.01) * (np.float32(1) + np.float32(0.1) * np.float32(t % 3)))
        pending = D0["steps"][t - 2]["mask"].copy() if t > 1 and D0["steps"][t - 2]["mask"].any() else None
        if t > 1:
            theta = [Dk["steps"][t - 2]["theta"].astype(np.float64) for Dk in dumps]
            m = [Dk["steps"][t - 2]["m"].astype(np.float64) for Dk in dumps]
            e = [Dk["steps"][t - 2]["r"].astype(np.float64) for Dk in dumps]
            v = [dl[t - 2]["v"].astype(np.float64) for dl in dls]
            prev = dls[0][t - 2]["prev"].astype(np.float64)
        else:
            theta = [D0["theta0"].copy() for _ in range(N)]
            m, v, e = ([np.zeros(P) for _ in range(N)] for _ in range(3))
            prev = D0["theta0"].copy()
        norms2 = []
        for k in range(N):
            theta[k], m[k], v[k], n2 = inner_step(theta[k], m[k], v[k], grads(theta[k], t, N)[k], t, lr, clip, adams,
                                                  decay)
            norms2.append(n2)
        gn = math.sqrt(sum(norms2) / N)
        if (t % H == 0 or t == T) and shared:
            outer_steps += 1
            e = [beta * e[k] + (prev - theta[k]) for k in range(N)]
            M = shared_mask(e) if pending is None or mistake == "stale" else pending
            acc = np.zeros(P)
            for k in range(N):
                for lo, n in chunks(slices, C, P, False):
                    sel = lo + np.nonzero(M[lo:lo + n])[0]
                    s = float(np.max(np.abs(e[k][sel]))) if len(sel) else 0.0
                    if s == 0:
                        continue
                    q = quantize(e[k][sel], s)
                    e[k][sel] -= q
                    acc[sel] += q
                    sent += len(sel)
            prev = prev - alpha * (acc if mistake == "sum" else acc / N)
            theta = [prev.copy() for _ in range(N)]
            pending = shared_mask(e)
        elif t % H == 0 or t == T:
            outer_steps += 1
            acc = np.zeros(P)
            for k in range(N):
                e[k] = beta * e[k] + (prev - theta[k])
                for lo, n in chunks(slices, C, P, mistake == "chunks"):
                    x = e[k][lo:lo + n]
                    sel = np.argsort(-np.abs(x), kind="stable")[:min(K, n)]
                    s = float(np.max(np.abs(x[sel])))
                    if s == 0:
                        continue
                    q = quantize(x[sel], s)
                    x[sel] -= q  # a view: e[k] changes
                    acc[lo + sel] += q
                    sent += len(sel)
            prev = prev - alpha * (acc if mistake == "sum" else acc / N)
            theta = [prev.copy() for _ in range(N)]
        for k, Dk in enumerate(dumps):
            s_ = Dk["steps"][t - 1]
            worst["theta"] = max(worst["theta"], rel(s_["theta"], theta[k]))
            worst["m"] = max(worst["m"], rel(s_["m"], m[k]))
            if not adams:
                worst["v"] = max(worst["v"], rel(dls[k][t - 1]["v"], v[k]))
            worst["prev"] = max(worst["prev"], rel(dls[k][t - 1]["prev"], prev))
            worst["e"] = max(worst["e"], rel(s_["r"], e[k]))
            worst["gn"] = max(worst["gn"], abs(s_["gn"] - gn) / (gn + 1e-6))
            if not np.array_equal(dls[k][t - 1]["prev"], dls[0][t - 1]["prev"]):
                fails.append("step %d: rank %d's synchronized model differs from rank 0's" % (t, k))
            if shared and pending is not None and not np.array_equal(s_["mask"], pending):
                fails.append("step %d rank %d: the next shared mask differs at %d coordinates" % (
                    t, k, int(np.sum(s_["mask"] != pending))))
    tol = 2e-4
    fails += ["max relative |dist_sparseloco.c - float64 reference| of %s is %.3g > %g" % (k, x, tol)
              for k, x in worst.items() if not x <= tol]
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, H %d, chunk %d top-%d %d-bit, %d outer steps, %d values sent, each step from the "
          "C's state: worst rel. diff theta %.1e m %.1e v %.1e theta_prev %.1e e %.1e norm %.1e)"
          % (name, T, N, H, C, K, b, outer_steps, sent, worst["theta"], worst["m"], worst["v"], worst["prev"],
             worst["e"], worst["gn"]))


if __name__ == "__main__":
    main()
