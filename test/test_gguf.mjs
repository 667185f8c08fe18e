// test/test_gguf.mjs NODE_MODULES NAME MODEL.gguf REF.json TEXTS LOGP_TOL - llama.cpp (node-llama-cpp, CPU) against this
// runtime on one exported model. REF.json is test/gguf_ref.c's output for the same model file and TEXTS:
//   NAME_tokenizer  llama.cpp tokenizes every text of TEXTS (parts separated by "\n\x1e\n", specials as plain
//                   text, no BOS) to exactly the runtime's ids;
//   NAME_logits     after the prompt (ref.prompt, BOS first), llama.cpp's next-token distribution against the
//                   softmax of the runtime's logits: max |log p_llama - log p_ours| over the tokens ours gives
//                   p > 1e-5 must be <= LOGP_TOL (log-probabilities are the logits up to one shift, so this
//                   compares logits), and the argmax must agree;
//   NAME_positions  at every position of the prompt, llama.cpp's log-probabilities of our 16 most likely next tokens
//                   within LOGP_TOL of ours, and the same most likely token wherever ours leads by more than
//                   LOGP_TOL (RoPE, masks and the KV cache at every position, not only the last);
//   NAME_greedy     greedy (temperature 0) continuation of the prompt: the same tokens as ref.greedy.
// The KV cache is F32 and flash attention off, so the comparison sees llama.cpp's fp32 arithmetic. A file that
// llama.cpp cannot load is a failure, never a skip. Prints "ok NAME_..." / "FAIL NAME_...: ..." with the figures;
// exits 1 on any failure.
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const [modulesDir, name, ggufPath, refPath, textsPath, tolArg] = process.argv.slice(2);
const tol = Number(tolArg);
let failures = 0;
const ok = (what, detail) => console.log(`ok ${name}_${what}${detail ? ` (${detail})` : ''}`);
const fail = (what, why) => { console.log(`FAIL ${name}_${what}: ${why}`); failures++; };

const ref = JSON.parse(fs.readFileSync(refPath, 'utf8'));
const texts = fs.readFileSync(textsPath, 'utf8').split('\n\x1e\n');
const entry = path.resolve(modulesDir, 'node-llama-cpp/dist/index.js');
const { getLlama } = await import(pathToFileURL(entry).href);

let model;
try {
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' });
  model = await llama.loadModel({ modelPath: ggufPath });
} catch (e) {
  fail('load', `llama.cpp cannot load ${ggufPath}: ${String(e && e.message || e).split('\n')[0]}`);
  process.exit(1);
}
ok('load', `${ggufPath}`);

// 1. tokenizer
{
  if (texts.length !== ref.texts.length) fail('tokenizer', `${texts.length} texts but ${ref.texts.length} reference rows`);
  let compared = 0, bad = 0, first = '';
  for (let i = 0; i < Math.min(texts.length, ref.texts.length); i++) {
    let got = model.tokenize(texts[i], false);
    if (got.length && got[0] === model.tokens.bos && ref.texts[i][0] !== model.tokens.bos) got = got.slice(1);
    const want = ref.texts[i];
    compared += want.length;
    if (got.length !== want.length || got.some((t, k) => t !== want[k])) {
      bad++;
      if (!first) {
        let k = 0;
        while (k < got.length && k < want.length && got[k] === want[k]) k++;
        first = `text ${i} (${JSON.stringify(texts[i].slice(0, 40))}...): first difference at token ${k}: llama.cpp ` +
          `${JSON.stringify(got.slice(k, k + 5))}, ours ${JSON.stringify(want.slice(k, k + 5))}`;
      }
    }
  }
  if (bad) fail('tokenizer', `${bad} of ${texts.length} texts differ; ${first}`);
  else ok('tokenizer', `${texts.length} texts, ${compared} tokens identical`);
}

const ctxSize = Math.min(model.trainContextSize, 1024);
const newSequence = async () => {
  const ctx = await model.createContext({ contextSize: ctxSize, flashAttention: false,
    experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' });
  return ctx.getSequence();
};

// 2. the next-token distribution after the prompt, and at every position of it
{
  const seq = await newSequence();
  const items = ref.prompt.map((t) => [t, { generateNext: { probabilities: true } }]);
  const res = await seq.controlledEvaluate(items);
  const probs = res[res.length - 1].next.probabilities;
  const lg = ref.logits;
  let mx = -Infinity;
  for (const x of lg) mx = Math.max(mx, x);
  let se = 0;
  for (const x of lg) se += Math.exp(x - mx);
  const lse = mx + Math.log(se);
  let maxd = 0, maxdTok = -1, n = 0, ourTop = 0, maxp = 0;
  for (let t = 0; t < lg.length; t++) {
    const lp = lg[t] - lse, p = Math.exp(lp);
    if (lg[t] > lg[ourTop]) ourTop = t;
    const q = probs.get(t) ?? 0;
    maxp = Math.max(maxp, Math.abs(q - p));
    if (p > 1e-5) {
      n++;
      const d = q > 0 ? Math.abs(Math.log(q) - lp) : Infinity;
      if (d > maxd) { maxd = d; maxdTok = t; }
    }
  }
  const theirTop = probs.entries().next().value[0];
  const detail = `max |dlog p| ${maxd.toExponential(3)} over ${n} tokens with p > 1e-5 (token ${maxdTok}), max |dp| ` +
    `${maxp.toExponential(3)} over ${lg.length}, argmax ${theirTop} vs ${ourTop}`;
  if (probs.size !== lg.length) fail('logits', `llama.cpp gave ${probs.size} probabilities, the model has V = ${lg.length}`);
  else if (!(maxd <= tol) || theirTop !== ourTop) fail('logits', `${detail}; tolerance ${tol}`);
  else ok('logits', detail);

  let pmax = 0, where = '', argBad = 0, argChecked = 0;
  if (ref.top.length !== ref.prompt.length) fail('positions', `${ref.top.length} reference rows for ${ref.prompt.length} positions`);
  for (let i = 0; i < Math.min(ref.top.length, res.length); i++) {
    const pr = res[i].next.probabilities, top = ref.top[i];
    for (const [t, lp] of top) {
      const q = pr.get(t) ?? 0;
      const d = q > 0 ? Math.abs(Math.log(q) - lp) : Infinity;
      if (d > pmax) { pmax = d; where = `position ${i}, token ${t}`; }
    }
    if (top.length > 1 && top[0][1] - top[1][1] > tol) {
      argChecked++;
      if (pr.entries().next().value[0] !== top[0][0]) argBad++;
    }
  }
  const pdetail = `${ref.top.length} positions x ${ref.top[0].length} tokens: max |dlog p| ${pmax.toExponential(3)} at ` +
    `${where}; argmax equal at ${argChecked - argBad} of ${argChecked} positions where ours is clear`;
  if (!(pmax <= tol) || argBad) fail('positions', `${pdetail}; tolerance ${tol}`);
  else ok('positions', pdetail);
}

// 3. greedy continuation
{
  const seq = await newSequence();
  const got = [];
  for await (const t of seq.evaluate(ref.prompt, { temperature: 0, yieldEogToken: true })) {
    got.push(t);
    if (got.length >= ref.greedy.length || model.isEogToken(t)) break;
  }
  const want = ref.greedy;
  if (got.length !== want.length || got.some((t, k) => t !== want[k])) {
    let k = 0;
    while (k < got.length && k < want.length && got[k] === want[k]) k++;
    fail('greedy', `first difference at generated token ${k}: llama.cpp ${JSON.stringify(got.slice(k, k + 8))}, ours ` +
      `${JSON.stringify(want.slice(k, k + 8))}`);
  } else {
    ok('greedy', `${want.length} tokens identical: ${JSON.stringify(model.detokenize(want).slice(0, 60))}`);
  }
}
process.exit(failures ? 1 : 0);
