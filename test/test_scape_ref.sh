#!/usr/bin/env bash
# test/test_scape_ref.sh DRIVER - optim/dist_scape.c's SCAPE against an independent float64 numpy implementation of
# SCAPE.md section 3 (test/scape_ref.py) on a toy least-squares problem, step by step (theta, m, every rank's r,
# masks exactly, gradient norm): 1-3 ranks, with and without clipping, density warm-up and a fixed d=0.01; and the
# same-bytes variants of issue 31 (catchup, tensor-nu, residual-decay), each with a control run in which the
# reference runs the faithful algorithm against the variant's dump and must FAIL (so the variant changes something
# the comparison sees); then PowerSGD (test/powersgd_ref.py), 1-bit Adam (test/onebit_ref.py) and DeMo (test/demo_ref.py) against their own
# float64 references, each with deliberate-mistake controls that must FAIL; and DiLoCo (test/diloco_ref.py) and
# SparseLoCo (test/sparseloco_ref.py) likewise.
# Needs /usr/bin/python3 with numpy. Prints "ok <name>" / "FAIL <name>: ..." per case; exits non-zero on failure.
set -uo pipefail
cd "$(dirname "$0")/.."
drv=${1:?usage: $0 build/scape_ref_driver}
[ -x "$drv" ] || { echo "FAIL scape_ref: $drv not built; run make $drv"; exit 1; }
/usr/bin/python3 -c "import numpy" 2> /dev/null || { echo "FAIL scape_ref: /usr/bin/python3 has no numpy; run make deps (python3-numpy)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpi=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none)
fail=0
# name ranks steps density warmup clip [variant param] (grad norms are 25-65 here: clip 30 bites on most steps,
# 0 is off)
while read -r name np steps dens warm clip variant param; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" "$dens" "$warm" "$clip" $variant $param < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/scape_ref.py "$tmp/$name" "$dens" "$warm" "$clip" "$name" $variant $param || fail=1
    if [ -n "$variant" ]; then # the control: the faithful reference must not match the variant's run
        if /usr/bin/python3 test/scape_ref.py "$tmp/$name" "$dens" "$warm" "$clip" "$name-control" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control: the faithful reference matches the $variant run: the variant changes nothing"; fail=1
        else
            echo "ok $name-control (the faithful reference differs: $(cut -c1-90 "$tmp/ctl"))"
        fi
    fi
done <<'CASES'
scape_ref_n1_d0.1_warm5 1 30 0.1 5 0
scape_ref_n2_d0.1_warm5_clip 2 30 0.1 5 30
scape_ref_n3_d0.01_clip 3 30 0.01 0 30
scape_ref_catchup_n2_d0.1_warm5_clip 2 30 0.1 5 30 catchup 4
scape_ref_catchup_n3_d0.01 3 30 0.01 0 0 catchup 8
scape_ref_tensor_nu_n2_d0.1_warm5_clip 2 30 0.1 5 30 tensor-nu 4
scape_ref_tensor_nu_n1_d0.01 1 30 0.01 0 0 tensor-nu 3
scape_ref_residual_decay_n3_d0.1_warm5_clip 3 30 0.1 5 30 residual-decay 0.8
scape_ref_residual_decay_n2_d0.01 2 30 0.01 0 0 residual-decay 0.5
CASES
# name ranks steps rank clip
while read -r name np steps R clip; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" 1 0 "$clip" powersgd "$R" < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/powersgd_ref.py "$tmp/$name" "$R" "$clip" "$name" || fail=1
    for mistake in no-ef no-orth no-warm; do
        if /usr/bin/python3 test/powersgd_ref.py "$tmp/$name" "$R" "$clip" "$name-$mistake" "$mistake" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control-$mistake: a reference with the mistake $mistake matches the C"; fail=1
        else
            echo "ok $name-control-$mistake (the reference with the mistake differs)"
        fi
    done
done <<'CASES'
powersgd_ref_n1_r1_clip 1 30 1 30
powersgd_ref_n2_r2 2 30 2 0
powersgd_ref_n3_r3_clip 3 30 3 30
CASES
# 1-bit Adam (issue 33): name ranks steps freeze clip controls (the server-side control only on 2+ ranks: on one rank
# the worker's signs with one scale per tensor are what the server would send, so its error stays 0)
while read -r name np steps F clip controls; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" 1 0 "$clip" onebit-adam "$F" < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/onebit_ref.py "$tmp/$name" "$F" "$clip" "$name" || fail=1
    for mistake in ${controls//,/ }; do
        if /usr/bin/python3 test/onebit_ref.py "$tmp/$name" "$F" "$clip" "$name-$mistake" "$mistake" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control-$mistake: a reference with the mistake $mistake matches the C"; fail=1
        else
            echo "ok $name-control-$mistake (the reference with the mistake differs)"
        fi
    done
done <<'CASES'
onebit_ref_n1_f5_clip 1 30 5 30 no-worker-ef,one-scale
onebit_ref_n2_f3 2 30 3 0 no-worker-ef,no-server-ef,one-scale
onebit_ref_n3_f8_clip 3 30 8 30 no-worker-ef,no-server-ef,one-scale
CASES
# DeMo (issue 33): name ranks steps topk clip controls (averaging over the senders only shows where a block mixes
# coefficients sent by different numbers of ranks: 3 ranks, k 5; with 2 ranks and k 1 a shared coefficient is alone in
# its block, so sum and mean have the same sign and the control could not fail)
while read -r name np steps K clip controls; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" 1 0 "$clip" demo "$K" < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/demo_ref.py "$tmp/$name" "$K" "$clip" "$name" || fail=1
    for mistake in ${controls//,/ }; do
        if /usr/bin/python3 test/demo_ref.py "$tmp/$name" "$K" "$clip" "$name-$mistake" "$mistake" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control-$mistake: a reference with the mistake $mistake matches the C"; fail=1
        else
            echo "ok $name-control-$mistake (the reference with the mistake differs)"
        fi
    done
done <<'CASES'
demo_ref_n1_k3_clip 1 30 3 30 no-removal,no-dct
demo_ref_n2_k1 2 30 1 0 no-removal,no-dct
demo_ref_n3_k5_clip 3 30 5 30 no-removal,no-dct,sum
CASES
# DiLoCo (issue 45): name ranks steps spec clip controls (the pseudo-gradients summed instead of averaged only shows on
# 2+ ranks; 30 steps is not a multiple of H, so the last step's outer step is checked too)
while read -r name np steps spec clip controls; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" 1 0 "$clip" diloco "$spec" < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/diloco_ref.py "$tmp/$name" "$spec" "$clip" "$name" || fail=1
    for mistake in ${controls//,/ }; do
        if /usr/bin/python3 test/diloco_ref.py "$tmp/$name" "$spec" "$clip" "$name-$mistake" "$mistake" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control-$mistake: a reference with the mistake $mistake matches the C"; fail=1
        else
            echo "ok $name-control-$mistake (the reference with the mistake differs)"
        fi
    done
done <<'CASES'
diloco_ref_n1_h4_clip 1 30 diloco-h=4 30 sign,plain,reset
diloco_ref_n2_h5_adams 2 30 diloco-h=5,diloco-inner=adams 0 sign,plain,sum,reset
diloco_ref_n3_h4_clip 3 30 diloco-h=4,diloco-outer-lr=0.5,diloco-outer-momentum=0.8 30 sign,plain,sum,reset
CASES
# SparseLoCo (issue 45): name ranks steps spec clip controls (chunks of 64 with top-5 cut the toy's tensors of 320, 8,
# 192, 24, 192 elements where flat chunks of the whole vector would not; summing instead of averaging only shows on
# 2+ ranks; bits 3 has levels the 2-bit grid lacks); and its shared mask (--sparseloco-mask shared: the owners' top-k
# one outer step ahead, checked exactly; controls: each rank's own masks, and the mask chosen at the step itself)
while read -r name np steps spec clip controls; do
    if ! "${mpi[@]}" -np "$np" "$drv" "$tmp/$name" "$steps" 1 0 "$clip" sparseloco "$spec" < /dev/null > "$tmp/$name.log" 2>&1; then
        echo "FAIL $name: driver failed: $(tail -1 "$tmp/$name.log")"; fail=1; continue
    fi
    /usr/bin/python3 test/sparseloco_ref.py "$tmp/$name" "$spec" "$clip" "$name" || fail=1
    for mistake in ${controls//,/ }; do
        if /usr/bin/python3 test/sparseloco_ref.py "$tmp/$name" "$spec" "$clip" "$name-$mistake" "$mistake" > "$tmp/ctl" 2>&1; then
            echo "FAIL $name-control-$mistake: a reference with the mistake $mistake matches the C"; fail=1
        else
            echo "ok $name-control-$mistake (the reference with the mistake differs)"
        fi
    done
done <<'CASES'
sparseloco_ref_n1_h4_c64_k5_clip 1 30 sparseloco-h=4,sparseloco-chunk=64,sparseloco-topk=5 30 decay,rounding,chunks
sparseloco_ref_n2_h5_c64_k3_adams 2 30 sparseloco-h=5,sparseloco-chunk=64,sparseloco-topk=3,sparseloco-inner=adams 0 decay,rounding,chunks,sum
sparseloco_ref_n3_h4_c64_k5_b3_clip 3 30 sparseloco-h=4,sparseloco-chunk=64,sparseloco-topk=5,sparseloco-bits=3,sparseloco-beta=0.9,sparseloco-alpha=0.8 30 decay,rounding,chunks,sum
sparseloco_ref_shared_n1_h4_c64_k5_clip 1 30 sparseloco-h=4,sparseloco-chunk=64,sparseloco-topk=5,sparseloco-mask=shared 30 decay,rounding,chunks,own,stale
sparseloco_ref_shared_n2_h5_c64_k3_adams 2 30 sparseloco-h=5,sparseloco-chunk=64,sparseloco-topk=3,sparseloco-inner=adams,sparseloco-mask=shared 0 decay,rounding,chunks,sum,own,stale
sparseloco_ref_shared_n3_h4_c64_k5_clip 3 30 sparseloco-h=4,sparseloco-chunk=64,sparseloco-topk=5,sparseloco-mask=shared 30 decay,rounding,chunks,sum,own,stale
CASES
exit $fail
