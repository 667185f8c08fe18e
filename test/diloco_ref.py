"""test/diloco_ref.py - an independent float64 numpy DiLoCo (Douillard et al., arXiv 2311.08105, Algorithm 1: each
rank takes inner AdamW (or AdamS) steps alone on its own gradient; every H steps the pseudo-gradients
theta_prev - theta_i are averaged over the ranks and applied by an outer Nesterov SGD; the inner state is kept),
checked step by step against optim/dist_diloco.c's dumps from test/scape_ref_driver.c (the toy problem of
test/scape_ref.py, each rank's gradient recomputed here from that rank's own parameters).
Usage: python3 diloco_ref.py OUT_PREFIX SPEC CLIP NAME [MISTAKE]
SPEC: the driver's "flag=value,..." (diloco-h, diloco-inner, diloco-outer-lr, diloco-outer-momentum; the paper's
defaults otherwise). The run's last step (the driver's STEPS) also takes an outer step.
MISTAKE (a negative control: the reference then makes this mistake and must FAIL): sign (the outer step added, not
subtracted), plain (plain momentum theta_prev - lr v instead of Nesterov), sum (the pseudo-gradients summed, not
averaged), reset (the inner moments zeroed at every outer step, which the paper does not do).
The Nesterov form: PyTorch SGD nesterov=True, dampening 0: v <- mu v + Delta; theta <- theta_prev - lr (Delta + mu v).
The inner steps: optim/optim.h's AdamW / AdamS formulas with bias correction at the run's step t, weight decay 0.1 on
the decayed slices, each rank's gradient clipped by its own norm; the logged norm is sqrt(mean_i |g_i|^2).
Each step starts from the C's state after the previous one (every rank's theta_i and inner moments, theta_prev, v)
and checks what the step makes of it. Written from the paper and optim/dist_diloco.c's header; shares no code with
the C. Prints "ok NAME" or "FAIL NAME: ..." and exits non-zero on failure.
Not for: training or performance.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scape_ref import grads, read, rel  # noqa: E402  (the dump reader, the toy's gradients, the error measure)

B1, B2, EPS, WD = 0.9, 0.95, 1e-8, 0.1


def read_dl(prefix, rank, P, steps):  # per step: theta_prev (P), the inner v (P)
    a = np.fromfile("%s.dl.%d.bin" % (prefix, rank), dtype=np.float32)
    assert a.size == 2 * P * steps, "the .dl dump has %d floats, expected %d" % (a.size, 2 * P * steps)
    a = a.reshape(steps, 2, P)
    return [dict(prev=a[t, 0], v=a[t, 1]) for t in range(steps)]


def inner_step(theta, m, v, g, t, lr, clip, adams, decay):
    """one rank's inner step: g clipped by its own norm, then AdamW (or AdamS) at step t; returns theta, m, v, |g|^2"""
    n2 = float(np.sum(g * g))
    n = math.sqrt(n2)
    g = g * (clip / (n + 1e-6) if clip > 0 and n > clip else 1.0)
    bc1, bc2 = 1 - B1 ** t, 1 - B2 ** t
    if adams:
        nu = B2 * m ** 2 + (1 - B2) * g * g
        m = B1 * m + (1 - B1) * g
        return theta - lr * ((m / bc1) / (np.sqrt(nu) / math.sqrt(bc2) + EPS) + decay * theta), m, v, n2
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    return theta - lr * ((m / bc1) / (np.sqrt(v / bc2) + EPS) + decay * theta), m, v, n2


def main():
    prefix, spec, clip, name = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    mistake = sys.argv[5] if len(sys.argv) > 5 else ""
    opt = {"diloco-h": "500", "diloco-inner": "adamw", "diloco-outer-lr": "0.7", "diloco-outer-momentum": "0.9"}
    opt.update(kv.split("=", 1) for kv in spec.split(",") if kv)
    H, adams = int(opt["diloco-h"]), opt["diloco-inner"] == "adams"
    lr_out, mu = float(np.float32(float(opt["diloco-outer-lr"]))), float(np.float32(float(opt["diloco-outer-momentum"])))
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D0 = dumps[0]
    P, N, slices = D0["P"], D0["world"], D0["slices"]
    T = len(D0["steps"])
    dls = [read_dl(prefix, k, P, T) for k in range(N)]
    decay = np.zeros(P)
    for off, n, dec, _ in slices:
        decay[off:off + n] = WD if dec else 0.0
    worst = dict(theta=0.0, m=0.0, v=0.0, prev=0.0, u=0.0, gn=0.0)
    fails, outer_steps = [], 0
    for t in range(1, T + 1):
        lr = float(np.float32(0.01) * (np.float32(1) + np.float32(0.1) * np.float32(t % 3)))
        if t > 1:
            theta = [Dk["steps"][t - 2]["theta"].astype(np.float64) for Dk in dumps]
            m = [Dk["steps"][t - 2]["m"].astype(np.float64) for Dk in dumps]
            v = [dl[t - 2]["v"].astype(np.float64) for dl in dls]
            prev = dls[0][t - 2]["prev"].astype(np.float64)
            u = D0["steps"][t - 2]["r"].astype(np.float64)
        else:
            theta = [D0["theta0"].copy() for _ in range(N)]
            m, v = [np.zeros(P) for _ in range(N)], [np.zeros(P) for _ in range(N)]
            prev, u = D0["theta0"].copy(), np.zeros(P)
        norms2 = []
        for k in range(N):
            theta[k], m[k], v[k], n2 = inner_step(theta[k], m[k], v[k], grads(theta[k], t, N)[k], t, lr, clip, adams,
                                                  decay)
            norms2.append(n2)
        gn = math.sqrt(sum(norms2) / N)
        if t % H == 0 or t == T:
            outer_steps += 1
            delta = sum(prev - th for th in theta) / (1 if mistake == "sum" else N)
            u = mu * u + delta
            step = lr_out * u if mistake == "plain" else lr_out * (delta + mu * u)
            prev = prev + step if mistake == "sign" else prev - step
            theta = [prev.copy() for _ in range(N)]
            if mistake == "reset":
                m, v = [np.zeros(P) for _ in range(N)], [np.zeros(P) for _ in range(N)]
        for k, Dk in enumerate(dumps):
            s = Dk["steps"][t - 1]
            worst["theta"] = max(worst["theta"], rel(s["theta"], theta[k]))
            worst["m"] = max(worst["m"], rel(s["m"], m[k]))
            if not adams:
                worst["v"] = max(worst["v"], rel(dls[k][t - 1]["v"], v[k]))
            worst["prev"] = max(worst["prev"], rel(dls[k][t - 1]["prev"], prev))
            worst["u"] = max(worst["u"], rel(s["r"], u))
            worst["gn"] = max(worst["gn"], abs(s["gn"] - gn) / (gn + 1e-6))
            if not np.array_equal(dls[k][t - 1]["prev"], dls[0][t - 1]["prev"]):
                fails.append("step %d: rank %d's synchronized model differs from rank 0's" % (t, k))
            if not np.array_equal(s["r"], D0["steps"][t - 1]["r"]):
                fails.append("step %d: rank %d's outer momentum differs from rank 0's" % (t, k))
        if N > 1 and t % H != 0 and t != T and all(np.array_equal(Dk["steps"][t - 1]["theta"], D0["steps"][t - 1]["theta"])
                                                   for Dk in dumps[1:]):
            fails.append("step %d: an inner step left every rank with the same parameters" % t)
    tol = 2e-4
    fails += ["max relative |dist_diloco.c - float64 reference| of %s is %.3g > %g" % (k, x, tol)
              for k, x in worst.items() if not x <= tol]
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, H %d, inner %s, %d outer steps, each step from the C's state: worst rel. diff "
          "theta %.1e m %.1e v %.1e theta_prev %.1e outer v %.1e norm %.1e)"
          % (name, T, N, H, "adams" if adams else "adamw", outer_steps, worst["theta"], worst["m"], worst["v"],
             worst["prev"], worst["u"], worst["gn"]))


if __name__ == "__main__":
    main()
