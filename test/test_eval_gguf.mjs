// test/test_eval_gguf.mjs NODE_MODULES NAME MODEL.gguf DUMP.jsonl T LOGP_TOL - the downstream-task scorer
// (eval/evaluate.c) against llama.cpp (node-llama-cpp, CPU) on the model's GGUF export. DUMP is `--eval-only
// --eval-dump` of the same model: per (task item, choice) the context and continuation texts, our tokens and our
// log-likelihood. For every row this script:
//   NAME_eval_tokens   builds the tokens itself from the two texts with llama.cpp's tokenizer, by the harness rule
//                      (whitespace ending the context moves to the continuation; the continuation's tokens are those
//                      of context + continuation after the context's; BOS first where the vocabulary has its own,
//                      else end-of-text for an empty context; the last T + 1 kept): they must equal ours exactly;
//   NAME_eval_loglik   scores the continuation with llama.cpp's next-token probabilities at each of its positions:
//                      |ours - llama.cpp| <= LOGP_TOL x its tokens (LOGP_TOL: test/test_gguf.sh's per-token bound for
//                      this export);
//   NAME_eval_choice   per item, the choice with the highest log-likelihood, and per byte, is the same as ours
//                      wherever ours leads the runner-up by more than 2 x the tolerance of the two.
// Prints "ok NAME_..." / "FAIL NAME_...: ..." with the figures; exits 1 on any failure.
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [modulesDir, name, ggufPath, dumpPath, Targ, tolArg] = process.argv.slice(2);
const T = Number(Targ), tol = Number(tolArg);
let failures = 0;
const ok = (what, detail) => console.log(`ok ${name}_${what}${detail ? ` (${detail})` : ''}`);
const fail = (what, why) => { console.log(`FAIL ${name}_${what}: ${why}`); failures++; };

const rows = fs.readFileSync(dumpPath, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
if (!rows.length) { fail('eval_dump', `${dumpPath} holds no row`); process.exit(1); }
const entry = path.resolve(modulesDir, 'node-llama-cpp/dist/index.js');
const { getLlama } = await import(pathToFileURL(entry).href);
const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
const model = await llama.loadModel({ modelPath: ggufPath });
const bos = model.tokens.bos, eos = model.tokens.eos;
// a vocabulary with its own BOS (Llama) starts every context with it; GPT-2 style ones (BOS == EOT, or none)
// start only an empty context, with their end-of-text
const ownBos = bos != null && bos !== eos;
const ctx = await model.createContext({ contextSize: Math.min(model.trainContextSize, 1024), flashAttention: false,
  experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' });
const seq = ctx.getSequence();

let tokBad = 0, tokFirst = '', worst = 0, worstWhere = '', llBad = 0;
const theirs = new Map(); // "task:line" -> [{choice, ll, bytes}]
for (const r of rows) {
  // the tokens, by the rule
  let c = r.context, x = r.continuation;
  const m = c.match(/[ \t\n]+$/);
  if (m) { x = m[0] + x; c = c.slice(0, c.length - m[0].length); }
  const whole = model.tokenize(c + x, false), cids = c.length ? model.tokenize(c, false) : [];
  let all = [...(ownBos ? [bos] : (cids.length === 0 ? [eos] : [])), ...whole];
  if (all.length > T + 1) all = all.slice(all.length - T - 1);
  const ncont = whole.length - cids.length;
  if (all.length !== r.ids.length || all.some((t, k) => t !== r.ids[k]) || ncont !== r.tokens) {
    tokBad++;
    if (!tokFirst) tokFirst = `${r.task} line ${r.line} choice ${r.choice}: llama.cpp ${JSON.stringify(all.slice(0, 12))}... ` +
      `(${ncont} continuation tokens), ours ${JSON.stringify(r.ids.slice(0, 12))}... (${r.tokens})`;
    continue;
  }
  // llama.cpp's log-likelihood of the continuation: the probabilities after each token that precedes one of it
  await seq.clearHistory();
  const first = all.length - ncont - 1;
  const items = all.slice(0, all.length - 1).map((t, k) => [t, k >= first ? { generateNext: { probabilities: true } } : {}]);
  const res = await seq.controlledEvaluate(items);
  let ll = 0;
  for (let k = first; k < all.length - 1; k++) {
    const p = res[k].next.probabilities.get(all[k + 1]) ?? 0;
    ll += p > 0 ? Math.log(p) : -Infinity;
  }
  const d = Math.abs(ll - r.loglik);
  if (d > worst) { worst = d; worstWhere = `${r.task} line ${r.line} choice ${r.choice} (${r.tokens} tokens): ${ll} vs ${r.loglik}`; }
  if (!(d <= tol * r.tokens)) llBad++;
  const key = `${r.task}:${r.line}`;
  if (!theirs.has(key)) theirs.set(key, []);
  theirs.get(key).push({ choice: r.choice, ll, ours: r.loglik, bytes: Buffer.byteLength(r.continuation), n: r.tokens });
}
if (tokBad) fail('eval_tokens', `${tokBad} of ${rows.length} rows differ; first: ${tokFirst}`);
else ok('eval_tokens', `${rows.length} rows, tokens identical`);
const detail = `${rows.length - tokBad} rows: max |loglik ours - llama.cpp| ${worst.toExponential(3)} at ${worstWhere}`;
if (llBad || tokBad === rows.length) fail('eval_loglik', `${llBad} rows over ${tol} x tokens; ${detail}`);
else ok('eval_loglik', detail);

// the chosen answers, by the sum and per byte, where ours is not a near-tie
let checked = 0, differ = 0, ties = 0, where = '';
for (const [key, cs] of theirs) {
  if (cs.length < 2) continue; // a last-word item: one continuation, scored above
  for (const norm of [false, true]) {
    const s = (c, v) => (norm ? v / c.bytes : v);
    const byOurs = [...cs].sort((a, b) => s(b, b.ours) - s(a, a.ours));
    const margin = s(byOurs[0], byOurs[0].ours) - s(byOurs[1], byOurs[1].ours);
    const slack = 2 * tol * (s(byOurs[0], byOurs[0].n) + s(byOurs[1], byOurs[1].n));
    if (margin <= slack) { ties++; continue; }
    checked++;
    const best = cs.reduce((a, b) => (s(b, b.ll) > s(a, a.ll) ? b : a));
    if (best.choice !== byOurs[0].choice) { differ++; if (!where) where = `${key}${norm ? ' (per byte)' : ''}`; }
  }
}
const cdetail = `${checked} choices compared (sum and per byte), ${ties} near-ties left out`;
if (differ || checked === 0) fail('eval_choice', `${differ} differ (first ${where}); ${cdetail}`);
else ok('eval_choice', cdetail);
process.exit(failures ? 1 : 0);
