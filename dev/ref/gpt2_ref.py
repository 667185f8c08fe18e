#!/usr/bin/python3
"""dev/ref/gpt2_ref.py - PyTorch (float64) reference for the CPU GPT-2 in train_gpt.c.

Reads the initial weights from a llm.c model file (version 3, fp32) that the C side wrote with its seeded
initialisation (`build/test_gpt2 --write-init PATH`), takes B*T+1 real tokens from a GPT-2 token shard, and writes
the reference file that test/test_gpt2.c compares against: input tokens, loss, logits, every parameter gradient,
then the losses and final parameters after STEPS steps of AdamW and, separately, STEPS steps of AdamS, both on the
same batch every step. All maths is float64; the model is written out functionally so it mirrors train_gpt.c
layer by layer without sharing any code with it. Not for: training, or anything at run time.

Run with Debian's torch: /usr/bin/python3 dev/ref/gpt2_ref.py --model M.bin --shard S.bin --out OUT.bin

Optimizer settings (fixed): lr 1e-3 constant, beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1 on wte, wpe and
the linear weights (qkvw, attprojw, fcw, fcprojw) only, no gradient clipping. AdamW is torch.optim.AdamW; AdamS is
written out from SCAPE.md section 1.

Reference file format (little-endian; "f32[n]" is n float32 rounded from the float64 result):
  int32[32]  header: magic 20240330, version 1, L, C, NH, maxT, V, Vp, B, T, STEPS, K (wte rows kept),
             shard token offset, 0...
  f64[8]     lr, beta1, beta2, eps, weight_decay, 0, 0, 0
  int32[B*T+1] tokens: inputs = tokens[0:B*T] as (B,T), targets = tokens[1:B*T+1]
  int32[K]   rows: the kept wte rows / logits columns, sorted: every token id present in the window, then ids
             (j * 7919) mod V for j = 1, 2, ... not already present, until K = 256
  f32        loss (mean cross-entropy at the initial weights)
  f32[B*T*K] logits[:, rows] (columns = rows)
  TENSORS    gradients at the initial weights
  then twice (AdamW, then AdamS): f32[STEPS] losses before each update, TENSORS parameters after STEPS updates
TENSORS = the 16 tensors in llm.c's order (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw,
fcb, fcprojw, fcprojb, lnfw, lnfb; (L, ...) blocks whole), each f32[numel], except wte: f32[K*C] (the rows
above) followed by f32 sum of |x| and f32 sum of x^2 over the whole (Vp, C) tensor (not the plain sum: for the
gradient it is 0 up to rounding noise, since every softmax row sums to 1, and the noise is not reproducible).
Values with |x| <= 1e-7 x max|tensor| are stored as 0: they are float64 rounding noise (the key bias's exact
gradient is 0, since softmax ignores a shift of a whole row, so its float64 gradient and the parameter after Adam
are noise) and would make the file depend on the machine. Every result is stored as float32 (rounded from float64), so the last-bit differences of float64 BLAS kernels
between CPUs rarely reach the file; the test regenerates it and compares within rounding (test/ref_compare.h:
integers equal, reals within 1e-6 of their tensor's max |x|), since on some CPUs (AVX-512 kernels) they do.
"""
import argparse
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

REF_MAGIC = 20240330
REF_VERSION = 1
K_ROWS = 256
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.95, 1e-8, 0.1
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(1)


def shapes(L, C, maxT, Vp):
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,),
            "lnfb": (C,)}


def read_model(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        die(f"{path}: shorter than a model header")
    h = struct.unpack("<256i", data[:1024])
    if h[0] != 20240326 or h[1] != 3:
        die(f"{path}: not a llm.c version 3 model file (magic {h[0]}, version {h[1]})")
    maxT, V, L, NH, C, Vp = h[2:8]
    sh = shapes(L, C, maxT, Vp)
    total = sum(math.prod(s) for s in sh.values())
    if len(data) != 1024 + 4 * total:
        die(f"{path}: {len(data)} bytes, expected {1024 + 4 * total}")
    flat = np.frombuffer(data, dtype="<f4", offset=1024).astype(np.float64)
    params, off = {}, 0
    for n in NAMES:
        k = math.prod(sh[n])
        params[n] = torch.tensor(flat[off:off + k].reshape(sh[n]), dtype=torch.float64, requires_grad=True)
        off += k
    return dict(L=L, C=C, NH=NH, maxT=maxT, V=V, Vp=Vp), params


def read_tokens(path, offset, n):
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack("<256i", data[:1024])
    if h[0] != 20240520 or h[1] != 1:
        die(f"{path}: not a GPT-2 token shard (magic {h[0]}, version {h[1]}); run `make data`")
    ntok = h[2]
    if len(data) != 1024 + 2 * ntok or offset + n > ntok:
        die(f"{path}: {ntok} tokens, need {offset + n}; run `make data`")
    return np.frombuffer(data, dtype="<u2", offset=1024 + 2 * offset, count=n).astype(np.int64)


def forward(p, cfg, inputs, targets):
    """GPT-2 forward in float64. inputs, targets (B,T) int64. Returns (loss, logits (B,T,V))."""
    L, C, NH, V = cfg["L"], cfg["C"], cfg["NH"], cfg["V"]
    B, T = inputs.shape
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"][:V].T  # lm_head tied to wte; the padded rows V..Vp-1 take no part
    loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    return loss, logits


def adams_step(p, m, t):
    """AdamS (SCAPE.md section 1): nu from the previous momentum, Adam-style bias correction."""
    bc1, bc2 = 1 - BETA1 ** t, 1 - BETA2 ** t
    with torch.no_grad():
        for n in NAMES:
            g, mp = p[n].grad, m[n]
            nu = BETA2 * mp * mp + (1 - BETA2) * g * g
            m[n] = BETA1 * mp + (1 - BETA1) * g
            wd = WD if n in DECAY else 0.0
            p[n] -= LR * ((m[n] / bc1) / (nu.sqrt() / math.sqrt(bc2) + EPS) + wd * p[n])


def flush_noise(t):
    return torch.where(t.abs() <= 1e-7 * t.abs().max(), torch.zeros_like(t), t)


def pack_tensors(p, rows, use_grad):
    out = bytearray()
    for n in NAMES:
        t = (p[n].grad if use_grad else p[n]).detach()
        if n == "wte":
            out += flush_noise(t)[rows].numpy().astype("<f4").tobytes()
            out += struct.pack("<ff", float(t.abs().sum()), float((t * t).sum()))
        else:
            out += flush_noise(t).reshape(-1).numpy().astype("<f4").tobytes()
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="initial weights, llm.c version 3 model file")
    ap.add_argument("--shard", required=True, help="GPT-2 token shard (data/sotu/gpt2/sotu_val_000000.bin)")
    ap.add_argument("--offset", type=int, default=1000, help="first token of the window in the shard")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)  # same summation order on every machine: the output is compared byte for byte

    cfg, p0 = read_model(a.model)
    B, T, V, C = a.B, a.T, cfg["V"], cfg["C"]
    if T > cfg["maxT"]:
        die(f"--T {T} exceeds the model's maxT {cfg['maxT']}")
    tokens = read_tokens(a.shard, a.offset, B * T + 1)
    inputs = torch.tensor(tokens[:-1].reshape(B, T))
    targets = torch.tensor(tokens[1:].reshape(B, T))

    present = sorted(set(int(x) for x in tokens))
    rows, j = list(present), 1
    while len(rows) < K_ROWS:
        r = (j * 7919) % V
        if r not in rows:
            rows.append(r)
        j += 1
    rows = sorted(rows[:K_ROWS])
    rows_t = torch.tensor(rows)

    out = bytearray()
    hdr = [REF_MAGIC, REF_VERSION, cfg["L"], C, cfg["NH"], cfg["maxT"], V, cfg["Vp"], B, T, a.steps, K_ROWS,
           a.offset] + [0] * 19
    out += struct.pack("<32i", *hdr)
    out += struct.pack("<8d", LR, BETA1, BETA2, EPS, WD, 0, 0, 0)
    out += tokens.astype("<i4").tobytes()
    out += np.array(rows, dtype="<i4").tobytes()

    loss, logits = forward(p0, cfg, inputs, targets)
    loss.backward()
    out += struct.pack("<f", float(loss))
    loss0 = float(loss)
    out += logits.detach()[:, :, rows_t].numpy().astype("<f4").tobytes()
    out += pack_tensors(p0, rows_t, use_grad=True)

    for opt in ("adamw", "adams"):
        p = {n: t.detach().clone().requires_grad_(True) for n, t in p0.items()}
        if opt == "adamw":
            groups = [{"params": [p[n] for n in NAMES if n in DECAY], "weight_decay": WD},
                      {"params": [p[n] for n in NAMES if n not in DECAY], "weight_decay": 0.0}]
            torch_opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
        m = {n: torch.zeros_like(t) for n, t in p.items()}
        losses = []
        for step in range(1, a.steps + 1):
            for t in p.values():
                t.grad = None
            loss, _ = forward(p, cfg, inputs, targets)
            loss.backward()
            losses.append(float(loss))
            if opt == "adamw":
                torch_opt.step()
            else:
                adams_step(p, m, step)
        out += struct.pack(f"<{a.steps}f", *losses)
        out += pack_tensors(p, rows_t, use_grad=False)

    with open(a.out, "wb") as f:
        f.write(out)
    print(f"wrote {a.out}: {len(out)} bytes, initial loss {loss0:.6f}")


if __name__ == "__main__":
    main()
