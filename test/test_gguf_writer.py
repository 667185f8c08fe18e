"""test/test_gguf_writer.py GGUF F32 INFO.json - checks test_gguf_writer's file (see test/test_gguf_writer.c) as
node-llama-cpp's GGUF parser read it (INFO.json) and byte for byte against the source values (F32): one "ok"/"FAIL"
line per check; exit 1 on any failure."""
import json
import sys

import numpy as np

gguf, f32, info_path = sys.argv[1:4]
info = json.load(open(info_path))
x = np.fromfile(f32, dtype=np.float32)
raw = open(gguf, "rb").read()
fails = 0


def check(name, cond, detail):
    global fails
    print(("ok " if cond else "FAIL ") + "gguf_writer_" + name + ("" if cond else ": " + detail))
    fails += 0 if cond else 1


md = info["metadata"]
t = md["test"]
check("version", info["version"] == 3 and info["tensorCount"] == 5, "version %s, %s tensors" % (info["version"], info["tensorCount"]))
check("metadata_scalars",
      md["general"]["architecture"] == "test" and t["utf8"] == "caf\u00e9 \u2581x" and t["u32"] == 4000000000
      and t["i32"] == -123456 and abs(t["f32"] - 0.1) < 1e-8 and t["true"] is True and t["false"] is False,
      json.dumps(t)[:300])
check("metadata_arrays",
      t["strings"] == ["a", "b c", "", "\u2581\u2581d"] and t["i32s"] == [1, -2, 3, 2147483647]
      and np.allclose(t["f32s"], [0.5, -1.5, 1e-30], rtol=1e-7, atol=0),
      json.dumps({k: t[k] for k in ("strings", "i32s", "f32s")}))

GGML = {"t.f32": 0, "t.vec": 0, "t.f16": 1, "t.bf16": 30, "t.rev": 0}
tens = {ti["name"]: ti for ti in info["tensors"]}
check("tensor_table",
      sorted(tens) == sorted(GGML) and all(tens[n]["ggmlType"] == g for n, g in GGML.items())
      and tens["t.vec"]["dimensions"] == [7] and all(tens[n]["dimensions"] == [64, 64] for n in GGML if n != "t.vec"),
      json.dumps(info["tensors"])[:400])
base = info["infoEndOffset"]
check("alignment", base % 32 == 0 and all(ti["offset"] % 32 == 0 for ti in info["tensors"]),
      "data at %d, offsets %s" % (base, [ti["offset"] for ti in info["tensors"]]))


def data(name, dtype, n):
    off = base + tens[name]["offset"]
    return np.frombuffer(raw, dtype=dtype, count=n, offset=off)


n = x.size
check("f32_exact", np.array_equal(data("t.f32", np.uint32, n), x.view(np.uint32)), "F32 bytes differ from the source")
check("vector_exact", np.array_equal(data("t.vec", np.uint32, 7), x[1:8].view(np.uint32)), "t.vec differs")
with np.errstate(over="ignore"):
    want16 = x.astype(np.float16).view(np.uint16)
got16 = data("t.f16", np.uint16, n)
bad = np.nonzero(got16 != want16)[0]
check("f16_rounding", bad.size == 0,
      "%d of %d differ from numpy's float16, first x=%r: 0x%04x vs 0x%04x" % (
          bad.size, n, float(x[bad[0]]) if bad.size else 0, got16[bad[0]] if bad.size else 0, want16[bad[0]] if bad.size else 0))
b = x.view(np.uint32).astype(np.uint64)
wantbf = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even (no NaN among the values)
gotbf = data("t.bf16", np.uint16, n)
bad = np.nonzero(gotbf != wantbf)[0]
check("bf16_rounding", bad.size == 0, "%d of %d differ, first at %d" % (bad.size, n, bad[0] if bad.size else -1))
rev = x.reshape(64, 64)[::-1].reshape(-1)
check("rows_permuted", np.array_equal(data("t.rev", np.uint32, n), rev.view(np.uint32)), "t.rev is not the rows reversed")
end = base + max(ti["offset"] for ti in info["tensors"]) + 64 * 64 * 4
check("file_length", len(raw) == end, "file is %d bytes, expected %d" % (len(raw), end))
sys.exit(1 if fails else 0)
