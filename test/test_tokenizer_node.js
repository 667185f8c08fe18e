// test/test_tokenizer_node.js DATA_DIR OUT_FILE [SEED] [MODEL] - writes test vectors made by node running the
// fetched reference package for MODEL: gpt2 (default) gpt-3-encoder (a JavaScript port of OpenAI's
// encoder.py), bpe4k the same package with its encoder.json and vocab.bpe replaced by DATA_DIR/bpe4k's (the
// vocabulary `tok train` learned; the package reads them from its own folder, so a copy of it in a temporary
// folder does), llama3 llama3-tokenizer-js (no BOS/EOS, special-token text left as text), llama2
// llama-tokenizer-js (no BOS, with its prefixed space). Seeded random texts mixing ASCII
// words, whitespace runs, digits, contractions (also upper-case), punctuation, accents, CJK, emoji, combining
// marks and other scripts, plus slices of the default corpus, plus invalid UTF-8 built around valid stretches.
// One line per case: "<bytes as hex>\t<items>", an item being an id or x<hex> (see below).
// build/test_tokenizer DATA_DIR --vectors OUT_FILE compares them with the C encoder.
// Characters where JavaScript's \s differs from the Unicode White_Space property (U+0085, U+FEFF, U+180E)
// are left out: there the JS packages, not OpenAI's or Meta's tiktoken, would be the odd one.
// Llama 2 has no invalid-UTF-8 cases here: it does not pre-tokenize, so stretches do not encode alone
// (test/test_tokenizer_llama.c checks its byte fallback).
'use strict';
const fs = require('fs');
const path = require('path');

const [dataDir, outFile, seedArg, modelArg] = process.argv.slice(2);
const model = modelArg || 'gpt2';
const refs = { gpt2: 'gpt-3-encoder/index.js', bpe4k: 'gpt-3-encoder/index.js', llama3: 'llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js',
  llama2: 'llama-tokenizer-js/llama-tokenizer.js' };
if (!dataDir || !outFile || !refs[model]) {
  console.error('usage: node test/test_tokenizer_node.js DATA_DIR OUT_FILE [SEED] [gpt2|bpe4k|llama2|llama3]');
  process.exit(2);
}
const refPath = path.resolve(dataDir, 'npm', refs[model]);
if (!fs.existsSync(refPath)) {
  console.error(`error: ${refPath} is missing; run \`make data\``);
  process.exit(1);
}

// mulberry32: small seeded generator so the cases are the same on every run
let seed = Number(seedArg || 20240520) >>> 0;
function rand() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const word = () => Array.from({ length: int(1, 12) }, () => pick(letters)).join('');
const longWord = () => Array.from({ length: int(60, 300) }, () => pick('abcdeeinrst')).join('');
const digits = () => Array.from({ length: int(1, 14) }, () => pick('0123456789')).join('');
const longDigits = () => Array.from({ length: int(64, 400) }, () => pick('0123456789')).join('');
const whitespace = ['  ', '   ', '\t', '\n', '\r\n', '\n\n', ' \t ', '\r', '\n   ', '    \n', '\u00a0', '\u3000', ' \u2003', '\f', '\v'];
const spacesRun = () => ' '.repeat(int(2, 90));
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "'VE", "'D", "\u2019s", "''", "'"];
const punct = ['!', '?', '.', ',', '...', '--', '(', ')', '"', ';', ':', '@#$', '<|', '|>', '<|endoftext|>', '{}', '[]', '//',
  '&amp;', '%', '*', '\\', '~`', '^_^', ',,,,', '!!!!!!', '-->', '====', '_', '\u2014', '\u00bf', '\u00ab\u00bb', '\u2026'];
const accents = ['\u00e9', '\u00f1', '\u00fc', '\u00c5', '\u00e7', 'na\u00efve', 'caf\u00e9', '\u00c9COLE', 'stra\u00dfe', '\u0142\u00f3d\u017a'];
const cjk = ['\u4e2d\u6587', '\u65e5\u672c\u8a9e', '\ud55c\uad6d\uc5b4', '\u6f22\u5b57\u30c6\u30b9\u30c8', '\u3053\u3093\u306b\u3061\u306f', '\u4f60\u597d\uff0c\u4e16\u754c\uff01'];
const emoji = ['\u{1F600}', '\u{1F680}', '\u{1F44D}\u{1F3FD}', '\u{1F468}\u200d\u{1F469}\u200d\u{1F467}', '\u{1F1EB}\u{1F1F7}', '\u2764\ufe0f', '\u{1F40D}\u{1F40D}'];
const combining = ['e\u0301', 'a\u0308', 'n\u0303', '\u0301', '\u0301\u0302', 'A\u030a', '\u0915\u093f', '\u0928\u092e\u0938\u094d\u0924\u0947'];
const scripts = ['\u041f\u0440\u0438\u0432\u0435\u0442', '\u0395\u03bb\u03bb\u03ac\u03b4\u03b1', '\u0645\u0631\u062d\u0628\u0627', '\u05e9\u05dc\u05d5\u05dd', '\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35'];
const numbers = ['\u00bd', '\u00b2', '\u0663\u0664', '\u216b', '3.14', '1,000', '10^9', '\u2460'];

const makers = [word, word, word, () => ' ' + word(), () => ' ' + word(), () => pick(whitespace), spacesRun, digits,
  () => ' ' + digits(), () => pick(contractions), () => pick(punct), () => ' ' + pick(punct), () => pick(accents),
  () => pick(cjk), () => pick(emoji), () => pick(combining), () => pick(scripts), () => ' ' + pick(scripts),
  () => pick(numbers), () => (rand() < 0.1 ? longWord() : word()), () => (rand() < 0.05 ? longDigits() : digits())];

const cases = [];
for (let i = 0; i < 400; i++) {
  const parts = int(1, 40);
  let s = '';
  for (let p = 0; p < parts; p++) s += pick(makers)();
  cases.push(s);
}
// whole-corpus flavour: slices of a few speeches, cut at character boundaries
const txtDir = path.join(dataDir, 'sotu', 'txt');
const files = fs.readdirSync(txtDir).filter((f) => f.endsWith('.txt')).sort();
for (let i = 0; i < 12; i++) {
  const text = fs.readFileSync(path.join(txtDir, pick(files)), 'utf8');
  const start = int(0, Math.max(0, text.length - 20000));
  cases.push(text.slice(start, start + 20000));
}

async function main() {
let encode;
if (model === 'gpt2') encode = require(refPath).encode;
else if (model === 'bpe4k') {
  const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'bpe4k-ref-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  for (const f of ['index.js', 'Encoder.js', 'package.json']) fs.copyFileSync(path.join(path.dirname(refPath), f), path.join(dir, f));
  for (const f of ['encoder.json', 'vocab.bpe']) {
    const from = path.resolve(dataDir, 'bpe4k', f);
    if (!fs.existsSync(from)) { console.error(`error: ${from} is missing; run \`make data\``); process.exit(1); }
    fs.copyFileSync(from, path.join(dir, f));
  }
  encode = require(path.join(dir, 'index.js')).encode;
}
else {
  const ref = (await import(require('url').pathToFileURL(refPath).href)).default;
  const never = /(?!)/g; // Llama 3: special-token text is ordinary text here (C: allow_special = 0)
  encode = model === 'llama3' ? (s) => ref.encode(s, { bos: false, eos: false, specialTokenRegex: never })
    : (s) => ref.encode(s, false, true);
}
const lines = cases.map((s) => Buffer.from(s, 'utf8').toString('hex') + '\t' + encode(s).join(' '));

// Invalid UTF-8 (cannot be a JS string): valid stretches alternate with invalid byte runs. Expected: each
// stretch's ids as node gives them for the stretch alone, and for each invalid run the item "x<hex>": ids
// that decode to exactly those bytes. A stretch never starts with a continuation byte, so a run and the
// stretch after it cannot join into a valid character.
const invalid = ['ff', '80', 'bf80', 'c0af', 'e282', 'f09f98', 'f5808080', 'eda080', 'fefe', 'c3', 'f8888080'];
for (let i = 0; i < (model === 'llama2' ? 0 : 150); i++) {
  const parts = int(1, 8);
  let bytes = '';
  const items = [];
  for (let p = 0; p < parts; p++) {
    if ((p + i) % 2 === 0) {
      const run = pick(invalid);
      bytes += run;
      items.push('x' + run);
    } else {
      let s = '';
      for (let k = int(1, 6); k > 0; k--) s += pick(makers)();
      bytes += Buffer.from(s, 'utf8').toString('hex');
      items.push(...encode(s));
    }
  }
  lines.push(bytes + '\t' + items.join(' '));
}
fs.writeFileSync(outFile, lines.join('\n') + '\n');
console.log(`# wrote ${lines.length} ${model} vectors to ${outFile}`);
}
main().catch((e) => { console.error(`error: ${e.message}`); process.exit(1); });
