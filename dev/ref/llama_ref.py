#!/usr/bin/python3
"""dev/ref/llama_ref.py - PyTorch (float64) reference for the CPU Llama in train_llama.c.

Reads the initial weights from a Llama model file (train_llama.c's layout, version 3 fp32) that the C side wrote
with its seeded initialisation (`build/test_llama --write-init PATH`), takes B*T+1 real Llama 2 tokens from a uint32
token shard (data/sotu/llama2/sotu_val_000000.bin, from `make data-llama`), runs that one batch and writes the reference
file that test/test_llama.c compares against: input tokens, loss, logits, every parameter gradient, then the losses
and final parameters after STEPS steps of AdamW and, separately, STEPS steps of AdamS, both on the same batch every
step. All maths is float64; the model is written out functionally (RMSNorm, rotate-half RoPE, GQA by repeating
key/value heads, SwiGLU) so it mirrors the architecture without sharing any code with train_llama.c.
Not for: training, or anything at run time.

Tokens: the window tokens[offset : offset + B*T + 1] of the shard (llm.c layout: 256 x int32 header, magic
20240801, version 7, then uint32 tokens), so the parity test sees the ids real training sees, <s> included.

Run with Debian's torch:
  /usr/bin/python3 dev/ref/llama_ref.py --model M.bin --shard data/sotu/llama2/sotu_val_000000.bin --out OUT.bin

Optimizer settings (fixed): lr 1e-3 constant, beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1 on wte, lm_head
and the linear weights (wq, wk, wv, wo, w1, w3, w2) only, no gradient clipping. AdamW is torch.optim.AdamW; AdamS is
written out from SCAPE.md section 1.

Reference file format (little-endian; "f32[n]" is n float32 rounded from the float64 result):
  int32[32]  header: magic 20261130, version 1, L, C, NH, NKV, F, V, Vp, maxT, B, T, STEPS, K (rows kept),
             shard token offset, 0...
  f64[8]     lr, beta1, beta2, eps, weight_decay, rope theta, RMSNorm eps, 0
  int32[B*T+1] tokens: inputs = tokens[0:B*T] as (B,T), targets = tokens[1:B*T+1]
  int32[K]   rows: the kept wte / lm_head rows and logits columns, sorted: every token id of the window, then ids
             (j * 7919) mod V for j = 1, 2, ... not already present, until K
  f64        loss (mean cross-entropy at the initial weights)
  f32[B*T*K] logits[:, :, rows], then f64 sum and f64 sum of squares over all (B, T, V) logits
  TENSORS    gradients at the initial weights
  then twice (AdamW, then AdamS): f64[STEPS] losses before each update, TENSORS parameters after STEPS updates
TENSORS = the 12 tensors in the model file's order (wte, attn_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2, norm_f,
lm_head; (L, ...) blocks whole), each f32[numel], except wte and lm_head: f32[K*C] (the rows above) followed by
f64 sum and f64 sum of squares over the whole (Vp, C) tensor. This keeps the file under 1 MB.
"""
import argparse
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION = 20261129, 3
REF_MAGIC, REF_VERSION = 20261130, 1
K_ROWS = 96
LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.95, 1e-8, 0.1
NAMES = ["wte", "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w3", "w2", "norm_f", "lm_head"]
DECAY = {"wte", "wq", "wk", "wv", "wo", "w1", "w3", "w2", "lm_head"}
ROWS_ONLY = {"wte", "lm_head"}


def die(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(1)


def shapes(cfg):
    L, C, F_, Vp = cfg["L"], cfg["C"], cfg["F"], cfg["Vp"]
    kvc = cfg["NKV"] * (C // cfg["NH"])
    return {"wte": (Vp, C), "attn_norm": (L, C), "wq": (L, C, C), "wk": (L, kvc, C), "wv": (L, kvc, C),
            "wo": (L, C, C), "ffn_norm": (L, C), "w1": (L, F_, C), "w3": (L, F_, C), "w2": (L, C, F_),
            "norm_f": (C,), "lm_head": (Vp, C)}


def read_model(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        die(f"{path}: shorter than a model header")
    h = struct.unpack("<256i", data[:1024])
    if h[0] != MODEL_MAGIC or h[1] != MODEL_VERSION:
        die(f"{path}: not a Llama version 3 model file (magic {h[0]}, version {h[1]})")
    cfg = dict(L=h[2], C=h[3], NH=h[4], NKV=h[5], F=h[6], V=h[7], Vp=h[8], maxT=h[9])
    cfg["theta"], cfg["eps"] = struct.unpack("<2f", data[40:48])  # float32 bits, widened exactly to float64
    sh = shapes(cfg)
    total = sum(math.prod(s) for s in sh.values())
    if len(data) != 1024 + 4 * total:
        die(f"{path}: {len(data)} bytes, expected {1024 + 4 * total}")
    flat = np.frombuffer(data, dtype="<f4", offset=1024).astype(np.float64)
    params, off = {}, 0
    for n in NAMES:
        k = math.prod(sh[n])
        params[n] = torch.tensor(flat[off:off + k].reshape(sh[n]), dtype=torch.float64, requires_grad=True)
        off += k
    return cfg, params


def read_tokens(path, offset, n, V):
    """n tokens from a uint32 token shard (llm.c layout, magic 20240801 version 7), starting at token offset."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"{path}: {e.strerror}; run `make data-llama`")
    if len(data) < 1024:
        die(f"{path}: shorter than a shard header; run `make data-llama`")
    h = struct.unpack("<256i", data[:1024])
    if h[0] != 20240801 or h[1] != 7:
        die(f"{path}: not a uint32 token shard (magic {h[0]}, version {h[1]}); run `make data-llama`")
    ntok = h[2]
    if len(data) != 1024 + 4 * ntok or offset + n > ntok:
        die(f"{path}: {ntok} tokens, need {offset + n}; run `make data-llama`")
    t = np.frombuffer(data, dtype="<u4", offset=1024 + 4 * offset, count=n).astype(np.int64)
    if t.max() >= V:
        die(f"{path}: token {t.max()} >= the model's V {V}; use a Llama 2 shard (`make data-llama`)")
    return t


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(p, cfg, inputs, targets):
    """Llama forward in float64. inputs, targets (B,T) int64. Returns (loss, logits (B,T,V))."""
    L, C, NH, NKV, V, eps = cfg["L"], cfg["C"], cfg["NH"], cfg["NKV"], cfg["V"], cfg["eps"]
    B, T = inputs.shape
    hd = C // NH
    inv_freq = 1.0 / (cfg["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, hd/2)
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1)  # (T, hd): entry j and j + hd/2 share an angle
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["wte"][inputs]
    for l in range(L):
        h = rmsnorm(x, p["attn_norm"][l], eps)
        q = (h @ p["wq"][l].T).view(B, T, NH, hd).transpose(1, 2)
        k = (h @ p["wk"][l].T).view(B, T, NKV, hd).transpose(1, 2)
        v = (h @ p["wv"][l].T).view(B, T, NKV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)  # query head h reads key/value head h // (NH/NKV)
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["wo"][l].T
        h = rmsnorm(x, p["ffn_norm"][l], eps)
        x = x + (F.silu(h @ p["w1"][l].T) * (h @ p["w3"][l].T)) @ p["w2"][l].T
    x = rmsnorm(x, p["norm_f"], eps)
    logits = x @ p["lm_head"][:V].T  # the padded rows V..Vp-1 take no part
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


def pack_tensors(p, rows, use_grad):
    out = bytearray()
    for n in NAMES:
        t = (p[n].grad if use_grad else p[n]).detach()
        if n in ROWS_ONLY:
            out += t[rows].numpy().astype("<f4").tobytes()
            out += struct.pack("<dd", float(t.sum()), float((t * t).sum()))
        else:
            out += t.reshape(-1).numpy().astype("<f4").tobytes()
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="initial weights, Llama version 3 model file")
    ap.add_argument("--shard", required=True, help="Llama 2 token shard (data/sotu/llama2/sotu_val_000000.bin)")
    ap.add_argument("--offset", type=int, default=0, help="first token of the window in the shard")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--T", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)  # same summation order on every run (the test compares within rounding: test/ref_compare.h)

    cfg, p0 = read_model(a.model)
    B, T, V, C = a.B, a.T, cfg["V"], cfg["C"]
    if T > cfg["maxT"] or a.offset < 0:
        die(f"--T {T} exceeds the model's maxT {cfg['maxT']}, or --offset {a.offset} is negative")
    tokens = read_tokens(a.shard, a.offset, B * T + 1, V)
    inputs = torch.tensor(tokens[:-1].reshape(B, T))
    targets = torch.tensor(tokens[1:].reshape(B, T))

    rows, j = sorted(set(int(x) for x in tokens)), 1
    while len(rows) < K_ROWS:
        r = (j * 7919) % V
        if r not in rows:
            rows.append(r)
        j += 1
    rows = sorted(rows[:K_ROWS])
    rows_t = torch.tensor(rows)

    out = bytearray()
    hdr = [REF_MAGIC, REF_VERSION, cfg["L"], C, cfg["NH"], cfg["NKV"], cfg["F"], V, cfg["Vp"], cfg["maxT"], B, T,
           a.steps, K_ROWS, a.offset] + [0] * 17
    out += struct.pack("<32i", *hdr)
    out += struct.pack("<8d", LR, BETA1, BETA2, EPS, WD, cfg["theta"], cfg["eps"], 0)
    out += tokens.astype("<i4").tobytes()
    out += np.array(rows, dtype="<i4").tobytes()

    loss, logits = forward(p0, cfg, inputs, targets)
    loss.backward()
    lg = logits.detach()
    out += struct.pack("<d", float(loss))
    out += lg[:, :, rows_t].numpy().astype("<f4").tobytes()
    out += struct.pack("<dd", float(lg.sum()), float((lg * lg).sum()))
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
        out += struct.pack(f"<{a.steps}d", *losses)
        out += pack_tensors(p, rows_t, use_grad=False)

    with open(a.out, "wb") as f:
        f.write(out)
    print(f"wrote {a.out}: {len(out)} bytes, loss {float(losses[0]):.6f}")


if __name__ == "__main__":
    main()
