#!/usr/bin/env bash
# test/test_gguf_writer.sh BIN [DATA] - export/gguf.c on its own: BIN (build/test_gguf_writer) writes a GGUF file with
# every metadata type and F32/F16/BF16/row-permuted tensors; node-llama-cpp's GGUF parser (an independent reader,
# `make llama-cpp`) reads its metadata and tensor table, and test/test_gguf_writer.py checks both and every tensor's
# bytes against the source values (F16: numpy's float16 conversion; BF16: round to nearest even on the bits).
set -u
BIN=${1:-build/test_gguf_writer}
DATA=${2:-data}
cd "$(dirname "$0")/.."
MODS="$DATA/npm/node-llama-cpp/node_modules"
[ -d "$MODS/node-llama-cpp" ] || { echo "FAIL gguf_writer_prerequisites: $MODS has no node-llama-cpp; run 'make llama-cpp'"; exit 1; }
TMP=$(mktemp -d build/test_gguf_writer.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
"$BIN" "$TMP/t.gguf" "$TMP/t.f32" || { echo "FAIL gguf_writer_writes: $BIN failed"; exit 1; }
node --input-type=module -e '
import path from "path";
import { pathToFileURL } from "url";
const [mods, file] = process.argv.slice(1);
const { readGgufFileInfo } = await import(pathToFileURL(path.resolve(mods, "node-llama-cpp/dist/index.js")).href);
const info = await readGgufFileInfo(file, { logWarnings: false });
const big = (k, v) => typeof v === "bigint" ? Number(v) : v;
console.log(JSON.stringify({ version: info.version, tensorCount: info.tensorCount, metadata: info.metadata,
  infoEndOffset: info.infoEndOffset, tensors: info.tensorInfo }, big));
' "$MODS" "$TMP/t.gguf" > "$TMP/info.json" || { echo "FAIL gguf_writer_parses: node-llama-cpp cannot read the file"; exit 1; }
/usr/bin/python3 test/test_gguf_writer.py "$TMP/t.gguf" "$TMP/t.f32" "$TMP/info.json"
