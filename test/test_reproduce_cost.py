#!/usr/bin/env python3
"""test/test_reproduce_cost.py [DATA] - scripts/cost_model.py's formulas against hand-computed cases and the published
parameter counts of GPT-2 124M and Llama-2 7B; its time-to-loss mode on a small table and its refusals (bad or
repeated lines, non-UTF-8 files, nan and inf, abbreviated flags, a runs.tsv of `check` not netem_bench.sh's: one line
each, no traceback); then every update rule's bytes per step as the model computes them from the parameter table of d2c64h2t64 against the trainer's
own counters (comm_bytes_sent and its kinds in log.jsonl), each rule run for 6 steps on 2 and 3 ranks with settings
that walk through its phases (density warm-up, PowerSGD's dense start, 1-bit Adam's freeze, outer steps at H and at
the last step, SparseLoCo's first shared mask). Needs ./train_gpt, mpirun and DATA (default data; `make data`).
About 3-4 minutes on 2 cores. Prints "ok name" / "FAIL name: expected vs actual"; exits non-zero on any failure.
Not for: checking the projection against the paper (that is a report, not a test)."""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the temp folders' finally blocks run
spec = importlib.util.spec_from_file_location("cost_model", os.path.join(here, "..", "scripts", "cost_model.py"))
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)
fails = 0


def check(name, expected, actual, rel=1e-12):
    global fails
    if abs(expected - actual) <= rel * max(1.0, abs(expected)):
        print("ok", name)
    else:
        print("FAIL %s: expected %r, got %r" % (name, expected, actual))
        fails += 1


# 2 (N-1) alpha + 2 (N-1)/N S/beta = 6 us + 1.5 s
check("allreduce_alpha_beta", 1.500006, cm.ring_allreduce_s(1000, 4, 1e-6, 1000))
check("allreduce_one_rank_is_free", 0.0, cm.ring_allreduce_s(1e9, 1, 1e-6, 1.0))
# (N-1)/N * 800 / 100 = 6 s, plus 3 alphas of 2 s
check("allgather_alpha_beta", 12.0, cm.ring_allgather_s(800, 4, 2.0, 100))
check("bytes_dense", 6e6, cm.bytes_sent_dense(1e6, 4))
# K = 1e4: 2*4*1e4*3/4 = 60000, mask 1e6/8*3/4 = 93750
check("bytes_scape_d0.01", 153750.0, cm.bytes_sent_scape(1e6, 0, 0.01, 4))
# dense parts always travel: K = 0.1*1e6 + 1000
check("scape_k_keeps_dense", 101000.0, cm.scape_k(1e6, 1000, 0.1))
# all-reduce 4e6 B over 2 ranks at 1e6 B/s = 4 s, half hidden -> 1 + 2
check("step_dense_overlap", 3.0, cm.step_dense_s(1.0, 1e6, 2, 0.0, 1e6, overlap=0.5))
# payload 4e5 B -> 0.4 s; mask 125000 B -> 0.0625 s, hidden behind t_c = 1 s
check("step_scape_mask_hidden", 1.4, cm.step_scape_s(1.0, 1e6, 0, 0.1, 2, 0.0, 1e6))
# with t_c = 0.01 s, 0.0525 s of the mask all-gather shows
check("step_scape_mask_exposed", 0.4625, cm.step_scape_s(0.01, 1e6, 0, 0.1, 2, 0.0, 1e6))
check("step_scape_topk_added", 1.65, cm.step_scape_s(1.0, 1e6, 0, 0.1, 2, 0.0, 1e6, t_topk=0.25))
# d = 1 moves the same payload as dense, plus the mask
check("scape_d1_payload_equals_dense", cm.bytes_sent_dense(1e6, 4) + 1e6 / 8 * 3 / 4, cm.bytes_sent_scape(1e6, 0, 1.0, 4))
# published totals: GPT-2 small 124,439,808; Llama-2 7B 6,738,415,616
check("gpt2_124M_params", 124439808, sum(cm.gpt2_params(12, 768)))
check("llama2_7B_params", 6738415616, sum(cm.llama_params(32, 4096, 11008, 32, 32, 32000)))
check("rate_parse_mbit", 500e6 / 8, cm.rate_bytes_per_s("500mbit"))


def check_true(name, cond, detail):
    global fails
    if cond:
        print("ok", name)
    else:
        print("FAIL %s: %s" % (name, detail))
        fails += 1


# --- the parameter table and the pieces of the rules' formulas -------------------------------------------------------
P124 = sum(cm.numel(s) for s in cm.gpt2_spec_table("d12"))
check("gpt2_table_is_the_trainers_padded", 124439808 + (50304 - 50257) * 768, P124)
check("llama_table_matches_llama_params", sum(cm.llama_params(16, 1536, 4096, 16, 8, 32000)),
      sum(cm.numel(s) for s in cm.llama_table(16, 1536, 4096, 16, 8, 32000)))
# slices of 10, 30, 60 elements at offsets 0, 10, 40 (P 100): rank 1's boundary is the start closest to 50 (40)
toy = (cm.Slice("a", (10,), 0), cm.Slice("b", (3, 10), 1), cm.Slice("c", (6, 10), 1))
check_true("owner_ranges_split_at_the_closest_slice_start", cm.owner_ranges(toy, 2) == [(0, 40), (40, 100)],
           "expected [(0, 40), (40, 100)], got %r" % cm.owner_ranges(toy, 2))
check("slice_k_at_least_one", 1, cm.slice_k(0.01, 30))
check("slice_k_floor", 6, cm.slice_k(0.1, 60))
check("demo_split_largest_divisor", 48, cm.demo_split(96, 50))
check("demo_split_prime_is_one", 1, cm.demo_split(131, 64))
r = cm.rule_settings("scape", "--density 0.01 --density-warmup 4")
# d(t) = 1 * 0.01^((t-1)/4): step 3 is 0.1, step 5 on the target
check("density_warmup_geometric", 0.1, cm.density_at(r, 3), rel=1e-12)
check("density_after_warmup", 0.01, cm.density_at(r, 5))
check_true("settings_shorthand_is_the_flags", cm.rule_settings("sparseloco", "30 shared") ==
           cm.rule_settings("sparseloco", "--sparseloco-h 30 --sparseloco-mask shared"), "shorthand differs")
for label, rule, bad, why in (("zero", "scape", "--zero 1", "--zero"),
                              ("not_a_number", "scape", "--density x", "not a number"),
                              ("out_of_range", "scape", "--density 2", "outside"),
                              ("bad_choice", "sparseloco", "--sparseloco-mask both", "own|shared")):
    try:
        cm.rule_settings(rule, bad, "here")
        check_true("settings_refused_" + label, False, "'%s' was accepted" % bad)
    except ValueError as e:
        check_true("settings_refused_" + label, str(e).startswith("here: ") and why in str(e), "message %r" % str(e))
# a DiLoCo step sends nothing but control between outer steps (the loss vote and its norm: 2 x 2 doubles, 16 (N-1)
# bytes each); its outer step all-reduces 4P
tab2 = cm.gpt2_spec_table("d2c64h2t64")
P2 = sum(cm.numel(s) for s in tab2)
dl = cm.rule_settings("diloco", "--diloco-h 30")
check("diloco_inner_step_is_control_only", 32, cm.counted_bytes(cm.step_collectives(tab2, dl, 2, 29), 2)["total"])
check("diloco_outer_step_all_reduces_4P", 2 * 4 * P2 * 3 // 4 + 2 * 16 * 3,
      cm.counted_bytes(cm.step_collectives(tab2, dl, 4, 30), 4)["total"])
# times: compute 1 s; an exposed all-reduce of 4P at beta = 4P B/s over 2 ranks takes 1 s; amortized over H = 2 steps
# of which one has it: the run of 4 steps takes 4 + 2 = 6 s (alpha 0, control messages of 0 s at beta this large
# are not: 16 bytes / 4P B/s; compare with a tolerance)
dl2 = cm.rule_settings("diloco", "--diloco-h 2")
check("diloco_run_amortizes_the_outer_step", 6.0, cm.run_s(tab2, dl2, 2, 4, 1.0, 0.0, 4.0 * P2), rel=1e-5)
# a run's time, computed phase by phase, equals the sum of its steps one by one (warm-ups, outer steps, the last step)
mism = []
for o, st in (("scape", "--density 0.01 --density-warmup 7 --density-dense-steps 3"), ("powersgd", "--powersgd-start 5"),
              ("onebit-adam", "-"), ("sparseloco", "4 shared"), ("diloco", "3")):
    rr = cm.rule_settings(o, st)
    for steps, last in ((17, None), (17, 17), (40, 43)):
        a = cm.run_s(tab2, rr, 3, steps, 0.01, 1e-5, 1e7, 0.3, last)
        r1 = dict(rr, steps=rr["steps"] or last or steps)
        b = sum(cm.colls_step_s(cm.step_collectives(tab2, r1, 3, t, last), 0.01, 3, 1e-5, 1e7, 0.3)
                for t in range(1, steps + 1))
        if abs(a - b) > 1e-9 * b:
            mism.append("%s %s steps %d last %s: %r vs %r" % (o, st, steps, last, a, b))
check_true("run_profile_equals_step_by_step", not mism, "; ".join(mism[:2]))
# the mask all-gather hides behind compute, the payload does not (overlap 0)
sc = cm.rule_settings("scape", "--density 0.1 --scape-mask-coding none")
cols = cm.step_collectives(tab2, sc, 2, 5)
hidden = cm.colls_step_s([c for c in cols if c.hide != "behind"], 10.0, 2, 0.0, 1e6)
check("scape_mask_hidden_behind_compute", hidden, cm.colls_step_s(cols, 10.0, 2, 0.0, 1e6))
# topk-ef's and SparseLoCo's own all-gathers grow with N, the shared mask's payload does not
tk = cm.rule_settings("topk-ef", "--density 0.01")
b = [cm.counted_bytes(cm.step_collectives(tab2, tk, n, 5), n)["allgather"] for n in (2, 4)]
check("topk_ef_sent_grows_with_N", 3.0, b[1] / b[0], rel=1e-6)

# --- time-to-loss: a small table; the cheaper rule wins on the thin link, the one with fewer steps on the fat one ---
here_root = os.path.join(here, "..")
tmpd = tempfile.mkdtemp()
try:
    tsv = os.path.join(tmpd, "steps.tsv")
    with open(tsv, "w") as f:
        f.write("# rule\tsetting\tsteps\nadams\t-\t1000\nsparseloco\t--sparseloco-h 30\t1500\ndemo\t-\tnot reached\n")
    res = subprocess.run([sys.executable, os.path.join(here_root, "scripts", "cost_model.py"), "time-to-loss",
                          "--steps-to-target", tsv, "--compute-ms", "100", "--model", "d2c64h2t64",
                          "--rates", "100mbit", "100gbit", "--ranks", "4"], capture_output=True, text=True)
    out = res.stdout
    check_true("ttl_runs", res.returncode == 0, "status %d: %s" % (res.returncode, res.stderr.strip()))
    check_true("ttl_thin_link_wins_sparseloco", "N=4 100mbit: sparseloco H30 own" in out, out[-600:])
    check_true("ttl_fat_link_wins_fewer_steps", "N=4 100gbit: adams" in out, out[-600:])
    check_true("ttl_not_reached_shown", "not reached" in out, out[-600:])
    for content, why, line in (("adams\t-\n", "3 tab-separated", 1), ("adams\t-\tmany\n", "not a positive integer", 1),
                               ("bogus\t-\t10\n", "unknown rule", 1), ("scape\t--densty 0.1\t10\n", "not a trainer flag", 1),
                               ("scape\t0.1\t10\nscape\t--density 0.1\t20\n", "the same rule and setting as line 1", 2),
                               (b"adams\t-\t10\n\xff\n", "not UTF-8", 2)):
        with open(tsv, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        res = subprocess.run([sys.executable, os.path.join(here_root, "scripts", "cost_model.py"), "time-to-loss",
                              "--steps-to-target", tsv, "--compute-ms", "100"], capture_output=True, text=True)
        err = res.stderr.strip()
        check_true("ttl_refuses_" + why.split(" as ")[0].replace(" ", "_").replace("-", "_"),
                   res.returncode != 0 and err.count("\n") == 0 and err.startswith("error: %s:%d: " % (tsv, line))
                   and why in err, "status %d, stderr %r" % (res.returncode, err))
    # arguments: nan and inf, abbreviations (a typo of a flag) and unknown subcommands in one line, status 2
    with open(tsv, "w") as f:
        f.write("adams\t-\t10\n")
    for label, args in (("nan", ["time-to-loss", "--steps-to-target", tsv, "--compute-ms", "nan"]),
                        ("inf", ["project", "--alpha-us", "inf"]), ("abbreviated", ["project", "--rank", "8"]),
                        ("subcommand", ["projcet"])):
        res = subprocess.run([sys.executable, os.path.join(here_root, "scripts", "cost_model.py")] + args,
                             capture_output=True, text=True)
        err = res.stderr.strip()
        check_true("args_refuse_" + label, res.returncode == 2 and err.count("\n") == 0 and err.startswith("error: ")
                   and "Traceback" not in err, "status %d, stderr %r" % (res.returncode, err))
    # check: a runs.tsv not netem_bench.sh's, a run without its log: one line naming them
    for label, content, why in (("short", "unlimited\tadams\n", "runs.tsv:1: expected rate"),
                                ("no_log", "unlimited\tadams\t%s\t0\n" % os.path.join(tmpd, "gone"), "gone/log.jsonl (")):
        with open(os.path.join(tmpd, "runs.tsv"), "w") as f:
            f.write(content)
        res = subprocess.run([sys.executable, os.path.join(here_root, "scripts", "cost_model.py"), "check", tmpd],
                             capture_output=True, text=True)
        err = res.stderr.strip()
        check_true("check_refuses_" + label, res.returncode == 1 and err.count("\n") == 0 and why in err,
                   "status %d, stderr %r" % (res.returncode, err))
finally:
    shutil.rmtree(tmpd)

# --- project: the first table's rows as docs/reproduction.md section 3 lists them, then every rule per model ---------
res = subprocess.run([sys.executable, os.path.join(here_root, "scripts", "cost_model.py"), "project"],
                     capture_output=True, text=True)
lines = res.stdout.splitlines()
check_true("project_first_table_kept", res.returncode == 0 and any(
    l.split()[:9] == ["GPT-345M", "32", "355", "0.088", "0.198", "0.100", "0.090", "1.99x", "2.21x"] for l in lines),
    "no 'GPT-345M 32 355 0.088 0.198 0.100 0.090 1.99x 2.21x' row: %s" % res.stdout[:400])
labels = [cm.rule_label(cm.rule_settings(o, st)) for o, st in cm.RULE_SETTINGS]
rows = [l.strip() for l in lines if l.startswith("  ") and any(l.strip().startswith(x + " ") for x in labels)]
check_true("project_every_rule_per_model", len(rows) == len(labels) * len(cm.PAPER_MODELS),
           "%d rule rows, expected %d x %d" % (len(rows), len(labels), len(cm.PAPER_MODELS)))

# --- every rule's bytes per step against the trainer's counters -------------------------------------------------------
data = sys.argv[1] if len(sys.argv) > 1 else "data"
os.chdir(here_root)
if not os.access("./train_gpt", os.X_OK) or not shutil.which("mpirun"):
    check_true("trainer_present", False, "./train_gpt or mpirun missing; run 'make train_gpt' (and 'make deps')")
    sys.exit(1)
STEPS = 6
RUNS = [("adams", "-"),
        ("scape", "--density 0.01 --density-warmup 3 --scape-mask-coding none"),  # exact masks, the warm-up's K_t
        ("scape", "--density 0.1"),                           # coded masks: the payload exact, the mask at most the bound
        ("topk-ef", "--density 0.01 --density-warmup 3"),
        ("powersgd", "--powersgd-rank 4 --powersgd-start 2"),  # steps 1-2 dense
        ("onebit-adam", "-"),                                  # F = 15% of 6 steps = 1
        ("demo", "-"),
        ("diloco", "--diloco-h 4"),                             # outer steps at 4 and at the last, 6
        ("sparseloco", "--sparseloco-h 4"),
        ("sparseloco", "--sparseloco-h 4 --sparseloco-mask shared")]  # the first outer step gathers two masks
KINDS = (("total", "comm_bytes_sent"), ("allreduce", "comm_allreduce_bytes"),
         ("reduce_scatter", "comm_reduce_scatter_bytes"), ("allgather", "comm_allgather_bytes"),
         ("control", "comm_control_bytes"))
tmpd = tempfile.mkdtemp()
try:
    for n in (2, 3):
        for rule, setting in RUNS:
            r = cm.rule_settings(rule, setting)
            name = "bytes_%s_N%d" % (cm.rule_label(r).replace(" ", "_"), n)
            out = os.path.join(tmpd, name)
            cmd = ["env", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "timeout", "120", "mpirun",
                   "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n), "./train_gpt",
                   "--model", "d2c64h2t64", "--data", data, "--batch", "2", "--seq", "32", "--steps", str(STEPS),
                   "--out", out, "--eval-every", "0", "--eval-batches", "1", "--sample-every", "0", "--threads", "1",
                   "--optimizer", rule] + ([] if setting == "-" else setting.split())
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            try:
                output = proc.communicate()[0]
            except BaseException:  # SIGTERM or Ctrl-C: mpirun forwards SIGTERM to its ranks; wait for them to end
                proc.terminate()
                proc.wait()
                raise
            if proc.returncode != 0:
                check_true(name, False, "the run failed (status %d): %s" % (proc.returncode, output.strip()[-300:]))
                continue
            ev = [json.loads(l) for l in open(os.path.join(out, "log.jsonl")) if l.strip()]
            steps = [e for e in ev if e["event"] == "train"]
            bad = [] if len(steps) == STEPS else ["%d train events, expected %d" % (len(steps), STEPS)]
            for e in steps:
                colls = cm.step_collectives(tab2, r, n, e["step"], last=STEPS)
                want = cm.counted_bytes(colls, n)
                coded = any(c.bound for c in colls)  # a coded mask: its size is data; the formula gives the bound
                for k, key in KINDS:
                    if coded and k in ("total", "allgather"):
                        if not 0 < e[key] <= want[k]:
                            bad.append("step %d %s %d, expected 1..%d (the coded mask's bound)" % (e["step"], key, e[key], want[k]))
                    elif e[key] != want[k]:
                        bad.append("step %d %s: expected %d, counted %d" % (e["step"], key, want[k], e[key]))
            check_true(name, not bad, "; ".join(bad[:3]))
finally:
    shutil.rmtree(tmpd)
sys.exit(1 if fails else 0)
