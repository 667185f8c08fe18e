#!/usr/bin/env bash
# scripts/bench_tokenizer.sh [DATA_DIR] [RUNS] - GPT-2 encoding speed of `tok` against js-tiktoken (pure JS) and
# tiktoken (Rust compiled to WASM) under node, on the default corpus (all speeches in DATA_DIR/sotu/txt
# concatenated, about 10.8 MB). Checks that all three produce identical ids, prints tokens/s for each (median of
# RUNS timed encodes, default 3; single-threaded, tokenizer load not timed, tok with a cold piece cache each
# run) and the ratios, then the throughput of `tok shards` (files in, shards out) with 1 and 2 threads.
# Then Llama 3: `tok encode --model llama3` against llama3-tokenizer-js (pure JS, fetched by fetch_data.sh) on
# the same corpus, ids compared, tokens/s for both (the JS package takes about 20 s a run).
# js-tiktoken and tiktoken are fetched by `scripts/fetch_data.sh --bench` into DATA_DIR/npm (no global install).
# Not for: correctness testing (make test).
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-data}"
runs="${2:-3}"
[ -x ./tok ] || make tok >/dev/null
scripts/fetch_data.sh --bench "$data" 2>/dev/null || scripts/fetch_data.sh --bench "$data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus="$tmp/corpus.txt"
cat "$data"/sotu/txt/*.txt >"$corpus"
echo "corpus: $(wc -c <"$corpus") bytes from $(ls "$data"/sotu/txt/*.txt | wc -l) files; $runs timed runs each"

./tok encode --data "$data" --bench "$runs" <"$corpus" >"$tmp/tok.ids" 2>"$tmp/tok.log"
tok_tps=$(sed -n 's/.* s, \([0-9]*\) tokens\/s.*/\1/p' "$tmp/tok.log")

node - "$data/npm/node_modules" "$corpus" "$tmp" "$runs" >"$tmp/node.log" <<'EOF'
// Times encode() of js-tiktoken and tiktoken (WASM) on the corpus; writes each one's ids for comparison.
const [modulesArg, corpusPath, outDir, runsArg] = process.argv.slice(2);
const fs = require('fs');
const path = require('path');
const modules = path.resolve(modulesArg);
const text = fs.readFileSync(corpusPath, 'utf8');
const runs = Number(runsArg);
function bench(name, encode) {
  const ids = encode(text); // warm-up run (JIT, WASM instantiation), also the output
  const times = [];
  for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint();
    encode(text);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  times.sort((a, b) => a - b);
  const med = times[Math.floor(runs / 2)];
  fs.writeFileSync(path.join(outDir, name + '.ids'), Array.from(ids).join(' ') + '\n');
  console.log(`${name} ${Math.round(ids.length / med)} ${med.toFixed(3)}`);
}
const { getEncoding } = require(path.join(modules, 'js-tiktoken'));
const js = getEncoding('gpt2');
bench('js-tiktoken', (t) => js.encode(t));
const { get_encoding } = require(path.join(modules, 'tiktoken'));
const wasm = get_encoding('gpt2');
bench('tiktoken', (t) => wasm.encode(t));
// Where Unicode versions and regex engines disagree on \s (U+0085, U+180E, U+FEFF, U+001C..U+001F, ...):
// one text of such cases, its tiktoken ids compared with tok's below.
const odd = ['\u0085', '\u180e', '\ufeff', '\u001c', '\u001f', '\u00a0', '\u2028', '\u3000', '\u200b', '\u000b',
  '\u000c', '\u0301', '\u2066', '\u1680', '\u202f'];
const edge = odd.flatMap((c) => [`a${c}b`, `a ${c} b`, `${c}${c} x`, `  ${c}`, `x${c}  y`, `1${c}2`, `${c}'s`]).join('|');
fs.writeFileSync(path.join(outDir, 'edge.txt'), edge);
fs.writeFileSync(path.join(outDir, 'edge.tiktoken.ids'), Array.from(wasm.encode(edge)).join(' ') + '\n');
wasm.free();
EOF
./tok encode --data "$data" <"$tmp/edge.txt" >"$tmp/edge.tok.ids"

status=0
for name in js-tiktoken tiktoken; do
    if ! cmp -s "$tmp/tok.ids" "$tmp/$name.ids"; then
        echo "MISMATCH: tok and $name give different ids for the corpus"
        status=1
    fi
done
if ! cmp -s "$tmp/edge.tok.ids" "$tmp/edge.tiktoken.ids"; then
    echo "MISMATCH: tok and tiktoken differ on the Unicode whitespace edge cases"
    status=1
fi
[ "$status" = 0 ] && echo "outputs: tok, js-tiktoken and tiktoken give identical ids ($(wc -w <"$tmp/tok.ids") tokens;" \
    "tok and tiktoken also on $(wc -w <"$tmp/edge.tok.ids") tokens of Unicode whitespace edge cases)"
js_tps=$(awk '$1 == "js-tiktoken" {print $2}' "$tmp/node.log")
wasm_tps=$(awk '$1 == "tiktoken" {print $2}' "$tmp/node.log")
printf '%-26s %12s tokens/s\n' "tok encode (C, 1 thread)" "$tok_tps" "js-tiktoken (node)" "$js_tps" \
    "tiktoken (WASM, node)" "$wasm_tps"
awk -v a="$tok_tps" -v b="$js_tps" -v c="$wasm_tps" \
    'BEGIN { printf "ratios: tok / tiktoken = %.2fx, tok / js-tiktoken = %.2fx\n", a / c, a / b }'

for threads in 1 2; do
    best=""
    for r in $(seq "$runs"); do
        rm -rf "$tmp/shards"
        ./tok shards --out "$tmp/shards" --name bench --threads "$threads" --data "$data" "$data/sotu/txt" \
            2>/dev/null | sed -n 's/.* s, \([0-9]*\) tokens\/s.*/\1/p'
    done | sort -n | awk -v t="$threads" -v n="$runs" '{ v[NR] = $1 } END { printf "tok shards --threads %d: %d tokens/s (median of %d, files in, shards out)\n", t, v[int((NR + 1) / 2)], n }'
done
# Llama 3: tok against llama3-tokenizer-js on the corpus (special-token text left as text).
cp "$corpus" "$tmp/l3.txt"
./tok encode --model llama3 --data "$data" --bench "$runs" <"$tmp/l3.txt" >"$tmp/l3.tok.ids" 2>"$tmp/l3.log"
l3_tps=$(sed -n 's/.* s, \([0-9]*\) tokens\/s.*/\1/p' "$tmp/l3.log")
node --input-type=module - "$data/npm/llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js" \
    "$tmp/l3.txt" "$tmp/l3.js.ids" "$runs" >"$tmp/l3.node.log" <<'EOF'
import fs from 'fs';
import { pathToFileURL } from 'url';
const [mod, corpusPath, outPath, runsArg] = process.argv.slice(2);
const tok = (await import(pathToFileURL(mod).href)).default;
const text = fs.readFileSync(corpusPath, 'utf8');
const opts = { bos: false, eos: false, specialTokenRegex: /(?!)/g };
const ids = tok.encode(text, opts); // warm-up, also the output
const times = [];
for (let r = 0; r < Number(runsArg); r++) {
  const t0 = process.hrtime.bigint();
  tok.encode(text, opts);
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
times.sort((a, b) => a - b);
fs.writeFileSync(outPath, ids.join(' ') + '\n');
console.log(Math.round(ids.length / times[Math.floor(times.length / 2)]));
EOF
l3_js_tps=$(cat "$tmp/l3.node.log")
if cmp -s "$tmp/l3.tok.ids" "$tmp/l3.js.ids"; then
    echo "llama3: tok and llama3-tokenizer-js give identical ids ($(wc -w <"$tmp/l3.tok.ids") tokens," \
        "$(wc -c <"$tmp/l3.txt") bytes)"
else
    echo "MISMATCH: tok --model llama3 and llama3-tokenizer-js give different ids"
    status=1
fi
printf '%-26s %12s tokens/s\n' "tok encode --model llama3" "$l3_tps" "llama3-tokenizer-js" "$l3_js_tps"
awk -v a="$l3_tps" -v b="$l3_js_tps" 'BEGIN { printf "ratio: tok / llama3-tokenizer-js = %.2fx\n", a / b }'
exit "$status"
