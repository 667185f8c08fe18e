"""test/test_tokenizer_shards.py DATA_DIR - tests `tok shards` from the outside (run by test_tokenizer_shards.sh).

Checks: llm.c header fields and file length; the shards' tokens equal EOT + `tok encode` of every document in
input order; the validation split equals an independent implementation of the documented rule (the
round(n * P / 100) documents whose base names have the smallest FNV-1a 64-bit hashes); the bytes are the same
for --threads 1, 2 and 3 and for any --shard-tokens split; the split does not depend on input order; .jsonl
inputs (JSON decoded here by Python's json module); and one-line errors that leave no shard behind.
Prints "ok <name>" / "FAIL <name>: ..." lines; exits non-zero on any failure.
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

DATA = sys.argv[1] if len(sys.argv) > 1 else "data"
TOK = os.environ.get("TOK", "./tok")  # e.g. a sanitizer build
EOT = 50256
failures = 0


def report(name, problems):
    global failures
    if problems:
        failures += 1
        print(f"FAIL {name}: " + "; ".join(problems[:5]))
    else:
        print(f"ok {name}")
    sys.stdout.flush()


def run(args, stdin=None, check=True):
    p = subprocess.run([TOK] + args, input=stdin, capture_output=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"tok {' '.join(args)} failed: {p.stderr.decode(errors='replace').strip()}")
    return p


def read_shard(path):
    """Returns (header ints, tokens) after checking the llm.c layout."""
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack("<256i", raw[:1024])
    n = header[2]
    tokens = list(struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n])) if len(raw) == 1024 + 2 * n else None
    return header, tokens, len(raw)


def shard_tokens(out, prefix, split):
    toks, problems = [], []
    paths = sorted(glob.glob(os.path.join(out, f"{prefix}_{split}_*.bin")))
    for i, p in enumerate(paths):
        if os.path.basename(p) != f"{prefix}_{split}_{i:06d}.bin":
            problems.append(f"{p}: expected the name {prefix}_{split}_{i:06d}.bin")
        header, t, size = read_shard(p)
        if header[0] != 20240520 or header[1] != 1:
            problems.append(f"{p}: magic/version {header[0]}/{header[1]}, expected 20240520/1")
        if t is None:
            problems.append(f"{p}: {size} bytes, expected 1024 + 2 * {header[2]}")
            continue
        # header[3..4]: the tokenizer record of dataloader/dataloader.h (mark 20261202, 1 = gpt2); the rest zero
        if header[3] != 20261202 or header[4] != 1:
            problems.append(f"{p}: header ints 3, 4 are {header[3]}, {header[4]}, expected 20261202, 1 (gpt2)")
        # header[5..6]: the vocabulary's hash (XXH3-64 of encoder.json then vocab.bpe), never 0; the rest zero
        if header[5] == 0 and header[6] == 0:
            problems.append(f"{p}: header ints 5, 6 (the vocabulary hash) are 0")
        if any(header[7:]):
            problems.append(f"{p}: header ints 7..255 should be 0")
        toks += t
    return paths, toks, problems


def fnv1a(s):
    h = 0xcbf29ce484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def expected_val(names, percent):
    k = int(len(names) * percent / 100.0 + 0.5)
    k = max(k, 1) if percent > 0 else 0
    order = sorted(range(len(names)), key=lambda i: (fnv1a(names[i]), i))
    return set(order[:k])


def encode(text_bytes):
    out = run(["encode", "--data", DATA], stdin=text_bytes).stdout.split()
    return [int(x) for x in out]


def main():
    txt = os.path.join(DATA, "sotu", "txt")
    files = sorted(f for f in os.listdir(txt) if not f.startswith("."))
    tmp = tempfile.mkdtemp(prefix="test_tok_shards_")
    try:
        # reference: every document through `tok encode`, the split by the documented rule
        docs = [open(os.path.join(txt, f), "rb").read() for f in files]
        # one `tok encode` over all documents joined by <|endoftext|> is cheaper than 233 processes and equal:
        # with --allow-special each segment is encoded on its own, and the corpus holds no such text
        if any(b"<|endoftext|>" in d for d in docs):
            raise RuntimeError("corpus holds <|endoftext|>; the reference below assumes it does not")
        joined = encode_allow(b"<|endoftext|>".join(docs))
        per_doc, cur = [], []
        for t in joined:
            if t == EOT:
                per_doc.append(cur)
                cur = []
            else:
                cur.append(t)
        per_doc.append(cur)
        # spot-check the shortcut against separate processes for a few documents
        problems = []
        for i in (0, len(docs) // 2, len(docs) - 1):
            if encode(docs[i]) != per_doc[i]:
                problems.append(f"{files[i]}: joined encoding differs from encoding it alone")
        if len(per_doc) != len(docs):
            problems.append(f"{len(per_doc)} segments for {len(docs)} documents")
        val = expected_val(files, 5)
        want_train = [t for i, d in enumerate(per_doc) if i not in val for t in [EOT] + d]
        want_val = [t for i, d in enumerate(per_doc) if i in val for t in [EOT] + d]

        outs = {}
        for threads, per_shard in ((1, 100000000), (2, 100000000), (3, 300000), (2, 300000)):
            out = os.path.join(tmp, f"t{threads}_{per_shard}")
            p = run(["shards", "--out", out, "--name", "sotu", "--val-percent", "5", "--threads", str(threads),
                     "--shard-tokens", str(per_shard), "--data", DATA, txt])
            outs[(threads, per_shard)] = out
            if b"tokens/s" not in p.stdout:
                problems.append(f"no summary line with tokens/s on stdout: {p.stdout!r}")
        # header fields, EOT before every document, tokens equal to the encoder's, the split
        out = outs[(1, 100000000)]
        tp, train, pr1 = shard_tokens(out, "sotu", "train")
        vp, valt, pr2 = shard_tokens(out, "sotu", "val")
        problems += pr1 + pr2
        if len(tp) != 1 or len(vp) != 1:
            problems.append(f"expected 1 train and 1 val shard, got {len(tp)} and {len(vp)}")
        if train != want_train:
            problems.append(f"train tokens differ from EOT + encode(doc) over train documents "
                            f"({len(train)} vs {len(want_train)} tokens)")
        if valt != want_val:
            problems.append(f"val tokens differ from EOT + encode(doc) over val documents "
                            f"({len(valt)} vs {len(want_val)} tokens)")
        if train.count(EOT) != len(docs) - len(val) or valt.count(EOT) != len(val):
            problems.append(f"EOT count {train.count(EOT)}/{valt.count(EOT)}, expected {len(docs) - len(val)}/{len(val)}")
        if not (5 <= len(val) <= 10 * len(docs) // 100 + 1):
            problems.append(f"{len(val)} of {len(docs)} documents in val, expected about 5%")
        report("test_shards_hold_eot_then_encoder_tokens_per_document", problems)

        # same bytes for any --threads; splitting into small shards just cuts the same stream
        problems = []
        for key in ((2, 100000000),):
            for f in os.listdir(outs[key]):
                if open(os.path.join(outs[key], f), "rb").read() != open(os.path.join(out, f), "rb").read():
                    problems.append(f"{f} differs between --threads 1 and --threads {key[0]}")
        a, b = outs[(3, 300000)], outs[(2, 300000)]
        if sorted(os.listdir(a)) != sorted(os.listdir(b)):
            problems.append("different shard files for --threads 3 and 2")
        for f in os.listdir(a):
            if open(os.path.join(a, f), "rb").read() != open(os.path.join(b, f), "rb").read():
                problems.append(f"{f} differs between --threads 3 and --threads 2")
        small, small_toks, pr = shard_tokens(a, "sotu", "train")
        problems += pr
        if small_toks != train:
            problems.append("--shard-tokens 300000 shards do not concatenate to the single shard")
        if len(small) != (len(train) + 299999) // 300000:
            problems.append(f"{len(small)} train shards of 300000 tokens for {len(train)} tokens")
        if any(read_shard(p)[0][2] != 300000 for p in small[:-1]):
            problems.append("every train shard but the last should hold exactly 300000 tokens")
        report("test_shards_identical_for_any_threads_and_shard_size", problems)

        # the split follows names, not order: reversed inputs give the same val documents
        problems = []
        out_rev = os.path.join(tmp, "reversed")
        run(["shards", "--out", out_rev, "--name", "sotu", "--val-percent", "5", "--threads", "2", "--data", DATA]
            + [os.path.join(txt, f) for f in reversed(files)])
        _, valr, pr = shard_tokens(out_rev, "sotu", "val")
        problems += pr
        want_rev = [t for i in reversed(range(len(docs))) if i in val for t in [EOT] + per_doc[i]]
        if valr != want_rev:
            problems.append("reversed input order changed which documents are in val")
        # rerunning into a directory with more shards removes the stale ones
        run(["shards", "--out", a, "--name", "sotu", "--val-percent", "5", "--data", DATA, txt])
        left = sorted(os.listdir(a))
        if left != ["sotu_train_000000.bin", "sotu_val_000000.bin"]:
            problems.append(f"stale shards left after a rerun with bigger shards: {left}")
        report("test_shards_split_by_name_not_order", problems)

        # jsonl: one document per line from the "text" field (or --jsonl-field), JSON escapes decoded
        problems = []
        rows = [{"id": 1, "meta": {"a": [1, {"text": "nested, not this"}]}, "text": "Hello \"world\"\n\ttab"},
                {"text": "caf\u00e9 \U0001F680 \u4e2d\u6587 it's", "other": "x"},
                {"body": "other field", "text": "<|endoftext|> stays text"},
                {"text": ""}]
        jl = os.path.join(tmp, "docs.jsonl")
        with open(jl, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")  # ensure_ascii: \u escapes incl. surrogate pairs
            f.write("\n")  # blank line: not a document
        out_j = os.path.join(tmp, "jsonl")
        run(["shards", "--out", out_j, "--name", "j", "--val-percent", "0", "--data", DATA, jl])
        _, jt, pr = shard_tokens(out_j, "j", "train")
        problems += pr
        want = [t for r in rows for t in [EOT] + encode(r["text"].encode())]
        if jt != want:
            problems.append(f"jsonl tokens {jt[:12]}... differ from EOT + encode(text) {want[:12]}...")
        if os.path.exists(os.path.join(out_j, "j_val_000000.bin")):
            problems.append("--val-percent 0 wrote a val shard")
        out_f = os.path.join(tmp, "jsonl_field")
        body = os.path.join(tmp, "body.jsonl")
        write_lines(body, [{"text": "not this", "body": "only this"}])
        run(["shards", "--out", out_f, "--name", "j", "--val-percent", "0", "--jsonl-field", "body", "--data", DATA,
             body])
        _, ft, pr = shard_tokens(out_f, "j", "train")
        if ft != [EOT] + encode(b"only this"):
            problems.append("--jsonl-field body did not select the body field")
        report("test_shards_read_jsonl", problems)

        # errors: one line naming the problem, non-zero exit, no shard written
        problems = []
        bad_json = os.path.join(tmp, "bad.jsonl")
        write_raw(bad_json, b'{"text": "ok"}\n{"title": "no text"}\n')
        cases = [
            (["shards", "--out", os.path.join(tmp, "e1"), "--data", DATA, os.path.join(tmp, "missing.txt")], "missing.txt"),
            (["shards", "--out", os.path.join(tmp, "e2"), "--data", DATA, bad_json], "bad.jsonl:2"),
            (["shards", "--out", os.path.join(tmp, "e3"), "--threads", "zero", "--data", DATA, txt], "--threads"),
            (["shards", "--out", os.path.join(tmp, "e4"), "--data", os.path.join(tmp, "nodata"), txt], "make data"),
            (["shards", "--out", os.path.join(tmp, "e5"), "--bogus", txt], "--bogus"),
        ]
        for args, needle in cases:
            p = run(args, check=False)
            err = p.stderr.decode(errors="replace").strip().splitlines()
            if p.returncode == 0:
                problems.append(f"tok {' '.join(args[:2])} ... {needle}: exit 0")
            if len(err) != 1 or needle not in err[0] or not err[0].startswith("error:"):
                problems.append(f"{needle}: expected one 'error:' line naming it, got {err}")
            d = args[2]
            if os.path.isdir(d) and glob.glob(os.path.join(d, "*.bin")):
                problems.append(f"{needle}: shards written despite the error")
        report("test_shards_bad_input_one_line_error", problems)

        # damaged vocabulary files: one line naming the file (and line) and `make data`
        problems = []
        enc_json = open(os.path.join(DATA, "gpt2", "encoder.json"), "rb").read()
        merges = open(os.path.join(DATA, "gpt2", "vocab.bpe"), "rb").read()
        damaged = [
            ("truncated_json", enc_json[: len(enc_json) // 2], merges, "encoder.json: malformed JSON"),
            ("bad_escape", enc_json.replace(b'"!"', b'"\\q"', 1), merges, "encoder.json: malformed JSON"),
            ("bad_merge", enc_json, merges + b"\nzzzq xxxqw\n", "vocab.bpe:50003:"),
            ("no_merge_space", enc_json, merges.replace(b"\n", b"\nab\n", 1), "vocab.bpe:2:"),
        ]
        for name, ej, vb, needle in damaged:
            d = os.path.join(tmp, name, "gpt2")
            os.makedirs(d)
            write_raw(os.path.join(d, "encoder.json"), ej)
            write_raw(os.path.join(d, "vocab.bpe"), vb)
            p = run(["encode", "--data", os.path.join(tmp, name)], stdin=b"hello", check=False)
            err = p.stderr.decode(errors="replace").strip().splitlines()
            if p.returncode == 0 or len(err) != 1 or needle not in err[0] or "make data" not in err[0]:
                problems.append(f"{name}: expected one error line with '{needle}' and 'make data', got {err}")
        report("test_damaged_vocabulary_one_line_error", problems)
        llama_shards(tmp, txt, files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


LLAMA = {"llama3": (128000, 128001), "llama2": (1, 2)}  # (document start = BOS, EOS)


def llama_shards(tmp, txt, files):
    """uint32 shards for Llama: llm.c's header (magic 20240801, version 7), 1024 + 4n bytes, and the tokens equal
    BOS + `tok encode --model M` of every document in name order; --bos/--eos on encode."""
    docs_dir = os.path.join(tmp, "llama_docs")
    os.makedirs(docs_dir)
    picked = files[:: max(1, len(files) // 6)][:6]
    for f in picked:
        shutil.copy(os.path.join(txt, f), docs_dir)
    for model, (bos, eos) in LLAMA.items():
        problems = []
        want = []
        for f in sorted(picked):
            ids = run(["encode", "--model", model, "--data", DATA],
                      stdin=open(os.path.join(docs_dir, f), "rb").read()).stdout.split()
            want += [bos] + [int(x) for x in ids]
        out = os.path.join(tmp, "shards_" + model)
        run(["shards", "--model", model, "--out", out, "--name", "s", "--val-percent", "0", "--threads", "2",
             "--shard-tokens", "20000", "--data", DATA, docs_dir])
        got = []
        paths = sorted(glob.glob(os.path.join(out, "s_train_*.bin")))
        for i, path in enumerate(paths):
            raw = open(path, "rb").read()
            header = struct.unpack("<256i", raw[:1024])
            n = header[2]
            if header[0] != 20240801 or header[1] != 7:
                problems.append(f"{path}: magic/version {header[0]}/{header[1]}, expected 20240801/7")
            if len(raw) != 1024 + 4 * n:
                problems.append(f"{path}: {len(raw)} bytes, expected 1024 + 4 * {n}")
                continue
            if i + 1 < len(paths) and n != 20000:
                problems.append(f"{path}: {n} tokens, expected 20000 (all but the last shard are full)")
            got += struct.unpack(f"<{n}I", raw[1024:])
        if glob.glob(os.path.join(out, "s_val_*.bin")):
            problems.append("--val-percent 0 wrote validation shards")
        if list(got) != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            problems.append(f"shard tokens differ from BOS + tok encode at token {first} "
                            f"(got {len(got)} tokens, expected {len(want)})")
        if max(want) < 65536 and model == "llama3":
            problems.append("no id above 65535 in the Llama 3 reference: the uint32 layout is not exercised")
        ids = [int(x) for x in run(["encode", "--model", model, "--bos", "--eos", "--data", DATA],
                                   stdin=b"I").stdout.split()]
        if ids[0] != bos or ids[-1] != eos or len(ids) < 3:
            problems.append(f"tok encode --bos --eos of 'I': {ids}, expected {bos} ... {eos}")
        report(f"test_{model}_shards_uint32_bos_per_document", problems)


def encode_allow(text_bytes):
    out = run(["encode", "--allow-special", "--data", DATA], stdin=text_bytes).stdout.split()
    return [int(x) for x in out]


def write_lines(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def write_raw(path, data):
    with open(path, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    sys.exit(main())
