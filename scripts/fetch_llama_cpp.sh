#!/usr/bin/env bash
# scripts/fetch_llama_cpp.sh [DATA_DIR]  (DATA_DIR defaults to "data")
#
# Installs llama.cpp's CPU build for the GGUF export test: node-llama-cpp 3.21.1 and its prebuilt linux-x64
# binaries (@node-llama-cpp/linux-x64 3.21.1), with every dependency pinned and checked against the sha512 in
# test/gguf/package-lock.json (`npm ci` refuses a package whose checksum differs), into
# DATA_DIR/npm/node-llama-cpp/node_modules. The GPU builds (CUDA, Vulkan) are optional dependencies of the package
# and are left out; no install script runs (the prebuilt binaries need none: the test loads them with
# getLlama({gpu: false, build: "never"})). A second run with the same lockfile does nothing (stamp).
# Not for: running llama.cpp (test/test_gguf.mjs does).
set -euo pipefail
data="${1:-data}"
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$data/npm/node-llama-cpp"
die() { echo "error: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm not found; install it (scripts/install_deps.sh)"
want=$(cat "$here/test/gguf/package.json" "$here/test/gguf/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$want" ] && [ -d "$dest/node_modules/node-llama-cpp" ]; then
    exit 0
fi
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
cp "$here/test/gguf/package.json" "$here/test/gguf/package-lock.json" "$dest.tmp/"
echo "installing node-llama-cpp 3.21.1 (llama.cpp, CPU) into $dest" >&2
log=$(mktemp)
if ! (cd "$dest.tmp" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel error) >"$log" 2>&1; then
    why=$(grep -m1 -iE "code|error" "$log" | tr -s " " || true)
    rm -f "$log"
    rm -rf "$dest.tmp"
    die "npm ci of test/gguf/package-lock.json failed (${why:-no details}); check the network and the registry" \
        "(npm config get registry)"
fi
rm -f "$log"
got=$(node -e 'console.log(require(require("path").resolve(process.argv[1])).version)' "$dest.tmp/node_modules/node-llama-cpp/package.json")
[ "$got" = "3.21.1" ] || die "npm installed node-llama-cpp $got, expected 3.21.1; check test/gguf/package-lock.json"
[ -f "$dest.tmp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ] ||
    die "the linux-x64 binaries of node-llama-cpp are missing from $dest.tmp; this test needs an x86-64 Linux machine"
echo "$want" >"$dest.tmp/.stamp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
