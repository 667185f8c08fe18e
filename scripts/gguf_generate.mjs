// scripts/gguf_generate.mjs MODEL.gguf "PROMPT" [TOKENS] [DATA] - runs a GGUF file (export_gguf's) in llama.cpp on the
// CPU through node-llama-cpp (installed by `make llama-cpp` into DATA/npm/node-llama-cpp, DATA defaulting to
// "data") and prints the prompt followed by TOKENS (default 64) greedily generated tokens. The prompt starts with the
// model's BOS (GPT-2: <|endoftext|>), as the trainers' samples and training documents do.
import path from 'path';
import { pathToFileURL } from 'url';

const [gguf, prompt, nArg, dataArg] = process.argv.slice(2);
if (!gguf || prompt === undefined) {
  console.error('usage: node scripts/gguf_generate.mjs MODEL.gguf "PROMPT" [TOKENS] [DATA]');
  process.exit(2);
}
const n = Number(nArg ?? 64);
const entry = path.resolve(dataArg ?? 'data', 'npm/node-llama-cpp/node_modules/node-llama-cpp/dist/index.js');
let mod;
try {
  mod = await import(pathToFileURL(entry).href);
} catch {
  console.error(`error: ${entry} not found; run 'make llama-cpp' first`);
  process.exit(1);
}
const llama = await mod.getLlama({ gpu: false, build: 'never', logLevel: 'error' });
let model;
try {
  model = await llama.loadModel({ modelPath: gguf });
} catch (e) {
  console.error(`error: llama.cpp cannot load ${gguf}: ${String(e?.message ?? e).split('\n')[0]}; pass a file written by export_gguf`);
  process.exit(1);
}
const ctx = await model.createContext({ contextSize: Math.min(model.trainContextSize, 4096) });
const seq = ctx.getSequence();
const tokens = model.tokenize(prompt, false);
const bos = model.tokens.bos;
const input = bos != null ? [bos, ...tokens] : tokens;
const out = [];
for await (const t of seq.evaluate(input, { temperature: 0 })) {
  out.push(t);
  if (out.length >= n) break;
}
process.stdout.write(prompt + model.detokenize(out) + '\n');
