"""test/demo_ref.py - an independent float64 numpy DeMo (Peng, Quesnelle, Kingma, arXiv 2411.19870, Algorithm 1: a
local momentum per rank, its largest DCT coefficients per block extracted, removed from it and all-gathered, a sign
step on the ranks' combined coefficients, decoupled weight decay), checked step by step against optim/dist_demo.c's
dumps from test/scape_ref_driver.c (the toy problem of test/scape_ref.py, recomputed here from the reference's own
parameters; blocks of side 8, decay 0.999).
Usage: python3 demo_ref.py OUT_PREFIX TOPK CLIP NAME [MISTAKE]
MISTAKE (a negative control: the reference then makes this mistake and must FAIL): no-removal (what was sent stays in
the momentum), no-dct (the top-k taken in the parameter domain), sum (coefficients several ranks sent are summed, not
averaged).
Each step starts from the C's state after the previous one (theta, every rank's momentum) and checks what the step
makes of it. Written from the paper and optim/dist_demo.c's header (blocks, tie rule, the mean over senders); shares
no code with the C. Prints "ok NAME" or "FAIL NAME: ..." and exits non-zero on failure.
Not for: training or performance.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scape_ref import grads, read, rel  # noqa: E402  (the dump reader, the toy's gradients, the error measure)

WD, CHUNK, DECAY = 0.1, 8, 0.999
SHAPES = {0: (40, 8), 1: (8,), 2: (8, 24), 3: (24,), 4: (24, 8)}  # the driver's slices


def split(n, s):  # the largest divisor of n not above s
    return n if n <= s else max(b for b in range(1, s + 1) if n % b == 0)


def dct(b):  # orthonormal DCT-II: row u is frequency u
    u, j = np.arange(b)[:, None], np.arange(b)[None, :]
    D = np.sqrt(2.0 / b) * np.cos(np.pi * (2 * j + 1) * u / (2 * b))
    D[0] /= math.sqrt(2.0)
    return D


def main():
    prefix, K, clip, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    mistake = sys.argv[5] if len(sys.argv) > 5 else ""
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D0 = dumps[0]
    P, N, slices = D0["P"], D0["world"], D0["slices"]
    nsteps = len(D0["steps"])
    decay = np.zeros(P)
    for off, n, dec, _ in slices:
        decay[off:off + n] = WD if dec else 0.0
    worst = dict(theta=0.0, delta=0.0, gn=0.0)
    fails = []
    for t in range(1, nsteps + 1):
        lr = float(np.float32(0.01) * (np.float32(1) + np.float32(0.1) * np.float32(t % 3)))
        prev = [Dk["steps"][t - 2] if t > 1 else None for Dk in dumps]
        theta = prev[0]["theta"].astype(np.float64) if t > 1 else D0["theta0"].copy()
        delta = [p_["r"].astype(np.float64) if p_ else np.zeros(P) for p_ in prev]
        g_i = grads(theta, t, N)
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in g_i) / N)
        sc = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
        theta = theta * (1 - lr * decay)
        delta = [DECAY * dk + lr * sc * gk for dk, gk in zip(delta, g_i)]
        for i, (off, n, _, _) in enumerate(slices):
            shape = SHAPES[i]
            rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (shape[0], 1)
            br, bc = split(rows, CHUNK), split(cols, CHUNK) if cols > 1 else 1
            Dr, Dc = dct(br), dct(bc) if bc > 1 else np.ones((1, 1))
            if mistake == "no-dct":
                Dr, Dc = np.eye(br), np.eye(bc)
            for a in range(0, rows, br):
                for b in range(0, cols, bc):
                    idx = off + (np.arange(a, a + br)[:, None] * cols + np.arange(b, b + bc)[None, :])
                    qsum, qcnt = np.zeros((br, bc)), np.zeros((br, bc))
                    for k in range(N):
                        C = Dr @ delta[k][idx] @ Dc.T
                        flat = C.reshape(-1)
                        sel = np.argsort(-np.abs(flat), kind="stable")[:min(K, flat.size)]
                        S = np.zeros(flat.size)
                        S[sel] = flat[sel]
                        S = S.reshape(br, bc)
                        if mistake != "no-removal":
                            delta[k][idx] -= Dr.T @ S @ Dc
                        qsum += S
                        qcnt[S != 0] += 1
                    Q = qsum if mistake == "sum" else np.where(qcnt > 0, qsum / np.maximum(qcnt, 1), 0.0)
                    theta[idx] -= lr * np.sign(Dr.T @ Q @ Dc)
        for k, Dk in enumerate(dumps):
            s = Dk["steps"][t - 1]
            if not np.array_equal(s["theta"], D0["steps"][t - 1]["theta"]):
                fails.append("step %d: rank %d's parameters differ from rank 0's" % (t, k))
            worst["theta"] = max(worst["theta"], rel(s["theta"], theta))
            worst["delta"] = max(worst["delta"], rel(s["r"], delta[k]))
            worst["gn"] = max(worst["gn"], abs(s["gn"] - norm) / (norm + 1e-6))
    tol = 2e-4
    fails += ["max relative |dist_demo.c - float64 reference| of %s is %.3g > %g" % (k, x, tol)
              for k, x in worst.items() if not x <= tol]
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, top-%d of blocks of %d, each step from the C's state: worst rel. diff theta "
          "%.1e delta %.1e norm %.1e)" % (name, nsteps, N, K, CHUNK, worst["theta"], worst["delta"], worst["gn"]))


if __name__ == "__main__":
    main()
