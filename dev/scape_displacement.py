"""dev/scape_displacement.py - how far training moved the parameters: RMS of theta_final - theta_0 over wte, wpe and
the rest (transformer blocks, final norm), and the share of coordinates that moved more than 5e-4, per run.
INIT and RUN are --out directories of train_gpt runs; INIT's checkpoint must hold the initial parameters (make it
with the same --model/--seed and --steps 1 --lr 0). Used for docs/reproduction.md section 6.3; not a test.
Usage: /usr/bin/python3 dev/scape_displacement.py INIT_DIR RUN_DIR...
"""
import glob
import sys

import numpy as np


def load(d):
    """the newest checkpoint's parameters of run dir d (float32), and the sizes of wte and wpe"""
    f = sorted(glob.glob(d + "/ckpt_*/model.bin"))[-1]
    h = np.fromfile(f, np.int32, 256)  # llm.c header: magic, version, maxT, V, L, NH, C, Vp
    maxT, C, Vp = int(h[2]), int(h[6]), int(h[7])
    return np.fromfile(f, np.float32, offset=1024), Vp * C, maxT * C


def rms(x):
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))


def displacement(init, run):
    """RMS of theta_final - theta_0 over wte, wpe and the rest, and the shares of wte and the rest that moved
    more than 5e-4; scripts/study_variants.sh records wte and the rest (wpe with them) per run"""
    p0, nwte, nwpe = load(init)
    p, _, _ = load(run)
    if p.shape != p0.shape:
        sys.exit("error: %s holds another model than %s; use runs of the same --model" % (run, init))
    d = p - p0
    w, e, b = d[:nwte], d[nwte:nwte + nwpe], d[nwte + nwpe:]
    return rms(w), rms(e), rms(b), rms(d[nwte:]), float(np.mean(np.abs(w) > 5e-4)), float(np.mean(np.abs(b) > 5e-4))


if __name__ == "__main__":
    print("%-28s %9s %9s %9s %11s %11s" % ("run", "rms_d_wte", "rms_d_wpe", "rms_d_rest", "wte>5e-4", "rest>5e-4"))
    for run in sys.argv[2:]:
        w, e, b, _, fw, fb = displacement(sys.argv[1], run)
        print("%-28s %9.2e %9.2e %9.2e %11.4f %11.4f" % (run, w, e, b, fw, fb))
