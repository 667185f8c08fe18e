// tokenizer/extract_llama.mjs NPM_DIR OUT_DIR llama2|llama3 - writes the vocabulary and merges baked into
// llama-tokenizer-js@1.2.2 (llama2) or llama3-tokenizer-js@1.2.0 (llama3) as two plain files the C loader
// (tokenizer/bpe_load.c) reads:
//   OUT_DIR/vocab.txt   one token per line, line i = id i, spelled as the package spells it (UTF-8): Llama 3 in
//                       GPT-2's byte alphabet (128000 lines; the 256 special tokens are not listed, bpe_load.c
//                       appends them as the package does), Llama 2 as SentencePiece pieces (U+2581 for space,
//                       <0xNN> byte-fallback tokens, <unk> <s> </s>; 32000 lines). No token holds '\n' (the
//                       package itself splits its vocabulary on '\n').
//   OUT_DIR/merges.txt  one merge per line in priority order: "left right result" ids.
// The data comes from the package's own decoded tables (tokenizer.vocabById / .merges), so the unpacking of
// its base64 and 17-bit packing is the package's. Checks: counts, every merge's parts and result exist, merge
// priorities strictly increase. Deterministic; files are written through temp names and renamed.
// Not for: tokenizing (tokenizer/bpe*.c does that).
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [npmDir, outDir, kind] = process.argv.slice(2);
const die = (msg) => { console.error(`error: extract_llama.mjs: ${msg}`); process.exit(1); };
if (!npmDir || !outDir || !['llama2', 'llama3'].includes(kind))
  die('usage: node tokenizer/extract_llama.mjs NPM_DIR OUT_DIR llama2|llama3');

const spec = kind === 'llama3'
  ? { file: 'llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js', nVocab: 128000, nMerges: 280147,
      nSpecial: 256 }
  : { file: 'llama-tokenizer-js/llama-tokenizer.js', nVocab: 32000, nMerges: 61249, nSpecial: 0 };
const modPath = path.resolve(npmDir, spec.file);
if (!fs.existsSync(modPath)) die(`${modPath} is missing; run scripts/fetch_data.sh`);
const tok = (await import(pathToFileURL(modPath).href)).default;

const vocab = tok.vocabById.slice(0, tok.vocabById.length - spec.nSpecial);
if (vocab.length !== spec.nVocab) die(`${kind}: expected ${spec.nVocab} base tokens, found ${vocab.length}`);
const byString = new Map();
vocab.forEach((s, i) => {
  if (s.includes('\n') || s.length === 0) die(`${kind}: token ${i} is empty or holds a line break`);
  if (byString.has(s)) die(`${kind}: token ${i} repeats token ${byString.get(s)}`);
  byString.set(s, i);
});
const lines = [];
let lastPrio = 0;
for (const [key, prio] of tok.merges) {
  const sp = key.indexOf(' ');
  const a = key.slice(0, sp), b = key.slice(sp + 1);
  if (sp <= 0 || b.includes(' ')) die(`${kind}: merge "${key}" does not split into two tokens`);
  const ia = byString.get(a), ib = byString.get(b), im = byString.get(a + b);
  if (ia === undefined || ib === undefined || im === undefined) die(`${kind}: merge "${key}" names unknown tokens`);
  if (!(prio > lastPrio)) die(`${kind}: merge priorities are not increasing at "${key}"`);
  lastPrio = prio;
  lines.push(`${ia} ${ib} ${im}`);
}
// The package keys merges by string, so a repeated pair would keep only its last priority; none repeats.
if (lines.length !== spec.nMerges) die(`${kind}: expected ${spec.nMerges} merges, found ${lines.length}`);

fs.mkdirSync(outDir, { recursive: true });
const write = (name, text) => {
  const p = path.join(outDir, name);
  fs.writeFileSync(p + '.tmp', text);
  fs.renameSync(p + '.tmp', p);
};
write('vocab.txt', vocab.join('\n') + '\n');
write('merges.txt', lines.join('\n') + '\n');
console.error(`${kind}: ${vocab.length} tokens, ${lines.length} merges -> ${outDir}`);
