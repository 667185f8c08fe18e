"""test/onebit_ref.py - an independent float64 numpy 1-bit Adam (Tang et al., ICML 2021, Algorithm 1: Adam for a
warm-up, then the variance frozen and the momentum averaged by a 1-bit compressed all-reduce with error compensation
on the worker and on the server side, one scale per tensor), checked step by step against optim/dist_onebit_adam.c's
dumps from test/scape_ref_driver.c (the toy problem of test/scape_ref.py, recomputed here from the reference's own
parameters).
Usage: python3 onebit_ref.py OUT_PREFIX FREEZE CLIP NAME [MISTAKE]
MISTAKE (a negative control: the reference then makes this mistake and must FAIL): no-worker-ef (the worker error is
not fed back), no-server-ef (the server error is not fed back), one-scale (one scale for the whole model instead of
one per tensor).
Each step starts from the C's state after the previous one (theta, the shared m, every rank's worker and server
errors) and checks what the step makes of it; v is the reference's own, accumulated over the warm-up from the C's
parameters. Written from the paper and optim/dist_onebit_adam.c's header (which states the chunking and where this
runtime departs from the paper); shares no code with the C. Prints "ok NAME" or "FAIL NAME: ..." and exits non-zero
on failure.
Not for: training or performance.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scape_ref import grads, read, rel  # noqa: E402  (the dump reader, the toy's gradients, the error measure)

B1, B2, EPS, WD = 0.9, 0.95, 1e-8, 0.1


def sign(x):
    return np.where(x >= 0, 1.0, -1.0)  # 1 bit cannot say 0: zero goes up


def scale(x):
    return math.sqrt(float(np.sum(x * x)) / len(x)) if len(x) else 0.0


def main():
    prefix, F, clip, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    mistake = sys.argv[5] if len(sys.argv) > 5 else ""
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D = dumps[0]
    P, N, slices = D["P"], D["world"], D["slices"]
    nsteps = len(D["steps"])
    es_dump = [np.fromfile("%s.es.%d.bin" % (prefix, i), np.float32).astype(np.float64).reshape(nsteps, P)
               for i in range(N)]
    decay = np.zeros(P)
    for off, n, dec, _ in slices:
        decay[off:off + n] = WD if dec else 0.0
    v = np.zeros(P)
    worst = dict(theta=0.0, m=0.0, e=0.0, es=0.0, gn=0.0)
    fails = []
    for t in range(1, nsteps + 1):
        lr = float(np.float32(0.01) * (np.float32(1) + np.float32(0.1) * np.float32(t % 3)))
        prev = [Dk["steps"][t - 2] if t > 1 else None for Dk in dumps]
        theta = prev[0]["theta"].astype(np.float64) if t > 1 else D["theta0"]
        m = prev[0]["m"].astype(np.float64) if t > 1 else np.zeros(P)
        e = [p_["r"].astype(np.float64) if p_ else np.zeros(P) for p_ in prev]
        es = [es_dump[k][t - 2] if t > 1 else np.zeros(P) for k in range(N)]
        g_i = grads(theta, t, N)
        e_new, es_new = [x.copy() for x in e], [x.copy() for x in es]
        bc1 = 1 - B1 ** t
        if t <= F:  # Adam (AdamW, bias-corrected) on the mean gradient
            g = sum(g_i) / N
            norm = math.sqrt(float(np.sum(g * g)))
            if clip > 0 and norm > clip:
                g = g * (clip / (norm + 1e-6))
            m_new = B1 * m + (1 - B1) * g
            v = B2 * v + (1 - B2) * g * g
            upd = (m_new / bc1) / (np.sqrt(v / (1 - B2 ** t)) + EPS)
        else:  # the compression stage: v frozen at v_F
            norm = math.sqrt(sum(float(np.sum(x * x)) for x in g_i) / N)
            sc = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
            x = [B1 * m + (1 - B1) * sc * gk + (0 if mistake == "no-worker-ef" else e[k]) for k, gk in enumerate(g_i)]
            c = [np.zeros(P) for _ in range(N)]
            groups = [(0, P)] if mistake == "one-scale" else [(off, n) for off, n, _, _ in slices]
            for off, n in groups:
                for k in range(N):
                    xs = x[k][off:off + n]
                    c[k][off:off + n] = scale(xs) * sign(xs)
            for k in range(N):
                e_new[k] = x[k] - c[k]
            m_new = np.zeros(P)
            for off, n, _, _ in slices:
                L = 8 * -(-n // (8 * N))  # chunk length: 8 ceil(n / 8N)
                for j in range(N):
                    lo, hi = off + min(j * L, n), off + min((j + 1) * L, n)
                    if hi <= lo:
                        continue
                    y = sum(ck[lo:hi] for ck in c) / N + (0 if mistake == "no-server-ef" else es[j][lo:hi])
                    b = scale(y)
                    es_new[j][lo:hi] = y - b * sign(y)
                    m_new[lo:hi] = b * sign(y)
            upd = (m_new / bc1) / (np.sqrt(v / (1 - B2 ** F)) + EPS)
        theta_new = theta - lr * (upd + decay * theta)
        for k, Dk in enumerate(dumps):
            s = Dk["steps"][t - 1]
            if not np.array_equal(s["theta"], D["steps"][t - 1]["theta"]) or not np.array_equal(s["m"], D["steps"][t - 1]["m"]):
                fails.append("step %d: rank %d's parameters or m differ from rank 0's" % (t, k))
            worst["theta"] = max(worst["theta"], rel(s["theta"], theta_new))
            worst["m"] = max(worst["m"], rel(s["m"], m_new))
            worst["e"] = max(worst["e"], rel(s["r"], e_new[k]))
            worst["es"] = max(worst["es"], rel(es_dump[k][t - 1], es_new[k]))
            worst["gn"] = max(worst["gn"], abs(s["gn"] - norm) / (norm + 1e-6))
    tol = 2e-4  # float32 rounding where x = m_i + e_i cancels reaches 7e-5 here
    fails += ["max relative |dist_onebit_adam.c - float64 reference| of %s is %.3g > %g" % (k, x, tol)
              for k, x in worst.items() if not x <= tol]
    if nsteps <= F:
        fails.append("the run never leaves the warm-up (%d steps, freeze %d): nothing compressed is checked" % (nsteps, F))
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, freeze %d, each step from the C's state: worst rel. diff theta %.1e m %.1e "
          "e %.1e es %.1e norm %.1e)" % (name, nsteps, N, F, worst["theta"], worst["m"], worst["e"], worst["es"],
                                         worst["gn"]))


if __name__ == "__main__":
    main()
