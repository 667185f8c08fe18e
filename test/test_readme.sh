#!/usr/bin/env bash
# test/test_readme.sh - every command in README.md's shell blocks, run in a scratch folder that links the repository's
# files (so outputs land in the scratch folder's own out/), at tiny sizes: training commands get a few steps (their
# batch and sequence as written), a whole-suite or GPU build (`make test`, `make cuda`) is checked by `make -n`, the cluster recipes run
# their DRY_RUN as the README writes them, and the README's data files (task sets, your own text) are stood in for by
# the test's own. The table below names each README command and how it runs here; a README command the table lacks,
# or a table row the README no longer has, fails, so the README cannot drift from the program. About 90 s.
# Not for: what the commands' results mean (each has its own tests).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$repo"/* "$repo"/.[!.]*; do
    n=${f##*/}; [ "$n" = out ] || [ "$n" = .git ] || ln -s "$f" "$tmp/$n"
done
mkdir -p "$tmp/out"
# stand-ins for the README's data files
cp test/eval/hellaswag.jsonl "$tmp/hellaswag_val.jsonl"
cp test/eval/piqa.jsonl "$tmp/valid.jsonl"; cp test/eval/piqa-labels.lst "$tmp/valid-labels.lst"
ln -s "$repo/data/sotu/txt" "$tmp/my_texts"

tiny="--eval-every 0 --eval-batches 1 --sample-every 0"  # a few steps; batch and sequence as written
/usr/bin/python3 - "$repo/README.md" "$tmp" "$tiny" <<'EOF'
import os, re, subprocess, sys, time
readme, tmp, tiny = sys.argv[1:4]
# README command (continuation lines joined, comment dropped) -> (how it runs here, environment)
#   "=":  as written;  "+":  as written with the tiny flags appended;  anything else: that command instead
steps = {"--steps 2000": "--steps 4", "--steps 3000": "--steps 6", "--steps 500": "--steps 3", "ckpt_3000": "ckpt_6"}
TABLE = [
    ("scripts/install_deps.sh && make train", "=",
     {"STEPS": "3", "MODEL": "d2c32h2", "BATCH": "2", "SEQ": "32", "EVAL_EVERY": "0", "EVAL_BATCHES": "1", "SAMPLE_EVERY": "0"}),
    ("make test", "make -n test", {}),
    ("./train_gpt --model d12c128h4t128v4096 --steps 2000 --out out/small", "+", {}),
    ("./train_gpt --resume latest --out out/small --steps 3000", "+", {}),
    ("./train_gpt --help", "=", {}),
    ("mpirun --allow-run-as-root --oversubscribe -np 4 ./train_gpt --model d4c64h4t64v4096 --batch 4 --seq 64 "
     "--optimizer scape --density 0.01 --density-warmup 200 --steps 2000 --out out/scape", "+", {"OMP_NUM_THREADS": "1"}),
    ("make train_llama && ./train_llama --model l4c128h4kv2v4096 --steps 500 --out out/llama", "+", {}),
    ("./tok train --vocab 8192 --out my_vocab --val-percent 5 my_texts/", "=", {}),
    ("./tok shards --model my_vocab --out my_shards --name my --val-percent 5 my_texts/", "=", {}),
    ("./train_gpt --model d4c64h4t64v8192 --seq 64 --tokenizer my_vocab --train 'my_shards/my_train_*' "
     "--val 'my_shards/my_val_*' --out out/mine", "+ --steps 3", {}),
    ("./train_gpt --eval-only --resume out/small/ckpt_3000 --out out/small "
     "--eval-task hellaswag=hellaswag_val.jsonl,piqa=valid.jsonl", "=", {}),
    ("make export_gguf && ./export_gguf --model out/small/ckpt_3000 --out out/small.gguf --type f16", "=", {}),
    ('make llama-cpp && node scripts/gguf_generate.mjs out/small.gguf "The state of the Union" 32', "=", {}),
    ("make reproduce-gpt", "=", {"QUICK": "1"}),
    ("scripts/study_regime.sh plan small", "=", {}),
    ("DRY_RUN=1 DATA_DIR=/shards/owt scripts/cluster/gpt345m.sh", "=", {}),
    ("DRY_RUN=1 RECIPE=llama500m OPTIMIZER=scape DENSITY=0.1 DATA_DIR=/shards/slimpajama scripts/cluster/slurm.sbatch",
     "=", {}),
    ("make cuda", "make -n cuda", {}),
]
cmds, block = [], None
lines = open(readme).read().split("\n")
i = 0
while i < len(lines):
    l = lines[i]
    if l.startswith("```"):
        block = l[3:] if block is None else None
    elif block == "sh" and l.strip():
        while l.endswith("\\"):
            i += 1
            l = l[:-1].rstrip() + " " + lines[i].strip()
        cmds.append(re.sub(r"\s+# .*$", "", l).strip())
    i += 1
known = [t[0] for t in TABLE]
fails = 0
for c in cmds:
    if c not in known:
        print("FAIL readme_command_is_tested: %r has no row in test/test_readme.sh's table" % c); fails += 1
for c in known:
    if c not in cmds:
        print("FAIL readme_table_is_current: the row %r is no longer in README.md" % c); fails += 1
if not fails:
    print("ok readme_commands_match_the_table (%d commands)" % len(cmds))
for c, how, env in TABLE:
    if c not in cmds: continue
    run = c
    for a, b in steps.items(): run = run.replace(a, b)
    if how.startswith("+"): run = run + " " + tiny + how[1:]
    elif how != "=": run = how
    t0 = time.time()
    p = subprocess.run(["bash", "-c", run], cwd=tmp, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    name = "readme: " + c[:70]
    if p.returncode == 0:
        print("ok %s (%.0f s)" % (name, time.time() - t0))
    else:
        tail = p.stdout.decode(errors="replace").strip().splitlines()[-3:]
        print("FAIL %s: status %d running %r: %s" % (name, p.returncode, run, " | ".join(tail))); fails += 1
sys.exit(1 if fails else 0)
EOF
