#!/usr/bin/env bash
# Installs the Debian packages the project needs (run as root, or via sudo). Safe to run again.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
pkgs="build-essential libopenblas-dev libopenblas0-openmp libopenmpi-dev openmpi-bin libpcre2-dev libxxhash-dev nodejs npm python3-torch python3-numpy gnuplot-nox"
# JSON of the downstream task files (eval/tasks.c: HellaSwag, ARC, PIQA, BoolQ, COPA, MMLU, generic JSONL)
pkgs="$pkgs libjansson-dev"
# hardening: clang + its run-time libraries for the libFuzzer harnesses (`make fuzz`), cppcheck for `make cppcheck`
pkgs="$pkgs clang libclang-rt-14-dev cppcheck"
# SLURM for test/test_slurm.sh: a real one-node cluster (scripts/slurm_local.sh) runs the batch job
pkgs="$pkgs slurm-wlm munge"
missing=""
for p in $pkgs; do
    # nodejs may come from another source that also provides npm; accept any installed node + npm
    if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
    if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends $missing
fi
