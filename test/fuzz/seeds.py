#!/usr/bin/python3
"""test/fuzz/seeds.py - writes the small committed seed corpora of the fuzz harnesses (test/fuzz/corpus/<h>/).
Re-runnable; the files are committed, so this only matters when a harness's input layout changes.
Run from the repository root: /usr/bin/python3 test/fuzz/seeds.py"""
import os
import struct


def shard(tokens, u32=False, n=None):
    head = [20240801 if u32 else 20240520, 7 if u32 else 1, len(tokens) if n is None else n] + [0] * 253
    fmt = "<%d%s" % (len(tokens), "I" if u32 else "H")
    return struct.pack("<256i", *head) + struct.pack(fmt, *tokens)


def put(harness, name, data):
    d = os.path.join("test/fuzz/corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


toks = [(i * 7919) % 50257 for i in range(64)]
put("shard", "u16_64", shard(toks))
put("shard", "u32_64", shard(toks, u32=True))
put("shard", "u16_big_ids", shard([50256, 50257, 65535, 0]))
put("shard", "u16_truncated", shard(toks, n=65))
put("shard", "empty", shard([]))

# loader: byte 0 = (B-1) | (world-1) << 2, byte 1 = (T-1) | shuffle << 4 | rank << 5, then a DataPos, then a shard
def datapos(epoch, index, seed, W, rank, world, start):
    return struct.pack("<QQQQiiQ", epoch, index, seed, W, rank, world, start)

put("loader", "b2_t8_w1", bytes([1, 7]) + datapos(0, 2, 1234, 3, 0, 1, 0) + shard(toks))
put("loader", "b1_t4_w2_shuffle", bytes([1 << 2, 3 | 16 | 32]) + datapos(1, 2, 99, 15, 1, 2, 0) + shard(toks))
put("loader", "b4_t16_w4_u32", bytes([3 | 3 << 2, 15]) + datapos(0, 1, 5, 6, 0, 4, 0)
    + shard(toks * 7, u32=True))

# bpe: plain bytes to encode
for name, text in [("ascii", b"Hello world! It's a test, isn't it?  \n\n  Numbers 12345 and 3.14."),
                   ("special", b"before<|endoftext|>after <|endoftext|><|endof"),
                   ("unicode", "caf\u00e9 na\u00efve \u4e2d\u6587 \U0001f600 \u00a0 \u200b".encode()),
                   ("binary", bytes(range(256))),
                   ("spaces", b" " * 70 + b"\t\r\n" * 10 + b"x")]:
    put("bpe", name, text)


# vocab: a tiny GPT-2-style vocabulary: the 256 byte tokens, a few merges, <|endoftext|>
def byte_alphabet():
    printable = [b for b in range(256) if 33 <= b <= 126 or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def json_str(s):
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) > 0x7e:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out + ['"'])


alpha = byte_alphabet()
tokens = [alpha[b] for b in range(256)]
merges = [("h", "e"), ("l", "l"), ("he", "ll"), (alpha[32], "w"), ("o", "r")]
tokens += [a + b for a, b in merges] + ["<|endoftext|>"]
enc = "{" + ", ".join("%s: %d" % (json_str(t), i) for i, t in enumerate(tokens)) + "}"
bpe = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
put("vocab", "tiny", enc.encode() + b"\n%%\n" + bpe.encode())
put("vocab", "tiny_raw_utf8", enc.encode("utf-8").replace(b"\\u0120", "\u0120".encode()) + b"\n%%\n" + bpe.encode())


# model: tiny llm.c GPT-2 files, header [magic, version, maxT, V, L, NH, C, Vp], then the parameters
def gpt2_file(version, maxT=4, V=8, L=1, NH=1, C=4, Vp=8):
    n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
    head = struct.pack("<256i", *([20240326, version, maxT, V, L, NH, C, Vp] + [0] * 248))
    if version == 3:
        return head + struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)])
    return head + struct.pack("<%dH" % n, *[0x3c00 + (i % 7) for i in range(n)])

put("model", "fp32_tiny", gpt2_file(3))
put("model", "bf16_tiny", gpt2_file(5))
put("model", "fp32_two_layers", gpt2_file(3, maxT=8, V=5, L=2, NH=2, C=4, Vp=16))


# llama_model: header [magic 20261129, version 3, L, C, NH, NKV, F, V, Vp, maxT, rope theta bits, rmsnorm eps bits]
def llama_file(L=1, C=4, NH=2, NKV=1, F=4, V=8, Vp=128, maxT=4, theta=10000.0, eps=1e-5):
    kv = NKV * (C // NH)
    n = Vp * C + L * (C + C * C + 2 * kv * C + C * C + C + 3 * F * C) + C + Vp * C
    bits = lambda x: struct.unpack("<i", struct.pack("<f", x))[0]
    head = struct.pack("<256i", *([20261129, 3, L, C, NH, NKV, F, V, Vp, maxT, bits(theta), bits(eps)] + [0] * 244))
    return head + struct.pack("<%df" % n, *[0.01 * (i % 5) for i in range(n)])

put("llama_model", "fp32_tiny", llama_file())
put("llama_model", "fp32_two_layers_gqa", llama_file(L=2, C=8, NH=4, NKV=2, F=6, V=130, Vp=256, maxT=8))
put("llama_model", "truncated", llama_file()[:-4])

# ckpt: manifest.json, separator, state_rank0.bin (CkptState header of 256 bytes, then the optimizer blob)
def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h


def state_file(blob, world=1, step=10):
    datapos = struct.pack("<QQQQiiQ", 0, 3, 1337, 100, 0, world, 0)
    head = struct.pack("<IIIiiiQ", 0x504B4353, 1, 256, 0, world, step, 42) + datapos
    head += struct.pack("<QQQQiiiiq120s", len(blob), fnv1a64(blob), 0x1234, 300, 1, 0, 4, 64, 256,
                        b"d2c32h4t32")
    assert len(head) == 256
    return head + blob


blob = bytes(range(64))
st = state_file(blob)
man = ('{"format": "scape-ckpt", "version": 1, "world": 1, "step": 10, "files": [{"name": "state_rank0.bin", '
       '"bytes": %d}]}\n' % len(st)).encode()
put("ckpt", "complete", man + b"\n%%\n" + st)
put("ckpt", "wrong_size", man.replace(b'"bytes": ', b'"bytes": 1') + b"\n%%\n" + st)
put("ckpt", "bad_hash", man + b"\n%%\n" + st[:-1] + b"\x00")

# jsonl: one line of a .jsonl input
for name, line in [("simple", b'{"text": "Hello, world!", "id": 3}'),
                   ("escapes", b'{"meta": {"a": [1, 2, {"b": "}"}]}, "text": "tab\\tquote\\"\\u00e9\\ud83d\\ude00\\ud800 end"}'),
                   ("empty_key", b'{"": "empty key", "text": ""}'),
                   ("not_string", b'{"text": 42}'),
                   ("truncated", b'{"text": "no end')]:
    put("jsonl", name, line)

# tasks: the first byte picks the format (0 hellaswag, 1 arc, 2 piqa, 3 lambada, 4 boolq, 5 copa, 6 mmlu, 7 jsonl)
for k, name in enumerate(["hellaswag", "arc", "piqa", "lambada", "boolq", "copa", "mmlu", "generic"]):
    ext = "txt" if name == "lambada" else "jsonl"
    put("tasks", name, bytes([k]) + open("test/eval/%s.%s" % (name, ext), "rb").read())
put("tasks", "bad_label", bytes([7]) + b'{"context": "a", "choices": [" b"], "label": 5}\n')
put("tasks", "bad_utf8", bytes([3]) + b'one two thr\xc3\n')
