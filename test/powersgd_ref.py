"""test/powersgd_ref.py - an independent float64 numpy PowerSGD into AdamW (Vogels, Karimireddy, Jaggi, NeurIPS 2019,
Algorithm 1 with error feedback and a warm-started Q; the aggregated gradient fed to AdamW, as PyTorch's PowerSGD hook
is used with Adam), checked step by step against optim/dist_powersgd.c's dumps from test/scape_ref_driver.c (the toy
problem of test/scape_ref.py, recomputed here from the reference's own parameters).
Usage: python3 powersgd_ref.py OUT_PREFIX RANK CLIP NAME [MISTAKE]
MISTAKE (a negative control: the reference then makes this mistake and must FAIL): no-ef (no error feedback),
no-orth (P not orthogonalized), no-warm (Q not kept between steps: the initial Q every step).
Each step starts from the C's own state after the previous one (theta, every rank's e, AdamW's m and Q from the dumps;
Q's initial value, a random draw, too) and checks what the step makes of it: e, Q, m and the gradient norm. Written from
the paper and optim/dist_powersgd.c's header; shares no code with the C. Prints "ok NAME" or "FAIL NAME: ..." and
exits non-zero on failure.
Not for: training or performance.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scape_ref import grads, read, rel  # noqa: E402  (the dump reader, the toy's gradients, the error measure)

B1, B2, EPS, WD = 0.9, 0.95, 1e-8, 0.1
START, MIN_COMPRESSION = 3, 2.0  # the driver's powersgd_start and min compression


def orthogonalize(P):
    P = P.copy()
    for k in range(P.shape[1]):
        n = np.linalg.norm(P[:, k])
        if n > 0:
            P[:, k] /= n
        for j in range(k + 1, P.shape[1]):
            P[:, j] -= np.dot(P[:, k], P[:, j]) * P[:, k]
    return P


def main():
    prefix, R, clip, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    mistake = sys.argv[5] if len(sys.argv) > 5 else ""
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D = dumps[0]
    P, N, slices = D["P"], D["world"], D["slices"]
    nsteps = len(D["steps"])
    # the compressed slices: the driver's matrices with n m >= 2 r (n + m), Q's layout in slice order
    shapes = {0: (40, 8), 2: (8, 24), 4: (24, 8)}
    comp, qo = {}, 0
    for i in sorted(shapes):
        n, m = shapes[i]
        r = min(R, n, m)
        if n * m >= MIN_COMPRESSION * r * (n + m):
            comp[i] = (n, m, r, qo)
            qo += m * r
    qs = np.fromfile(prefix + ".q.bin", np.float32).astype(np.float64)
    if len(qs) != qo * (nsteps + 1) or not comp:
        print("FAIL %s: the dump's Q has %d values, the reference's layout %d x %d steps" % (name, len(qs), qo, nsteps + 1))
        sys.exit(1)
    Qd = qs.reshape(nsteps + 1, qo)  # Qd[t]: Q after step t (Qd[0]: the initial draw)
    # Step by step from the C's own state at t-1 (theta, every rank's e, m, Q), so that each step's error is its own:
    # the low-rank approximation's second and later directions are ill-conditioned on this toy, and over a whole
    # trajectory float32 rounding makes it drift where it may (up to 1e-2 after 30 steps).
    worst = dict(e=0.0, Q=0.0, m=0.0, gn=0.0)
    fails = []
    for t in range(1, nsteps + 1):
        prev = [Dk["steps"][t - 2] if t > 1 else None for Dk in dumps]
        theta = prev[0]["theta"].astype(np.float64) if t > 1 else D["theta0"]
        e = [p_["r"].astype(np.float64) if p_ else np.zeros(P) for p_ in prev]
        m1 = prev[0]["m"].astype(np.float64) if t > 1 else np.zeros(P)
        g_i = grads(theta, t, N)
        g = sum(g_i) / N
        e_new = [x.copy() for x in e]
        Qn_all = Qd[t - 1].copy()
        if t > START:
            for i, (n, m, r, o) in comp.items():
                off = slices[i][0]
                sl = slice(off, off + n * m)
                Ms = [(g_i[k][sl] + (0 if mistake == "no-ef" else e[k][sl])).reshape(n, m) for k in range(N)]
                Qs = (Qd[0] if mistake == "no-warm" else Qd[t - 1])[o:o + m * r].reshape(m, r)
                Pm = sum(Mk @ Qs for Mk in Ms) / N
                if mistake != "no-orth":
                    Pm = orthogonalize(Pm)
                Qn = sum(Mk.T @ Pm for Mk in Ms) / N
                approx = Pm @ Qn.T
                for k in range(N):
                    e_new[k][sl] = (Ms[k] - approx).reshape(-1)
                g[sl] = approx.reshape(-1)
                Qn_all[o:o + m * r] = Qn.reshape(-1)
        norm = math.sqrt(float(np.sum(g ** 2)))
        if clip > 0 and norm > clip:
            g = g * (clip / (norm + 1e-6))
        m_new = B1 * m1 + (1 - B1) * g
        worst["Q"] = max(worst["Q"], rel(Qd[t], Qn_all))
        for k, Dk in enumerate(dumps):
            s = Dk["steps"][t - 1]
            if not np.array_equal(s["theta"], D["steps"][t - 1]["theta"]) or not np.array_equal(s["m"], D["steps"][t - 1]["m"]):
                fails.append("step %d: rank %d's parameters or m differ from rank 0's" % (t, k))
            worst["e"] = max(worst["e"], rel(s["r"], e_new[k]))
            worst["m"] = max(worst["m"], rel(s["m"], m_new))
            worst["gn"] = max(worst["gn"], abs(s["gn"] - norm) / (norm + 1e-6))
    tol = 1e-4
    fails += ["max relative |dist_powersgd.c - float64 reference| of %s is %.3g > %g" % (k, x, tol)
              for k, x in worst.items() if not x <= tol]
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, rank %d, each step from the C's state: worst rel. diff e %.1e Q %.1e m %.1e "
          "norm %.1e)" % (name, nsteps, N, R, worst["e"], worst["Q"], worst["m"], worst["gn"]))


if __name__ == "__main__":
    main()
