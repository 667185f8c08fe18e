#!/usr/bin/env python3
"""scripts/cost_model.py - an alpha-beta cost model of one data-parallel step for every update rule of the trainers
(plain python3), so that a rule can be chosen by the network one has.

  cost_model.py check DIR      fit on the unshaped runs of scripts/netem_bench.sh --out DIR (measured compute time
                               and byte counts) and predict its shaped runs; prints predicted vs measured mean step
                               time of every run (steps 2..)
  cost_model.py project [...]  project step time to the paper's settings (32 and 64 ranks; GPT-345M, Llama-500M,
                               Llama-1.8B; 200 Gbit/s-class links) and set it beside the paper's claims: first dense
                               AdamS vs SCAPE, then every rule at its best documented setting (RULE_SETTINGS)
  cost_model.py time-to-loss --steps-to-target FILE --compute-ms X [--model SPEC] [--measured-ranks M]
                               [--ranks 4 32] [--rates 1gbit 100mbit 10gbit] [--shared-link] [--scaling strong|weak]
                               the time each rule needs to reach a target validation loss on each network: FILE's
                               lines are `rule<TAB>setting<TAB>steps` (# comments; steps an integer or `not reached`);
                               rule is the --optimizer name, setting the run's trainer flags that set its bytes
                               (`--density 0.1`, `--diloco-h 30 --sparseloco-mask shared`; `-` for the defaults) or
                               the rule's main number (density, PowerSGD rank, H) with `own`/`shared` for SparseLoCo;
                               X is the measured forward+backward+update time of one step on M ranks (default 4),
                               SPEC the runs' GPT-2 model (default d4c64h4t64v4096, the regime study's small one).
                               Prints the time to target per rank count and per-rank link rate (--shared-link: the
                               rate is all ranks' total, as netem_bench.sh's), and which rule wins at each.

The model (Hockney's alpha-beta; ring collectives as in Thakur, Rabenseifner and Gropp 2005):
  ring all-reduce of S bytes over N ranks   2 (N-1) alpha + 2 (N-1)/N S / beta
  ring all-gather, S bytes in total         (N-1) alpha + (N-1)/N S / beta  (an all-to-all of N blocks likewise)
  dense step    t_c + (1 - overlap) * allreduce(4 P)
  SCAPE step    t_c + t_topk + (1 - overlap) * allreduce(4 K) + max(0, allgather(P / 8) - t_c)
                K = d * P_sparse + P_dense values; the 1-bit mask all-gather hides behind the next step's compute
                (SCAPE.md sections 3 and 6), so only what is longer than the compute shows.
alpha is per message (s), beta the per-rank link bandwidth (bytes/s), t_c the forward+backward+update time.
The first `project` table uses the two formulas above as written. Every other figure (the all-rules table,
time-to-loss) comes from each rule's collectives per step t as the trainer issues and counts them (comm/comm.h: an
all-reduce of S bytes sends 2 S (N-1)/N, an all-gather whose result is S bytes sends S (N-1)/N; P parameters,
slices s of n_s elements from the model's parameter table; test/test_reproduce_cost.py checks every one against the
trainer's comm_bytes_sent):
  adamw, adams     all-reduce of 4P, per bucket during backward (hidden by --overlap)
  scape d          all-reduce of 4K_t (2K_t with --scape-payload bf16), K_t = sum_s k_s(d_t) (norms and biases
                   whole), per bucket (--overlap); the mask all-gather, sum_r ceil(n_r / 8) bytes (owner r's
                   segment), behind the next step's compute (step 1 gathers its bootstrap mask first, exposed);
                   --scape-mask-coding auto (the default) codes it: at most 8N + sum_r (1 + ceil(n_r / 8))
  topk-ef d        all-gather of the N ranks' K_t (index, value) pairs, 8 K_t (N-1) sent: grows with N;
                   per bucket (--overlap)
  powersgd r       steps <= --powersgd-start: all-reduce of 4P; then all-reduce of 4 K_P per bucket (--overlap,
                   K_P = sum n_s r_s over compressed matrices + the others whole) and of 4 K_Q after it (exposed)
  onebit-adam      steps <= F (--onebit-freeze, 0: 15% of --steps): all-reduce of 4P (--overlap); then an
                   all-to-all and an all-gather of N blocks of Bk = 4 S + sum_s ceil(n_s / 8N) bytes (exposed)
  demo             all-gather of the N ranks' K (index, value) pairs, K = sum over DCT blocks of min(k, |B|),
                   8 K (N-1) sent (exposed)
  diloco H         every H steps and at the run's last: all-reduce of 4P (exposed: amortized over H steps, it does
                   not overlap the inner steps)
  sparseloco H     every H steps: own (the paper's): all-gather of N messages of sum_c (4 + 2 k_c + ceil(k_c b / 8))
                   bytes, (N-1) times that sent; shared: all-reduce of 4K (K = sum_c k_c) and the mask all-gather
                   (sum_r ceil(n_r / 8); twice at the first outer step); exposed, amortized over H
  every step       control: the loss vote (2 doubles, an all-gather: 16 (N-1) bytes) and the rule's skip flag
                   (scape, topk-ef, powersgd: 1 int64 all-reduce, 16 (N-1)/N) or norm (onebit-adam compressing,
                   demo, diloco, sparseloco: 2 doubles, 16 (N-1)), exposed
  step time        t_c + (1 - overlap) * the --overlap collectives + the exposed ones + max(0, the mask's - t_c);
                   one alpha term per collective (buckets pipelined)
time-to-loss: a rule's time to target is the sum of its step times over the steps FILE gives, warm-ups included
(the density schedule, PowerSGD's dense start, 1-bit Adam's AdamW steps: its default F from the setting's --steps,
else from the steps to target); the rank counts keep the measured global
batch (--scaling strong: t_c M / N on N ranks, the same steps to target) or each rank's batch (weak: t_c on every
N, steps still as measured: optimistic); the local-update rules' steps to target are taken as measured whatever N.
Not for: anything but first-order estimates; it ignores congestion, stragglers and bucket pipelining.
"""
import collections
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cost_inputs import RATE_RE, OneLineParser, finite, load_runs, rate_bytes_per_s  # noqa: E402


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


# --- the parameter table as the trainers build it (train_gpt.c / train_llama.c *_build_table, common/params.c) ------
Slice = collections.namedtuple("Slice", "name shape decay")  # decay 1: a matrix (sparsified); 0: a norm gain or bias


def numel(s):
    n = 1
    for d in s.shape:
        n *= d
    return n


def gpt2_table(L, C, V=50257, maxT=1024):
    """GPT-2's slices in train_gpt.c's memory order: wte (Vp x C, V padded to a multiple of 128), wpe, each per-layer
    tensor for every layer in turn, lnfw, lnfb."""
    Vp = (V + 127) // 128 * 128
    per_layer = [("ln1w", 0, (C,)), ("ln1b", 0, (C,)), ("qkvw", 1, (3 * C, C)), ("qkvb", 0, (3 * C,)),
                 ("attprojw", 1, (C, C)), ("attprojb", 0, (C,)), ("ln2w", 0, (C,)), ("ln2b", 0, (C,)),
                 ("fcw", 1, (4 * C, C)), ("fcb", 0, (4 * C,)), ("fcprojw", 1, (C, 4 * C)), ("fcprojb", 0, (C,))]
    t = [Slice("wte", (Vp, C), 1), Slice("wpe", (maxT, C), 1)]
    t += [Slice("%s.%d" % (name, l), shape, decay) for name, decay, shape in per_layer for l in range(L)]
    return tuple(t + [Slice("lnfw", (C,), 0), Slice("lnfb", (C,), 0)])


def llama_table(L, C, F, NH, NKV, V):
    """Llama's slices in train_llama.c's order (untied lm_head, V padded to a multiple of 128)."""
    Vp = (V + 127) // 128 * 128
    kvc = NKV * (C // NH)
    per_layer = [("attn_norm", 0, (C,)), ("wq", 1, (C, C)), ("wk", 1, (kvc, C)), ("wv", 1, (kvc, C)),
                 ("wo", 1, (C, C)), ("ffn_norm", 0, (C,)), ("w1", 1, (F, C)), ("w3", 1, (F, C)), ("w2", 1, (C, F))]
    t = [Slice("wte", (Vp, C), 1)]
    t += [Slice("%s.%d" % (name, l), shape, decay) for name, decay, shape in per_layer for l in range(L)]
    return tuple(t + [Slice("norm_f", (C,), 0), Slice("lm_head", (Vp, C), 1)])


def gpt2_spec_table(spec):
    """The table of `train_gpt --model SPEC` (d6 .. d48 or d<L>c<C>[h<NH>][t<maxT>][v<V>], as train_gpt.c parses it);
    exits with one line on a spec it would refuse."""
    m = re.fullmatch(r"d(\d+)(?:c(\d+))?(?:h(\d+))?(?:t(\d+))?(?:v(\d+))?", spec or "")
    named = {6: 384, 12: 768, 24: 1024, 36: 1280, 48: 1600}
    if not m or any(g is not None and not 1 <= int(g) <= 1 << 20 for g in m.groups()):
        sys.exit("error: --model '%s' is not a GPT-2 spec; use d6, d12, d24, d36, d48 or d<L>c<C>[h<NH>][t<maxT>][v<V>]"
                 % spec)
    L, C, _, T, V = (int(g) if g else None for g in m.groups())
    if C is None:
        if L not in named:
            sys.exit("error: --model '%s': no standard GPT-2 of depth %d; give the width, e.g. d%dc256" % (spec, L, L))
        C = named[L]
    if V is not None and V < 2:
        sys.exit("error: --model '%s': a vocabulary of %d tokens is too small" % (spec, V))
    return gpt2_table(L, C, V or 50257, T or 1024)


def owner_ranges(table, n):
    """[(lo, hi)] of each rank's owned parameters: optim/scape.c's owner_table_build (whole slices, the boundary the
    slice start closest to r P / N)."""
    offs = [0]
    for s in table:
        offs.append(offs[-1] + numel(s))
    total, ns = offs.pop(), len(table)
    first, i = [0], 0
    for r in range(1, n):
        target = total * r / n
        while i < ns and abs((offs[i + 1] if i + 1 < ns else total) - target) < abs(offs[i] - target):
            i += 1
        first.append(i)
    first.append(ns)
    out = []
    for r in range(n):
        a, b = first[r], first[r + 1]
        lo = offs[a] if a < ns else total
        hi = offs[b] if b < ns else total
        out.append((lo, hi if b > a else lo))
    return out


# --- the rules' settings, as the trainer's flags set them ------------------------------------------------------------
RULES = ("adamw", "adams", "scape", "topk-ef", "powersgd", "onebit-adam", "demo", "diloco", "sparseloco")
# flag -> (key, type, lowest, highest): the trainer's defaults and ranges (trainer/train_options.c, the rule files)
BYTE_FLAGS = {
    "--density": ("density", float, 1e-6, 1.0), "--density-start": ("density_start", float, 1e-6, 1.0),
    "--density-warmup": ("density_warmup", int, 0, 2**31 - 1),
    "--density-dense-steps": ("density_dense", int, 0, 2**31 - 1),
    "--scape-mask-coding": ("mask_coding", ("none", "auto"), None, None),
    "--scape-payload": ("payload", ("fp32", "bf16"), None, None),
    "--scape-exclude-norms": ("exclude_norms", int, 0, 1),
    "--powersgd-rank": ("psgd_rank", int, 1, 1024), "--powersgd-start": ("psgd_start", int, 0, 2**31 - 1),
    "--powersgd-min-compression": ("psgd_min_compression", float, 0.0, 1e9),
    "--onebit-freeze": ("freeze", int, 0, 2**31 - 1), "--steps": ("steps", int, 1, 2**31 - 1),
    "--demo-chunk": ("demo_chunk", int, 1, 256), "--demo-topk": ("demo_topk", int, 1, 65536),
    "--diloco-h": ("diloco_h", int, 1, 10**9), "--sparseloco-h": ("sparseloco_h", int, 1, 10**9),
    "--sparseloco-chunk": ("sl_chunk", int, 1, 65536), "--sparseloco-topk": ("sl_topk", int, 1, 65536),
    "--sparseloco-bits": ("sl_bits", int, 1, 8), "--sparseloco-mask": ("sl_mask", ("own", "shared"), None, None),
}
DEFAULTS = dict(density=1.0, density_start=1.0, density_warmup=0, density_dense=0, mask_coding="auto", payload="fp32",
                exclude_norms=1, psgd_rank=1, psgd_start=1000, psgd_min_compression=2.0, freeze=0, steps=None,
                demo_chunk=64, demo_topk=32, diloco_h=500, sparseloco_h=30, sl_chunk=4096, sl_topk=64, sl_bits=2,
                sl_mask="own")
# flags that change no byte on the wire (formulas, learning rates, the run's plumbing): accepted and ignored
NEUTRAL_FLAGS = {"--lr", "--lr-floor", "--warmup", "--weight-decay", "--clip", "--beta1", "--beta2", "--eps", "--seed",
                 "--scape-variant", "--scape-variant-cap", "--scape-residual-decay", "--powersgd-eps", "--demo-decay",
                 "--diloco-inner", "--diloco-outer-lr", "--diloco-outer-momentum", "--sparseloco-inner",
                 "--sparseloco-beta", "--sparseloco-alpha", "--eval-every", "--eval-batches", "--sample-every",
                 "--threads", "--keep-ckpts", "--ckpt-every", "--mask-stats-every", "--shuffle", "--max-bad-steps"}
# the number a bare setting gives, per rule
MAIN_KNOB = {"scape": "--density", "topk-ef": "--density", "powersgd": "--powersgd-rank", "diloco": "--diloco-h",
             "sparseloco": "--sparseloco-h"}


def rule_settings(optimizer, setting="", where="setting"):
    """The settings of one run as a dict (DEFAULTS overridden): optimizer an --optimizer name, setting the run's
    trainer flags ("--density 0.1 --density-warmup 100"), "" or "-" for the defaults, or the rule's main number (MAIN_KNOB)
    with "own"/"shared" for SparseLoCo's mask. Raises ValueError naming `where` and the fix on anything else."""
    if optimizer not in RULES:
        raise ValueError("%s: unknown rule '%s'; use one of %s" % (where, optimizer, ", ".join(RULES)))
    r = dict(DEFAULTS, optimizer=optimizer)
    words = [] if setting.split() == ["-"] else setting.split()
    if words and not words[0].startswith("--"):  # shorthand: "0.1", "30 shared"
        flags = []
        for w in words:
            if w in ("own", "shared") and optimizer == "sparseloco":
                flags += ["--sparseloco-mask", w]
            elif optimizer in MAIN_KNOB and re.fullmatch(r"[0-9.eE+-]+", w):
                flags += [MAIN_KNOB[optimizer], w]
            else:
                raise ValueError("%s: '%s' is not a setting of %s; give its trainer flags (e.g. %s 30) or its main number"
                                 % (where, w, optimizer, MAIN_KNOB.get(optimizer, "--lr")))
        words = flags
    i = 0
    while i < len(words):
        flag, val = words[i], None
        if "=" in flag:
            flag, val = flag.split("=", 1)
        elif i + 1 < len(words):
            val = words[i + 1]
            i += 1
        i += 1
        if flag in BYTE_FLAGS or flag in NEUTRAL_FLAGS or flag == "--optimizer":
            if val is None:
                raise ValueError("%s: %s needs a value" % (where, flag))
        if flag == "--optimizer":
            if val != optimizer:
                raise ValueError("%s: --optimizer %s disagrees with the rule '%s'" % (where, val, optimizer))
            continue
        if flag in NEUTRAL_FLAGS:
            if flag == "--scape-variant":
                r["variant"] = val  # the same bytes; named in the label
            continue
        if flag not in BYTE_FLAGS:
            raise ValueError("%s: '%s' is not a trainer flag this model knows (--zero and the device update are not "
                             "modelled); flags that set bytes: %s" % (where, flag, " ".join(sorted(BYTE_FLAGS))))
        key, typ, lo, hi = BYTE_FLAGS[flag]
        if isinstance(typ, tuple):
            if val not in typ:
                raise ValueError("%s: %s %s: expected %s" % (where, flag, val, "|".join(typ)))
            r[key] = val
            continue
        try:
            v = typ(val)
        except ValueError:
            raise ValueError("%s: %s %s is not %s" % (where, flag, val, "an integer" if typ is int else "a number"))
        if not lo <= v <= hi:
            raise ValueError("%s: %s %s is outside %g..%g" % (where, flag, val, lo, hi))
        r[key] = v
    return r


def rule_label(r):
    """A short name for a rule's setting: 'scape 0.1', 'diloco H30', 'sparseloco H30 shared'."""
    o = r["optimizer"]
    if o in ("scape", "topk-ef"):
        return "%s %g%s" % (o, r["density"], " " + r["variant"] if r.get("variant", "faithful") != "faithful" else "")
    if o == "powersgd":
        return "powersgd r%d" % r["psgd_rank"]
    if o == "diloco":
        return "diloco H%d" % r["diloco_h"]
    if o == "sparseloco":
        return "sparseloco H%d %s" % (r["sparseloco_h"], r["sl_mask"])
    return o


# --- each rule's collectives per step, as the trainer issues and counts them ----------------------------------------
# kind: allreduce (size: bytes per rank), allgather (size: bytes of the result), alltoall (size: a rank's N blocks),
# sum_f64 (size: doubles; an all-gather of N x 8 size bytes), max_i64 (size: int64s; an all-reduce); hide: overlap
# (during backward, hidden by --overlap), behind (behind the next step's compute), exposed; bound: the size is an upper
# bound (a coded mask), not the count
Coll = collections.namedtuple("Coll", "kind size hide bound", defaults=("exposed", False))
COUNTER = {"allreduce": "allreduce", "allgather": "allgather", "alltoall": "reduce_scatter", "sum_f64": "control",
           "max_i64": "control"}


def slice_k(d, n):
    """k_s = max(1, floor(d n)) clamped to n (optim/scape.h scape_k)."""
    return min(n, max(1, int(math.floor(d * n))))


def density_at(r, t):
    """The density in force at step t (optim/dist.h dist_density: --density-dense-steps, then the geometric warm-up)."""
    if t <= r["density_dense"]:
        return r["density_start"]
    t -= r["density_dense"]
    d, d0, W = r["density"], r["density_start"], r["density_warmup"]
    if W <= 0 or t - 1 >= W:
        return d
    return d0 * math.pow(d / d0, (t - 1) / W)


def demo_split(n, s):
    """The largest divisor of n not above s (n if n <= s): DeMo's block side (optim/dist_demo.c)."""
    if n <= s:
        return n
    for b in range(s, 1, -1):
        if n % b == 0:
            return b
    return 1


def rule_plan(table, r, n):
    """What a rule's steps on n ranks are made of, computed once: P, the sparse K at a density (a function), PowerSGD's
    K_P and K_Q, 1-bit Adam's block Bk, DeMo's K, SparseLoCo's message and K, the owners' mask bytes."""
    P = sum(numel(s) for s in table)
    own = owner_ranges(table, n)
    plan = dict(P=P, mask=sum((hi - lo + 7) // 8 for lo, hi in own),
                mask_coded=8 * n + sum(1 + (hi - lo + 7) // 8 for lo, hi in own))
    o = r["optimizer"]
    if o in ("scape", "topk-ef"):
        cache = {}

        def k_at(d):
            if d not in cache:
                cache[d] = sum(numel(s) if (r["exclude_norms"] and not s.decay) else slice_k(d, numel(s)) for s in table)
            return cache[d]
        plan["k_at"] = k_at
    elif o == "powersgd":
        kp = kq = 0
        for s in table:  # a matrix n x m at rank r_s = min(R, n, m), compressed if n m >= min_compression r_s (n + m)
            ne, a = numel(s), s.shape[0]
            b = ne // a if ne else 0
            rs = min(r["psgd_rank"], a, b) if len(s.shape) >= 2 else 0
            if rs and a * b >= r["psgd_min_compression"] * rs * (a + b):
                kp, kq = kp + a * rs, kq + b * rs
            else:
                kp += ne
        plan.update(kp=kp, kq=kq)
    elif o == "onebit-adam":
        plan["bk"] = 4 * len(table) + sum((numel(s) + 8 * n - 1) // (8 * n) for s in table)
    elif o == "demo":
        k = 0
        for s in table:
            ne = numel(s)
            if len(s.shape) >= 2:
                br, bc = demo_split(s.shape[0], r["demo_chunk"]), demo_split(ne // s.shape[0], r["demo_chunk"])
            else:
                br, bc = demo_split(ne, r["demo_chunk"]), 1
            k += (ne // (br * bc)) * min(r["demo_topk"], br * bc)
        plan["k"] = k
    elif o == "sparseloco":
        msg = k = 0
        for s in table:
            ne = numel(s)
            for a in range(0, ne, r["sl_chunk"]):
                kc = min(r["sl_topk"], min(r["sl_chunk"], ne - a))
                msg += 4 + 2 * kc + (kc * r["sl_bits"] + 7) // 8
                k += kc
        plan.update(msg=msg, k=k)
    return plan


def onebit_freeze(r, last=None):
    """F: --onebit-freeze, or 0 resolved to 15% of the run's --steps (r's, else last; optim/dist_onebit_adam.c
    onebit_configure). Raises ValueError when neither says how long the run is."""
    if r["freeze"]:
        return r["freeze"]
    run = r["steps"] or last
    if not run:
        raise ValueError("1-bit Adam's default freeze step is 15% of the run's --steps: give --steps or --onebit-freeze")
    return max(1, int(math.floor(0.15 * run + 0.5)))


def step_collectives(table, r, n, t, last=None, plan=None):
    """[Coll] of step t (1-based) of rule r (rule_settings) on n ranks; last: the run's last step (local-update rules
    synchronize there; None: not in view). See the module's header for each rule's list."""
    plan = plan or rule_plan(table, r, n)
    o, P = r["optimizer"], plan["P"]
    out = [Coll("sum_f64", 2)]  # the loss vote (trainer/train.c)
    if o in ("adamw", "adams"):
        out.append(Coll("allreduce", 4 * P, "overlap"))
    elif o == "scape":
        vb = 2 if r["payload"] == "bf16" else 4
        out.append(Coll("allreduce", vb * plan["k_at"](density_at(r, t)), "overlap"))
        m, bound = (plan["mask"], False) if r["mask_coding"] == "none" else (plan["mask_coded"], True)
        if t == 1 and density_at(r, 1) < 1.0:
            out.append(Coll("allgather", m, "exposed", bound))  # the bootstrap mask M_1, gathered at once
        out.append(Coll("allgather", m, "behind", bound))
        out.append(Coll("max_i64", 1))
    elif o == "topk-ef":
        out.append(Coll("allgather", 8 * plan["k_at"](density_at(r, t)) * n, "overlap"))
        out.append(Coll("max_i64", 1))
    elif o == "powersgd":
        if t <= r["psgd_start"]:
            out.append(Coll("allreduce", 4 * P, "overlap"))
        else:
            out += [Coll("allreduce", 4 * plan["kp"], "overlap"), Coll("allreduce", 4 * plan["kq"])]
        out.append(Coll("max_i64", 1))
    elif o == "onebit-adam":
        if t <= onebit_freeze(r, last):
            out.append(Coll("allreduce", 4 * P, "overlap"))
        else:
            out += [Coll("alltoall", plan["bk"] * n), Coll("allgather", plan["bk"] * n), Coll("sum_f64", 2)]
    elif o == "demo":
        out += [Coll("allgather", 8 * plan["k"] * n), Coll("sum_f64", 2)]
    elif o in ("diloco", "sparseloco"):
        out.append(Coll("sum_f64", 2))
        H = r["diloco_h"] if o == "diloco" else r["sparseloco_h"]
        if t % H == 0 or t == last:
            if o == "diloco":
                out.append(Coll("allreduce", 4 * P))
            elif r["sl_mask"] == "own":
                out.append(Coll("allgather", plan["msg"] * n))
            else:
                out.append(Coll("allreduce", 4 * plan["k"]))
                first = min(H, last) if last else H
                out += [Coll("allgather", plan["mask"])] * (2 if t == first else 1)
    return out


def counted_bytes(colls, n):
    """Bytes one rank's counters report for these collectives: {total, allreduce, reduce_scatter, allgather, control}
    (comm/comm.c: numerators summed, divided by N once per kind and once for the total)."""
    num = collections.Counter()
    for c in colls:
        num[COUNTER[c.kind]] += {"allreduce": 2 * c.size, "allgather": c.size, "alltoall": c.size,
                                 "sum_f64": 8 * c.size * n, "max_i64": 16 * c.size}[c.kind] * (n - 1)
    out = {k: num[k] // n for k in ("allreduce", "reduce_scatter", "allgather", "control")}
    out["total"] = sum(num.values()) // n
    return out


def coll_s(c, n, alpha, beta):
    """Seconds of one collective on n ranks (ring model)."""
    if n <= 1:
        return 0.0
    if c.kind == "allreduce":
        return ring_allreduce_s(c.size, n, alpha, beta)
    if c.kind == "max_i64":
        return ring_allreduce_s(8 * c.size, n, alpha, beta)
    if c.kind == "sum_f64":
        return ring_allgather_s(8 * c.size * n, n, alpha, beta)
    return ring_allgather_s(c.size, n, alpha, beta)  # allgather, alltoall: (N-1) alphas, (N-1)/N of the total


def colls_step_s(colls, t_c, n, alpha, beta, overlap=0.0):
    """Seconds of a step of compute t_c whose collectives are colls: t_c + (1 - overlap) * those during backward +
    the exposed ones + what of the mask all-gather does not hide behind the next step's compute."""
    part = collections.Counter()
    for c in colls:
        part[c.hide] += coll_s(c, n, alpha, beta)
    return t_c + (1 - overlap) * part["overlap"] + part["exposed"] + max(0.0, part["behind"] - t_c)


def outer_period(r):
    """H of a local-update rule, None for the others."""
    o = r["optimizer"]
    return r["diloco_h"] if o == "diloco" else r["sparseloco_h"] if o == "sparseloco" else None


def run_profile(table, r, n, steps, last=None):
    """[(count, [Coll])] covering steps 1..steps of rule r on n ranks: the warm-up steps and outer steps one by one,
    every other step (all alike) once with its count. last: as step_collectives."""
    r = dict(r, steps=r["steps"] or last or steps)
    plan = rule_plan(table, r, n)
    o, H = r["optimizer"], outer_period(r)
    warm = 2
    if o in ("scape", "topk-ef"):
        warm = r["density_dense"] + max(0, r["density_warmup"]) + 2
    elif o == "powersgd":
        warm = r["psgd_start"] + 1
    elif o == "onebit-adam":
        warm = onebit_freeze(r) + 1
    special = set(range(1, min(steps, warm) + 1))
    if H:
        special |= set(range(H, steps + 1, H))
    if last and last <= steps:
        special.add(last)
    out = [(1, step_collectives(table, r, n, t, last, plan)) for t in sorted(special)]
    rest = steps - len(special)
    if rest > 0:
        t = warm + 1
        while (H and t % H == 0) or t == last:
            t += 1
        out.append((rest, step_collectives(table, r, n, t, last, plan)))
    return out


def run_s(table, r, n, steps, t_c, alpha, beta, overlap=0.0, last=None):
    """Seconds of steps 1..steps of rule r on n ranks at compute t_c a step."""
    return sum(k * colls_step_s(c, t_c, n, alpha, beta, overlap) for k, c in run_profile(table, r, n, steps, last))


def steady(table, r, n, t_c, alpha, beta, overlap=0.0):
    """(seconds, counted bytes) of a mean step long after every warm-up; over one outer period for the local-update
    rules. 1-bit Adam: its compressing stage."""
    H = outer_period(r) or 1
    t0 = H * (10**7 // H)
    r = dict(r, steps=r["steps"] or 10**7)
    plan = rule_plan(table, r, n)
    secs = sent = 0.0
    for t in range(t0 + 1, t0 + H + 1):
        c = step_collectives(table, r, n, t, None, plan)
        secs += colls_step_s(c, t_c, n, alpha, beta, overlap)
        sent += counted_bytes(c, n)["total"]
    return secs / H, sent / H


# every rule at its best documented setting (docs/reproduction.md; the papers' defaults otherwise)
RULE_SETTINGS = [("adams", "-"), ("scape", "--density 0.1"), ("scape", "--density 0.01"),
                 ("topk-ef", "--density 0.01"), ("powersgd", "--powersgd-rank 4"), ("onebit-adam", "-"),
                 ("demo", "-"), ("diloco", "--diloco-h 30"), ("diloco", "--diloco-h 100"),
                 ("sparseloco", "--sparseloco-h 30"), ("sparseloco", "--sparseloco-h 30 --sparseloco-mask shared")]
PAPER_TABLES = {"GPT-345M": gpt2_table(24, 1024), "Llama-500M": llama_table(16, 1536, 4096, 16, 8, 32000),
                "Llama-1.8B": llama_table(24, 2560, 6912, 32, 8, 128256)}


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
    project_rules(args, alpha, beta, flops)


def project_rules(args, alpha, beta, flops):
    """The second table of `project`: every rule of RULE_SETTINGS on each paper model, at each --ranks."""
    rules = [rule_settings(o, s, "RULE_SETTINGS") for o, s in RULE_SETTINGS]
    print()
    print("every rule at its best documented setting: MB = bytes one rank sends per step (its counters' comm_bytes_sent;"
          " the local-update rules' mean over H steps), s = step time, x = speedup over dense AdamS; from each rule's"
          " collectives (module header), control messages included; the paper models' tables as the trainers build them")
    for name, _, T, gb in PAPER_MODELS:
        table = PAPER_TABLES[name]
        p = sum(numel(s) for s in table)
        t_cs = {n: 6 * p * gb * T / n / flops for n in args.ranks}
        print("%s (P %.0fM; compute %s)" % (name, p / 1e6, ", ".join("%.3f s at N=%d" % (t_cs[n], n) for n in args.ranks)))
        print("  %-24s" % "rule (setting)" + "".join("%10s %9s %8s" % ("MB N=%d" % n, "s N=%d" % n, "x dense")
                                                  for n in args.ranks))
        res = {}
        for r in rules:
            res[rule_label(r)] = [steady(table, r, n, t_cs[n], alpha, beta, args.overlap) for n in args.ranks]
        base = res[rule_label(rules[0])]
        for label, row in res.items():
            print("  %-24s" % label + "".join("%10.3f %9.3f %7.2fx" % (b / 1e6, s, d[0] / s)
                                              for (s, b), d in zip(row, base)))
    print("settings: " + "; ".join("%s = --optimizer %s%s" % (rule_label(r), o, "" if s == "-" else " " + s)
                                   for r, (o, s) in zip(rules, RULE_SETTINGS)) + " (the other options at their defaults)")




def read_steps_to_target(path):
    """FILE of time-to-loss: [(rule settings, setting text, steps or None)]; exits with one line naming the line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        lines = data.decode("utf-8").splitlines()
    except OSError as e:
        sys.exit("error: --steps-to-target %s: %s" % (path, e.strerror))
    except UnicodeDecodeError as e:
        sys.exit("error: %s:%d: not UTF-8 text; write rule<TAB>setting<TAB>steps lines" % (
            path, data[:e.start].count(b"\n") + 1))
    rows, first = [], {}
    for i, line in enumerate(lines, 1):
        where = "%s:%d" % (path, i)
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        f = line.split("\t")
        if f[0] == "rule" and not rows:  # a header line
            continue
        if len(f) != 3:
            sys.exit("error: %s: expected 3 tab-separated fields (rule, setting, steps or 'not reached'), got %d"
                     % (where, len(f)))
        rule, setting, steps = (x.strip() for x in f)
        if steps != "not reached" and not (re.fullmatch(r"[0-9]+", steps) and int(steps) > 0):
            sys.exit("error: %s: steps '%s' is not a positive integer or 'not reached'" % (where, steps))
        steps = None if steps == "not reached" else int(steps)
        try:
            r = rule_settings(rule, setting, where)
            if rule == "onebit-adam":
                onebit_freeze(r, steps or 1)
        except ValueError as e:
            sys.exit("error: %s" % e)
        key = tuple(sorted(r.items()))
        if key in first:
            sys.exit("error: %s: the same rule and setting as line %d (%s); keep one line per run" % (
                where, first[key], rule_label(r)))
        first[key] = i
        rows.append((r, setting or "-", steps))
    if not rows:
        sys.exit("error: --steps-to-target %s has no rows; write rule<TAB>setting<TAB>steps lines" % path)
    return rows


def fmt_duration(s):
    return "%.1f s" % s if s < 120 else "%.1f min" % (s / 60) if s < 7200 else "%.2f h" % (s / 3600)


def time_to_loss(args):
    table = gpt2_spec_table(args.model)
    rows = read_steps_to_target(args.steps_to_target)
    p = sum(numel(s) for s in table)
    alpha, M = args.alpha_us * 1e-6, args.measured_ranks
    t_c0 = args.compute_ms * 1e-3
    print("time to the target loss: steps from %s; compute %.1f ms a step measured on %d ranks (%s); model %s (P %d);"
          " alpha %.0f us; %s" % (args.steps_to_target, args.compute_ms, M,
                                  "strong scaling: the global batch kept, t_c x %d / N" % M if args.scaling == "strong"
                                  else "weak scaling: each rank's batch kept, t_c on every N", args.model, p,
                                  args.alpha_us, "each rate shared by all ranks (rate / N each)" if args.shared_link
                                  else "each rank its own link of that rate"))
    cols = [(n, rate) for n in args.ranks for rate in args.rates]
    print("%-24s %11s %10s" % ("rule", "steps", "MB N=%d" % M) + "".join("%14s" % ("N=%d %s" % c) for c in cols) +
          "  setting")
    times = {}
    for i, (r, text, steps) in enumerate(rows):
        if steps is None:
            print("%-24s %11s %10s" % (rule_label(r), "not reached", "-") + "".join("%14s" % "-" for _ in cols) + "  " + text)
            continue
        prof = run_profile(table, r, M, steps)
        mb = sum(k * counted_bytes(c, M)["total"] for k, c in prof) / steps / 1e6
        line = "%-24s %11d %10.4f" % (rule_label(r), steps, mb)
        for n, rate in cols:
            beta = rate_bytes_per_s(rate) / (n if args.shared_link else 1)
            t_c = t_c0 * M / n if args.scaling == "strong" else t_c0
            times[i, n, rate] = run_s(table, r, n, steps, t_c, alpha, beta, args.overlap)
            line += "%14s" % fmt_duration(times[i, n, rate])
        print(line + "  " + text)
    labels = collections.Counter(rule_label(r) for r, _, _ in rows)

    def name(i):  # the label, with the setting where two rows share it
        r, text, _ = rows[i]
        return rule_label(r) + (" [%s]" % text if labels[rule_label(r)] > 1 else "")
    print("fastest to the target:")
    for n, rate in cols:
        ranked = sorted((times[i, n, rate], i) for i, (_, _, s) in enumerate(rows) if s is not None)
        if not ranked:
            print("  N=%d %s: no rule reached the target" % (n, rate))
            continue
        more = ", then %s (%s, %.2fx)" % (name(ranked[1][1]), fmt_duration(ranked[1][0]), ranked[1][0] / ranked[0][0]) \
            if len(ranked) > 1 else ""
        print("  N=%d %s: %s (%s)%s" % (n, rate, name(ranked[0][1]), fmt_duration(ranked[0][0]), more))


def check(args):
    runs = load_runs(args.dir)
    rates = sorted({r for r, _ in runs}, key=lambda r: -rate_bytes_per_s(r))
    names = list(dict.fromkeys(n for _, n in runs))
    if "unlimited" not in rates:
        sys.exit("error: %s has no 'unlimited' runs to take the compute time from; rerun netem_bench.sh with "
                 "--rates 'unlimited ...'" % args.dir)
    print("predicted vs measured mean step time (s) over steps 2..; compute = unshaped run's median (ms - comm_wait_ms), "
          "bytes = the trainer's mean comm_bytes_sent; all ranks share the link, so a rank's share of it is rate / N")
    w = max([11] + [len(n) for n in names])
    print("%-10s %-*s %10s %10s %8s" % ("rate", w, "config", "predicted", "measured", "ratio"))
    for rate in rates:
        if rate == "unlimited":
            continue
        for name in names:
            if (rate, name) not in runs or ("unlimited", name) not in runs:
                continue
            base, r = runs["unlimited", name], runs[rate, name]
            n = r["world"]
            beta = rate_bytes_per_s(rate) / n
            # the measured bytes already include the ring's 2 (N-1)/N factor: time = bytes / beta, plus alphas
            pred = base["compute"] + r["sent"] / beta + 2 * (n - 1) * args.alpha_us * 1e-6
            print("%-10s %-*s %10.3f %10.3f %7.2fx" % (rate, w, name, pred, r["step"], r["step"] / pred))


def main():
    ap = OneLineParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("project", help="project to the paper's settings", allow_abbrev=False)
    p.add_argument("--alpha-us", type=finite, default=5.0, help="per-message latency, microseconds [5]")
    p.add_argument("--link-gbit", type=finite, default=200.0, help="per-rank link bandwidth, Gbit/s [200]")
    p.add_argument("--gpus-per-node", type=int, default=1, help="ranks sharing one link [1]; 8 for one NIC per 8-GPU node")
    p.add_argument("--peak-tflops", type=finite, default=989.0, help="peak dense bf16 TFLOP/s per GPU [989, H100 SXM]")
    p.add_argument("--mfu", type=finite, default=0.4, help="model FLOP utilisation assumed [0.4]")
    p.add_argument("--overlap", type=finite, default=0.0,
                   help="share of the gradient all-reduce (of every rule's per-bucket collectives) hidden [0]")
    p.add_argument("--ranks", type=int, nargs="+", default=[32, 64])
    c = sub.add_parser("check", help="fit on netem_bench.sh's unshaped runs, predict its shaped ones", allow_abbrev=False)
    c.add_argument("dir")
    c.add_argument("--alpha-us", type=finite, default=50.0, help="per-message latency over loopback TCP [50]")
    t = sub.add_parser("time-to-loss", help="time to a target loss per rule, rank count and link rate", allow_abbrev=False)
    t.add_argument("--steps-to-target", required=True, metavar="FILE",
                   help="rule<TAB>setting<TAB>steps (or 'not reached') lines; # comments")
    t.add_argument("--compute-ms", type=finite, required=True,
                   help="measured forward+backward+update ms of one step on --measured-ranks ranks")
    t.add_argument("--measured-ranks", type=int, default=4, help="ranks the steps and the compute were measured on [4]")
    t.add_argument("--model", default="d4c64h4t64v4096", help="GPT-2 spec of the runs [d4c64h4t64v4096: study_regime's]")
    t.add_argument("--ranks", type=int, nargs="+", default=[4, 32], help="rank counts to project to [4 32]")
    t.add_argument("--rates", nargs="+", default=["1gbit", "100mbit", "10gbit"],
                   help="link rates, <number>kbit|mbit|gbit [1gbit 100mbit 10gbit]")
    t.add_argument("--shared-link", action="store_true",
                   help="each rate is the total of all ranks, as netem_bench.sh's shaped loopback (default: per rank)")
    t.add_argument("--scaling", choices=("strong", "weak"), default="strong",
                   help="strong: the global batch kept, compute x measured-ranks / N; weak: each rank's batch kept")
    t.add_argument("--alpha-us", type=finite, default=50.0, help="per-message latency, microseconds [50]")
    t.add_argument("--overlap", type=finite, default=0.0, help="share of the per-bucket collectives hidden [0]")
    args = ap.parse_args()
    for k in ("link_gbit", "peak_tflops", "mfu", "gpus_per_node", "compute_ms", "measured_ranks"):
        if getattr(args, k, 1) <= 0:
            sys.exit("error: --%s must be > 0" % k.replace("_", "-"))
    if getattr(args, "alpha_us", 0) < 0:
        sys.exit("error: --alpha-us must be >= 0")
    if any(n < 1 for n in getattr(args, "ranks", [1])):
        sys.exit("error: --ranks must be integers >= 1")
    for rate in getattr(args, "rates", []):
        if not RATE_RE.fullmatch(rate) or rate_bytes_per_s(rate) <= 0:
            sys.exit("error: --rates entry '%s' is not <number>kbit|mbit|gbit (e.g. 100mbit)" % rate)
    if getattr(args, "overlap", 0) < 0 or getattr(args, "overlap", 0) > 1:
        sys.exit("error: --overlap must be in [0, 1]")
    try:
        {"project": project, "check": check, "time-to-loss": time_to_loss}[args.cmd](args)
        sys.stdout.flush()
    except BrokenPipeError:  # a reader that went away (| head): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

if __name__ == "__main__":
    main()
