"""test/scape_ref.py - an independent float64 numpy implementation of SCAPE (SCAPE.md sections 3 and 5), checked
step by step against optim/dist.c's dumps from test/scape_ref_driver.c (same toy problem, recomputed here from the
reference's own parameters, so an error anywhere compounds instead of being reset each step).

Usage: python3 scape_ref.py OUT_PREFIX DENSITY WARMUP CLIP NAME [VARIANT PARAM]
VARIANT (issue 31; formulas in optim/dist_scape.c's header): faithful (default), catchup or tensor-nu with PARAM the
cap A, residual-decay with PARAM rho. Prints "ok NAME" or "FAIL NAME: ..." and exits non-zero on failure. Written from SCAPE.md only; shares no code
with dist.c. The owner table and slice layout are read from the dump (layout, not algorithm).
Not for: training or performance.
"""
import math
import sys

import numpy as np

B1, B2, EPS, WD = 0.9, 0.95, 1e-8, 0.1


def read(prefix, rank):
    raw = open("%s.%d.bin" % (prefix, rank), "rb").read()
    o = 0

    def take(dtype, n):
        nonlocal o
        a = np.frombuffer(raw, dtype=dtype, count=n, offset=o)
        o += a.nbytes
        return a

    P, world, rk, ns, steps = [int(v) for v in take(np.int32, 5)]
    slices = []
    for _ in range(ns):
        off, numel = [int(v) for v in take(np.int64, 2)]
        decay, dense_only = [int(v) for v in take(np.int32, 2)]
        slices.append((off, numel, decay, dense_only))
    owners = [tuple(int(v) for v in take(np.int64, 2)) for _ in range(world)]
    theta0 = take(np.float32, P).astype(np.float64)
    per = []
    for _ in range(steps):
        th = take(np.float32, P); m = take(np.float32, P); r = take(np.float32, P)
        mk = take(np.uint8, P); gn = take(np.float32, 1)[0]
        per.append(dict(theta=th, m=m, r=r, mask=mk.astype(bool), gn=float(gn)))
    assert o == len(raw), "trailing bytes in dump"
    return dict(P=P, world=world, slices=slices, owners=owners, theta0=theta0, steps=per)


def rel(a, ref):
    """max |a - ref| / (|ref| + 1e-3 max(1, max|ref|)): relative, but near-cancelled entries (r, m near 0) are
    measured against the vector's scale, where float32 rounding of the terms that cancelled lives"""
    return float(np.max(np.abs(a - ref) / (np.abs(ref) + 1e-3 * max(1.0, float(np.max(np.abs(ref)))))))


def density(d, d0, W, t):  # SCAPE.md section 5 as the authors' reducer: (t - 1) / W, step 1 at d0
    return d if W <= 0 or t - 1 >= W else d0 * (d / d0) ** ((t - 1) / W)


def topk_mask(x, k):
    """k largest |x|, ties to the lower index: a stable sort on -|x|."""
    idx = np.argsort(-np.abs(x), kind="stable")[:k]
    out = np.zeros(len(x), bool)
    out[idx] = True
    return out


def make_mask(c_by_rank, slices, owners, dens):
    M = np.zeros(len(c_by_rank[0]), bool)
    for off, n, _, dense_only in slices:
        if dense_only:
            M[off:off + n] = True
            continue
        owner = [i for i, (lo, hi) in enumerate(owners) if lo <= off < hi][0]
        k = max(1, int(math.floor(dens * n)))  # floor(d |s|) in double, as the authors' int(d * numel)
        M[off:off + n] = topk_mask(c_by_rank[owner][off:off + n], min(k, n))
    return M


def grads(theta, t, world):
    j = np.arange(len(theta), dtype=np.float64)
    w = 1.0 + (np.arange(len(theta)) % 7)
    return [w * (theta - (2.0 * np.sin(0.731 * j + 0.377 * t + 2.1 * i) + 0.5 * np.cos(1.3 * j * t)))
            for i in range(world)]


def main():
    prefix, dens_t, W, clip, name = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    variant = sys.argv[6] if len(sys.argv) > 6 else "faithful"
    param = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    dumps = [read(prefix, 0)]
    dumps += [read(prefix, i) for i in range(1, dumps[0]["world"])]
    D = dumps[0]
    P, N, slices, owners = D["P"], D["world"], D["slices"], D["owners"]
    decay = np.zeros(P)
    for off, n, dec, _ in slices:
        decay[off:off + n] = WD if dec else 0.0
    theta = D["theta0"].copy()
    m = np.zeros(P)
    r = [np.zeros(P) for _ in range(N)]
    M = None
    M_prev = None  # the mask of the last update (the support of m): entering = M and not M_prev
    age = np.zeros(P)  # catchup: steps off the mask, saturating at 255
    worst = dict(theta=0.0, m=0.0, r=0.0, gn=0.0)
    fails = []
    nsteps = len(D["steps"])
    for t in range(1, nsteps + 1):
        lr = float(np.float32(0.01) * (np.float32(1) + np.float32(0.1) * np.float32(t % 3)))
        g = grads(theta, t, N)
        if M is None:  # section 5: bootstrap mask from the owners' top-k of |(1 - beta1) g_i|
            d1 = density(dens_t, 1.0, W, t)
            M = np.ones(P, bool) if d1 >= 1.0 else make_mask([(1 - B1) * gi for gi in g], slices, owners, d1)
        c = [B1 * m + (1 - B1) * g[i] + r[i] for i in range(N)]               # item 1
        b = sum(ci for ci in c) / N                                            # item 2 (only M is sent)
        if variant == "residual-decay":  # the old residual decays by rho off the mask
            r = [np.where(M, 0.0, ci - (1 - param) * ri) for ci, ri in zip(c, r)]
        else:
            r = [np.where(M, 0.0, ci) for ci in c]                            # item 3
        m_new = np.where(M, b, 0.0)                                            # item 4
        ghat = np.where(M, (m_new - B1 * m) / (1 - B1), 0.0)                   # item 5
        norm = math.sqrt(float(np.sum(ghat[M] ** 2)))
        if clip > 0 and norm > clip:                                           # item 6
            ghat = ghat * min(1.0, clip / (norm + 1e-6))
            m_new = np.where(M, B1 * m + (1 - B1) * ghat, 0.0)
        bc1, bc2 = 1 - B1 ** t, 1 - B2 ** t
        nu = B2 * m ** 2 + (1 - B2) * ghat ** 2                                # item 7
        upd = (m_new / bc1) / (np.sqrt(nu) / math.sqrt(bc2) + EPS)
        entering = M & ~M_prev if M_prev is not None else np.zeros(P, bool)
        if variant == "catchup":
            upd = np.where(entering, np.minimum(1 + age, param) * upd, upd)
        if variant == "tensor-nu":
            for off, n, _, _ in slices:
                sl = slice(off, off + n)
                stay = M[sl] & M_prev[sl] if M_prev is not None else np.zeros(n, bool)
                if not stay.any():
                    continue
                sT = float(np.mean(ghat[sl][stay] ** 2))                       # clipped g_hat of the stayers
                uv = (m_new[sl] / bc1) / (math.sqrt((1 - B2) * sT) / math.sqrt(bc2) + EPS)
                lim = param * np.abs(upd[sl])
                upd[sl] = np.where(entering[sl], np.clip(uv, -lim, lim), upd[sl])
        age = np.where(M, 0, np.minimum(age + 1, 255))
        M_prev = M
        theta = np.where(M, theta - lr * (upd + decay * theta), theta - lr * decay * theta)
        m = m_new
        M_next = make_mask(c, slices, owners, density(dens_t, 1.0, W, t + 1))  # item 8, c before item 3
        # compare with every rank's dump of this step
        for i, Di in enumerate(dumps):
            s = Di["steps"][t - 1]
            if not np.array_equal(s["mask"], M):
                bad = np.nonzero(s["mask"] != M)[0]
                fails.append("step %d rank %d: mask differs at %d coordinates (first %d)" % (t, i, len(bad), bad[0]))
            for key, ref in (("theta", theta), ("m", m), ("r", r[i])):
                worst[key] = max(worst[key], rel(s[key], ref))
            worst["gn"] = max(worst["gn"], abs(s["gn"] - norm) / (norm + 1e-6))
        M = M_next
    tol = 2e-4
    for key, e in worst.items():
        if not e <= tol:
            fails.append("max relative |dist.c - float64 reference| of %s is %.3g > %g" % (key, e, tol))
    if fails:
        print("FAIL %s: %s" % (name, "; ".join(fails[:4])))
        sys.exit(1)
    print("ok %s (%d steps, %d ranks, worst rel. diff theta %.1e m %.1e r %.1e norm %.1e)" % (
        name, nsteps, N, worst["theta"], worst["m"], worst["r"], worst["gn"]))


if __name__ == "__main__":
    main()
