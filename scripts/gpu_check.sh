#!/usr/bin/env bash
# scripts/gpu_check.sh - every GPU check of the CUDA backend in one run (under 8 minutes of GPU time on an H200 by
# its own estimate: PLAN=1), writing ONE report file, each line as its check finishes. Meant for a fresh GPU
# machine: driver + CUDA toolkit (or only a Python env's nvidia/*/lib), maybe no network, no Debian packages, no
# MPI. It finds the libraries, builds what it can (or takes binaries built beforehand), runs what it has, and
# reports each check as PASS, FAIL or NOT RUN (with the reason; NOT RUN never counts as passed), with the seconds
# since the start. Exits non-zero if any check failed or could not run.
#
# Usage: scripts/gpu_check.sh [REPORT]      (default out/gpu_check/report.txt)
#   PLAN=1       runs nothing: lists every check in the order below with its estimated GPU-machine seconds and
#                the total; exits 1 if the total is over BUDGET_S (default 470) or 480 s. Works on any machine.
#   PREBUILD=1   builds every binary the run needs (GPU_ARCH, default "90") on this machine (a CPU machine will
#                do: nvcc needs no GPU), lists them and exits; take the tree to the GPU machine and run PREBUILT=1.
#   PREBUILT=1   builds nothing: checks that every binary is there, finds its libraries (ldd) and has code for this
#                GPU (cuobjdump: its sm_XX, or PTX it can JIT-compile), then runs. SKIP_BUILD=1 skips builds unchecked.
#   DATA=dir     token shards (<dir>/sotu/gpt2/sotu_{train,val}_000000.bin); default data, else a synthetic
#                shard is written with python3 (the training checks only compare runs, so any tokens do)
#   JOBS=n       parallel build jobs (default: all cores)
#   BUDGET_S     seconds after which the remaining training and throughput checks are NOT RUN (default 470)
#   PEAK_FLOPS   bf16 dense peak of one GPU for MFU (default 989e12, H100/H200 SXM)
#   CPU_DRY=1    self-test of this script without a GPU: the training checks run train_gpt in place of both CUDA
#                trainers (labelled DRY in the report; the exit status is still non-zero: GPU checks did not run)
# The checks, in the order of what they risk (a failure early says the most and costs the least GPU time):
#   0 environment: the driver against the CUDA runtime (CUDA 13 needs a driver >= 580; older fails every check
#     at cudaGetDeviceCount), the cuDNN version (9.10.0-9.10.1 are refused: the cuDNN checks are then NOT RUN);
#   1 kernels against their CPU references (dev/cuda/*.cu, bf16 and fp32, with timings), gpu_probe first;
#   2 whole models against the CPU trainers: the model tests (test/gpu/test_gpt2cu, test_llamacu, cuDNN attention
#     against the float64 reference and cuBLAS), then 10 training steps of train_gptcu_fp32 / train_gptcu and the
#     Llama trainers against train_gpt / train_llama (itself checked against PyTorch), two identical runs and
#     save/resume bitwise, and the cuDNN trainers against cuBLAS attention. Every run here is at T = 128, a length
#     every cuDNN 9 plans (before 9.16 the backward needs T % 128 == 0);
#   3 the device update against the host update: the updater tests, device vs --update host (GPT-2 and Llama),
#     2 ranks sharing the GPU == 1 rank accumulating, ZeRO-1 == no ZeRO with ranks in sync;
#   4 SCAPE on the device against the host SCAPE: the SCAPE updater tests, device vs CPU trainer and vs host
#     update (bitwise in fp32), mask statistics, the offloaded residual, ZeRO-1; then a NaN step skipped and a
#     CPU checkpoint resumed on the GPU;
#   5 throughput and memory (last: they judge speed, not correctness): GPT-2 124M and 350M at T=1024 (tokens/s,
#     MFU, peak memory), cuDNN against cuBLAS attention, Llama-500M with SCAPE d=0.01 against AdamS, Llama-1.8B
#     with the residual offloaded and with ZeRO-1 on 2 ranks.
set -u
cd "$(dirname "$0")/.."
REPORT=${1:-out/gpu_check/report.txt}
WORK=out/gpu_check
mkdir -p "$WORK" "$(dirname "$REPORT")"
: > "$REPORT"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
PEAK_FLOPS=${PEAK_FLOPS:-989e12}
BUDGET_S=${BUDGET_S:-470}
PLAN=$([ "${PLAN:-0}" = 1 ] && echo 1)
[ "${PREBUILT:-0}" = 1 ] && SKIP_BUILD=1
[ -n "$PLAN" ] && SKIP_BUILD=1
START=$(date +%s)
npass=0; nfail=0; nnot=0; plan_s=0; plan_n=0

since() { echo $(( $(date +%s) - START )); }
log() { echo "$*" | tee -a "$REPORT"; }
# PLAN=1: every check is listed once, in order, with the estimate of what it runs (est_of); nothing runs
planned() { plan_n=$((plan_n + 1)); log "$(printf 'check   %-52s (total so far ~%d s)' "$1" "$plan_s")"; }
pass() { if [ -n "$PLAN" ]; then planned "$1"; return; fi; npass=$((npass + 1)); log "PASS    [+$(since) s] $1${2:+: $2}"; }
fail() { if [ -n "$PLAN" ]; then planned "$1"; return; fi; nfail=$((nfail + 1)); log "FAIL    [+$(since) s] $1: $2"; }
notrun() { if [ -n "$PLAN" ]; then planned "$1"; return; fi; nnot=$((nnot + 1)); log "NOT RUN [+$(since) s] $1: $2"; }
# figure lines of a test's output (ok/FAIL/time and indented notes) go into the report verbatim
figures() { sed -n -E '/^(ok |FAIL |time |  )/p' "$1" | sed 's/^/        | /' >> "$REPORT"; }
# exists PATH: true in PLAN mode (the file a real run would have made), else whether it exists
exists() { [ -n "$PLAN" ] || [ -e "$1" ]; }

# Estimated seconds on an H200 machine for each thing the run does (the plan's arithmetic; calibrate from the
# [+N s] stamps of the first real report). Process start with CUDA context and cuBLAS about 1 s; a CPU reference
# trainer's 10 steps of d4c256 at B=4, T=128 about 2 s; host initialisation of a model about 1 s per 100M
# parameters; steps at T=1024 / 2048 as H100 figures of llm.c-like code suggest.
est_of() {
    case $1 in
        env_*) echo 2 ;;
        prebuilt_binaries) echo 5 ;;                        # ldd and cuobjdump over about 40 binaries
        gpu_probe) echo 2 ;;
        kernel_matmul_*|kernel_attention_*|kernel_scape_*) echo 4 ;;  # their timings run at GPT-2 124M's sizes
        kernel_*) echo 2 ;;
        model_updater_*|model_gpt2cu_update_*|model_llamacu_update_*) echo 10 ;;  # include a 124M-parameter update
        model_scape_updater_*) echo 15 ;;
        model_*) echo 5 ;;
        updater_2_ranks_one_gpu|scape_updater_2_ranks_one_gpu) echo 20 ;;
        run:cpu|run:scape_cpu|run:llama_cpu) echo 3 ;;      # the CPU trainer: d4c256 / l4c256, 10 steps of B=4 T=128
        run:two_ranks*|run:scape_two_ranks*) echo 5 ;;      # mpirun and two CUDA contexts
        run:*) echo 3 ;;                                    # one CUDA trainer: start, 10 small steps
        throughput_gpt2_124M_d12_host_update) echo 12 ;;    # 6 steps, each with the CPU's AdamW over 124M
        throughput_gpt2_124M_d12*) echo 10 ;;               # host init 1 s, cuBLASLt plans, 12 steps of B=32 T=1024
        throughput_gpt2_350M_d24) echo 15 ;;
        throughput_llama_500M*) echo 18 ;;                  # host init 5 s, 8 steps of B=8 T=2048
        memory_llama_500m_scape*_2_ranks*) echo 18 ;;       # two processes initialise 0.5B parameters each
        memory_llama_500m_scape*) echo 12 ;;
        memory_llama_1.8b_scape*_2_ranks*) echo 45 ;;
        memory_llama_1.8b_scape*) echo 30 ;;                # 18 s of host init, 4 steps
        *) echo 3 ;;
    esac
}
# plan_cost NAME: in PLAN mode, adds NAME's estimate to the total and prints it; returns 0 in PLAN mode (the caller
# then skips the real work), 1 otherwise
plan_cost() {
    [ -n "$PLAN" ] || return 1
    local e; e=$(est_of "$1")
    plan_s=$((plan_s + e))
    log "$(printf '  runs  %-52s ~%3d s' "${1#run:}" "$e")"
    return 0
}
over_budget() { # over_budget NAME: 0 (and NOT RUN) if the real run has spent BUDGET_S; never in PLAN mode
    [ -n "$PLAN" ] && return 1
    if [ "$(since)" -gt "$BUDGET_S" ]; then notrun "$1" "time budget of $BUDGET_S s spent"; return 0; fi
    return 1
}

log "== gpu_check $(date -u +%FT%TZ) on $(hostname)${PLAN:+ (PLAN: nothing runs; estimates for an H200 machine)}"
# ---------------------------------------------------------------- 0. environment: driver, toolkit, cuDNN
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$REPORT"
else
    log "gpu: nvidia-smi not found"
fi
NVCC=""
for c in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc /opt/cuda/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && { NVCC=$c; break; }
done
CUDA_HOME=${CUDA_HOME:-$([ -n "$NVCC" ] && dirname "$(dirname "$NVCC")")}
# a Python env's CUDA wheels (nvidia-cublas-cu12, ...) keep their libraries in site-packages/nvidia/*/lib
LIBDIRS=""
for py in python3 python; do
    command -v $py > /dev/null || continue
    d=$($py -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null) || continue
    for l in "$d"/*/lib; do [ -d "$l" ] && LIBDIRS="$LIBDIRS${LIBDIRS:+:}$l"; done
    break
done
[ -n "$LIBDIRS" ] && export LD_LIBRARY_PATH="$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log "nvcc: ${NVCC:-none} ($([ -n "$NVCC" ] && "$NVCC" --version | tail -1))"
log "extra library dirs: ${LIBDIRS:-none}"
have() { command -v "$1" > /dev/null; }
# can the C compiler link against a library? (OpenBLAS and PCRE2 for the CPU reference trainer)
links() { echo 'int main(void){return 0;}' | ${CC:-cc} -x c - -o "$WORK/.links" "$@" > /dev/null 2>&1; }
HAVE_BLAS=0; links -lopenblas && HAVE_BLAS=1
HAVE_PCRE=0; links -lpcre2-8 && HAVE_PCRE=1
HAVE_MPI=0; have mpicc && have mpirun && HAVE_MPI=1
log "openblas: $HAVE_BLAS  pcre2: $HAVE_PCRE  mpi: $HAVE_MPI  python3: $(have python3 && echo 1 || echo 0)"

# the CUDA major version the binaries use: nvcc's, else the dynamic libcudart a prebuilt trainer links
CUDA_MAJOR=""
[ -n "$NVCC" ] && CUDA_MAJOR=$("$NVCC" --version 2>/dev/null | sed -n -E 's/.*release ([0-9]+)\..*/\1/p' | head -1)
[ -z "$CUDA_MAJOR" ] && [ -x ./train_gptcu ] && CUDA_MAJOR=$(ldd ./train_gptcu 2>/dev/null | sed -n -E 's/.*libcudart\.so\.([0-9]+).*/\1/p' | head -1)
# the oldest driver branch each CUDA major's runtime accepts (NVIDIA's compatibility table)
need_driver() { case $1 in 13) echo 580 ;; 12) echo 525 ;; 11) echo 450 ;; *) echo 0 ;; esac; }
NO_GPU_WHY=""
if plan_cost env_driver; then planned env_driver
elif ! have nvidia-smi; then notrun env_driver "nvidia-smi not found: the driver's version is unknown (gpu_probe decides)"
else
    drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    need=$(need_driver "${CUDA_MAJOR:-13}")
    if [ -z "$drv" ]; then fail env_driver "nvidia-smi gave no driver version: $(nvidia-smi 2>&1 | head -1)"; NO_GPU_WHY="nvidia-smi sees no GPU"
    elif [ "${drv%%.*}" -lt "$need" ]; then
        NO_GPU_WHY="driver $drv is older than the CUDA ${CUDA_MAJOR:-13} runtime needs (>= $need)"
        fail env_driver "$NO_GPU_WHY: every CUDA call would fail at cudaGetDeviceCount ('CUDA driver version is insufficient'); update the driver, or build with an older toolkit (CUDA_HOME=...)"
    else pass env_driver "driver $drv, CUDA ${CUDA_MAJOR:-?} runtime (needs >= $need)"; fi
fi
# cuDNN: the library the cuDNN trainers load (libcudnn.so.9), its version from the file it resolves to
CUDNN_REASON=""
if plan_cost env_cudnn; then planned env_cudnn
else
    cudnn_lib=""
    for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" ${LIBDIRS//:/ } /usr/lib/x86_64-linux-gnu /usr/lib64; do
        [ -e "$d/libcudnn.so.9" ] && { cudnn_lib=$(readlink -f "$d/libcudnn.so.9"); break; }
    done
    [ -z "$cudnn_lib" ] && cudnn_lib=$(ldconfig -p 2>/dev/null | sed -n -E 's/.*libcudnn\.so\.9 .*=> (.*)/\1/p' | head -1)
    [ -n "$cudnn_lib" ] && cudnn_lib=$(readlink -f "$cudnn_lib")
    # the version: the file's name (libcudnn.so.9.x.y), else the library's own cudnnGetVersion() (wheels and the
    # toolkit ship a bare libcudnn.so.9), read by python3's ctypes or by the graph test's first line
    cv=$(basename "${cudnn_lib:-none}" | sed -n -E 's/^libcudnn\.so\.([0-9]+\.[0-9]+\.[0-9]+)$/\1/p')
    if [ -z "$cv" ] && [ -n "$cudnn_lib" ]; then
        v=$(python3 -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cudnnGetVersion())' "$cudnn_lib" 2>/dev/null)
        [ -z "$v" ] && [ -x build/cuda/test_attention_cudnn_graph ] &&
            v=$(build/cuda/test_attention_cudnn_graph 2>/dev/null | sed -n -E '1s/^cuDNN ([0-9]+).*/\1/p')
        [ -n "$v" ] && cv="$((v / 10000)).$((v % 10000 / 100)).$((v % 100))"
    fi
    if [ -z "$cudnn_lib" ]; then CUDNN_REASON="libcudnn.so.9 not found (CUDA_HOME/lib64, a Python env's nvidia/cudnn, ldconfig)"
        notrun env_cudnn "$CUDNN_REASON"
    elif [ "$cv" = 9.10.0 ] || [ "$cv" = 9.10.1 ]; then
        CUDNN_REASON="cuDNN $cv is refused (known bf16 attention forward bugs in 9.10.0-9.10.1): the trainers use cuBLAS attention"
        notrun env_cudnn "$CUDNN_REASON"
    else
        note=""
        [ -n "$cv" ] && [ "$(echo "$cv" | awk -F. '{ print $1 * 10000 + $2 * 100 + $3 }')" -lt 91600 ] &&
            note="; before 9.16 the attention backward needs T % 128 == 0: every cuDNN check here runs at T=128"
        pass env_cudnn "cuDNN ${cv:-of unknown version} at $cudnn_lib$note"
    fi
fi
# the top Makefile links the CPU trainers with $(MPICC); without MPI nothing that needs the loop can be built
GPU_ARCH=${GPU_ARCH:-$([ "${PREBUILD:-0}" = 1 ] && echo 90 || echo "80 90")}
MAKE_ARGS=(NVCC="${NVCC:-nvcc}" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" CUDA_LIB_DIRS="$LIBDIRS" GPU_ARCH="$GPU_ARCH")

# ---------------------------------------------------------------- build (or take prebuilt binaries)
build() { # build NAME TARGET...: 0 if built; the log is $WORK/build_NAME.log
    local name=$1; shift
    [ "${SKIP_BUILD:-0}" = 1 ] && return 0
    make -j"$JOBS" "${MAKE_ARGS[@]}" "$@" > "$WORK/build_$name.log" 2>&1
}
# the kernel tests (dev/cuda/<name>.cu) and whole-model tests every cuda/mk fragment registers
mapfile -t K_BINS < <(make -s --no-print-directory print-cuda-kernel-tests 2>/dev/null)
mapfile -t M_BINS < <(make -s --no-print-directory print-cuda-model-tests 2>/dev/null)
[ ${#K_BINS[@]} -gt 0 ] || K_BINS=(encoder layernorm gelu matmul attention classifier optimizer global_norm)
[ ${#M_BINS[@]} -gt 0 ] || M_BINS=(build/cuda/test_gpt2cu build/cuda-fp32/test_gpt2cu)
TRAIN_TARGETS=(train_gpt train_gptcu train_gptcu_fp32 train_llama train_llamacu train_llamacu_fp32)
[ "${CPU_DRY:-0}" = 1 ] && TRAIN_TARGETS=(train_gpt train_llama)
# without OpenBLAS the CPU reference links models/blas_fallback.c's plain sgemm (slower, same results to fp32 rounding)
fb=(); [ $HAVE_BLAS = 0 ] && { fb=(BLAS_FALLBACK=1); log "no OpenBLAS: the CPU reference uses models/blas_fallback.c's sgemm"; }
if [ -n "$PLAN" ]; then :
elif [ -z "$NVCC" ] && [ "${SKIP_BUILD:-0}" != 1 ]; then
    notrun build "no nvcc found (PATH, /usr/local/cuda*/bin); install the CUDA toolkit or set PATH, or PREBUILT=1"
elif [ "${SKIP_BUILD:-0}" != 1 ]; then
    t0=$(date +%s)
    # shared CPU objects first (both precisions link them), then each precision's tests in one parallel make
    build common_objs build/optim/optim.o build/common/util.o build/common/params.o build/common/rng.o ||
        fail build_common_objs "$(grep -m3 -E 'error' "$WORK/build_common_objs.log" | tr '\n' ' ')"
    build kernels_bf16 -k build/cuda/gpu_probe "${K_BINS[@]/#/build/cuda/test_}"
    build kernels_fp32 -k PRECISION=FP32 "${K_BINS[@]/#/build/cuda-fp32/test_}"
    for k in "${K_BINS[@]}"; do
        for dir in build/cuda build/cuda-fp32; do
            [ -x "$dir/test_$k" ] || fail "build_$dir/test_$k" "see $WORK/build_kernels_*.log: $(grep -m2 -E 'error' "$WORK"/build_kernels_*.log | tr '\n' ' ')"
        done
    done
    log "kernel tests built in $(( $(date +%s) - t0 )) s"
    build models -k "${fb[@]}" "${M_BINS[@]}" || log "some model tests did not build: $WORK/build_models.log"
    if [ $HAVE_MPI = 1 ]; then
        build trainers "${TRAIN_TARGETS[@]}" || fail build_trainers "$(grep -m3 error "$WORK/build_trainers.log" | tr '\n' ' ')"
        # the cuDNN trainers on their own: a machine without cuDNN must not cost the other training checks
        [ "${CPU_DRY:-0}" = 1 ] || build trainer_cudnn train_gptcu_cudnn train_llamacu_cudnn ||
            log "the cuDNN trainers did not build: $(grep -m2 -E 'error|cannot find' "$WORK/build_trainer_cudnn.log" | tr '\n' ' ')"
    fi
    log "everything built in $(( $(date +%s) - t0 )) s"
fi
ALL_BINS=(build/cuda/gpu_probe "${K_BINS[@]/#/build/cuda/test_}" "${K_BINS[@]/#/build/cuda-fp32/test_}" "${M_BINS[@]}"
          "${TRAIN_TARGETS[@]/#/./}" ./train_gptcu_cudnn ./train_llamacu_cudnn)
if [ "${PREBUILD:-0}" = 1 ]; then
    missing=0
    for b in "${ALL_BINS[@]}"; do
        if [ -x "$b" ]; then log "built   $b ($(du -h "$b" | cut -f1))"; else log "MISSING $b"; missing=$((missing + 1)); fi
    done
    log "== PREBUILD: $(( ${#ALL_BINS[@]} - missing )) of ${#ALL_BINS[@]} binaries for GPU_ARCH=\"$GPU_ARCH\"; on the GPU machine: PREBUILT=1 scripts/gpu_check.sh"
    [ $missing -eq 0 ]; exit
fi
# PREBUILT=1: every binary present, its libraries found, and code for this GPU's architecture in it
if [ -n "$PLAN" ]; then plan_cost prebuilt_binaries; planned prebuilt_binaries
elif [ "${PREBUILT:-0}" = 1 ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    probs=""
    for b in "${ALL_BINS[@]}"; do
        if [ ! -x "$b" ]; then probs="$probs $b missing;"; continue; fi
        nf=$(ldd "$b" 2>/dev/null | awk '/not found/ { printf "%s ", $1 }')
        [ -n "$nf" ] && probs="$probs $b needs $nf;"
        if [ -n "$cc" ] && have cuobjdump && [[ $b != ./train_gpt && $b != ./train_llama ]]; then
            archs=$(cuobjdump --list-elf "$b" 2>/dev/null | sed -n -E 's/.*\.sm_([0-9]+a?)\..*/\1/p' | sort -u | tr '\n' ' ')
            ptx=$(cuobjdump --list-ptx "$b" 2>/dev/null | sed -n -E 's/.*\.sm_([0-9]+)\..*/\1/p' | sort -nu | tail -1)
            if [ -n "$archs" ] && [[ " $archs" != *" $cc "* ]] && { [ -z "$ptx" ] || [ "$ptx" -gt "$cc" ]; }; then
                probs="$probs $b has sm_${archs// /,sm_}no PTX <= sm_$cc;"
            fi
        fi
    done
    if [ -z "$probs" ]; then pass prebuilt_binaries "${#ALL_BINS[@]} binaries, libraries found${cc:+, code for sm_$cc}"
    else fail prebuilt_binaries "${probs:0:900} (rebuild on a CPU machine: PREBUILD=1 GPU_ARCH=$cc scripts/gpu_check.sh)"; fi
fi

# ---------------------------------------------------------------- 1. kernels against their CPU references
run_test() { # run_test NAME TIMEOUT CMD...: PASS/FAIL from the exit status, figures into the report
    local name=$1 to=$2; shift 2
    if plan_cost "$name"; then planned "$name"; return 0; fi
    local a bin=""
    for a in "$@"; do case $a in build/*|./*) bin=$a; break ;; esac; done
    if [ ! -x "${bin:-$1}" ]; then notrun "$name" "${bin:-$1} was not built"; return 1; fi
    local t0; t0=$(date +%s)
    timeout "$to" "$@" > "$WORK/$name.log" 2>&1
    local rc=$? dt=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ] && grep -q '^ok ' "$WORK/$name.log" && ! grep -q '^FAIL ' "$WORK/$name.log"; then
        pass "$name" "${dt} s"
    elif [ $rc -eq 124 ]; then fail "$name" "timed out after $to s"
    else fail "$name" "exit $rc after ${dt} s: $(grep -m1 -E '^FAIL|error' "$WORK/$name.log")"; fi
    figures "$WORK/$name.log"
    return $rc
}
log "== 1. kernels against their CPU references"
NO_GPU=""
if [ -n "$NO_GPU_WHY" ]; then NO_GPU=1; log "$NO_GPU_WHY: every GPU check below is NOT RUN"
elif ! run_test gpu_probe 30 build/cuda/gpu_probe; then
    NO_GPU=1; NO_GPU_WHY="no usable GPU ($(grep -m1 FAIL "$WORK/gpu_probe.log" 2>/dev/null | cut -c1-200))"
    [ "$NO_GPU_WHY" = "no usable GPU ()" ] && NO_GPU_WHY="no usable GPU (gpu_probe did not run: see its line above)"
    log "no usable GPU: every GPU check below is NOT RUN"
fi
# bf16 (what the trainer runs) and fp32 (tight: catches e.g. an erf GELU epilogue where tanh is wanted)
# (fp32 with FP32_KERNELS=1 only: the fp32 model tests and training runs against the CPU trainers, 1e-4 and
# bitwise, cover the fp32 kernels, and 13 more processes cost the plan half a minute)
for k in "${K_BINS[@]}"; do
    for prec in bf16 $([ "${FP32_KERNELS:-0}" = 1 ] && echo fp32); do
        dir=build/cuda; [ $prec = fp32 ] && dir=build/cuda-fp32
        if [ -n "$NO_GPU" ]; then notrun "kernel_${k}_$prec" "$NO_GPU_WHY"; else run_test "kernel_${k}_$prec" 180 $dir/test_$k; fi
    done
done

# the model tests of test/gpu and dev/cuda, by what they compare: the update's (sections 3 and 4) and the rest (2)
model_test() { # model_test BIN
    local bin=$1 prec=bf16 name
    case $bin in *cuda-fp32/*) prec=fp32;; esac
    name="model_$(basename "$bin" | sed 's/^test_//')_$prec"
    if [ -n "$NO_GPU" ]; then notrun "$name" "$NO_GPU_WHY"; return; fi
    if [ -z "$PLAN" ] && [ ! -x "$bin" ] && [ $HAVE_MPI = 0 ]; then notrun "$name" "not built, and there is no MPI (the test may link the training loop)"; return; fi
    if [ -z "$PLAN" ] && [ ! -x "$bin" ]; then fail "build_$name" "$bin missing: $(grep -m3 -E 'error' "$WORK/build_models.log" 2>/dev/null | tr '\n' ' ')"; return; fi
    case $name in model_attention_cudnn*) [ -n "$CUDNN_REASON" ] && { notrun "$name" "$CUDNN_REASON"; return; } ;; esac
    run_test "$name" 300 "$bin"
}

# ---------------------------------------------------------------- training runs: setup
TRAIN_OK=1
reason=""
GT=./train_gptcu; GT32=./train_gptcu_fp32; LT=./train_llamacu; LT32=./train_llamacu_fp32; DRY=""
GTC=./train_gptcu_cudnn; LTC=./train_llamacu_cudnn
if [ "${CPU_DRY:-0}" = 1 ]; then GT=./train_gpt; GT32=./train_gpt; LT=./train_llama; LT32=./train_llama
    DRY="DRY(train_gpt) "; CUDNN_REASON="CPU_DRY=1"
    log "CPU_DRY=1: the training checks below run train_gpt in place of the CUDA trainers"
elif [ -n "$NO_GPU" ]; then TRAIN_OK=0; reason=$NO_GPU_WHY; fi
if [ -z "$PLAN" ]; then
    [ $HAVE_MPI = 0 ] && { TRAIN_OK=0; reason="no mpicc/mpirun (the shared training loop links Open MPI)"; }
    [ $HAVE_BLAS = 0 ] || [ $HAVE_PCRE = 0 ] && { TRAIN_OK=0; reason="${reason:+$reason; }OpenBLAS or PCRE2 missing"; }
    for b in "${TRAIN_TARGETS[@]}"; do [ $TRAIN_OK = 1 ] && [ ! -x "./$b" ] && { TRAIN_OK=0; reason="./$b was not built"; }; done
    [ -z "$CUDNN_REASON" ] && { [ ! -x "$GTC" ] || [ ! -x "$LTC" ]; } && CUDNN_REASON="$GTC or $LTC was not built (cuDNN 9 headers or libcudnn.so.9 missing?)"
fi
# cuDNN attention really ran in a trainer's output (the start-up line, and no fallback warning)?
cudnn_ran() { [ -n "$PLAN" ] && return 0; grep -q '^attention: cuDNN' "$1" && ! grep -q 'cuDNN attention is off' "$1"; }
cudnn_why_not() { grep -m1 -iE 'cudnn' "$1" | cut -c1-300; }
DATA=${DATA:-data}
TR=$DATA/sotu/gpt2/sotu_train_000000.bin; VA=$DATA/sotu/gpt2/sotu_val_000000.bin
if [ $TRAIN_OK = 1 ] && [ -z "$PLAN" ] && { [ ! -f "$TR" ] || [ ! -f "$VA" ]; }; then
    # synthetic shards in llm.c's layout: 256 int32 header (magic 20240520, version 1, token count), uint16 tokens
    if have python3; then
        mkdir -p "$WORK/data/sotu/gpt2"
        python3 - "$WORK/data/sotu/gpt2" <<'PY'
import struct, sys, random
random.seed(1)
for name, n in (("sotu_train_000000.bin", 200000), ("sotu_val_000000.bin", 40000)):
    toks = [random.randrange(50257) if random.random() < 0.3 else random.randrange(2000) for _ in range(n)]
    hdr = [20240520, 1, n] + [0] * 253
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", *hdr)); f.write(struct.pack("<%dH" % n, *toks))
PY
        DATA=$WORK/data; TR=$DATA/sotu/gpt2/sotu_train_000000.bin; VA=$DATA/sotu/gpt2/sotu_val_000000.bin
        log "data: synthetic shards in $DATA"
    else TRAIN_OK=0; reason="no token shards under $DATA and no python3 to write synthetic ones"; fi
fi
# Llama shards (uint32 tokens, magic 20240801 version 7, vocabulary 32000): the prepared Llama 2 corpus, else synthetic
LTR=$DATA/sotu/llama2/sotu_train_000000.bin; LVA=$DATA/sotu/llama2/sotu_val_000000.bin
if [ $TRAIN_OK = 1 ] && [ -z "$PLAN" ] && { [ ! -f "$LTR" ] || [ ! -f "$LVA" ]; }; then
    if have python3; then
        mkdir -p "$WORK/data/sotu/llama2"
        python3 - "$WORK/data/sotu/llama2" <<'PY'
import struct, sys, random
random.seed(2)
for name, n in (("sotu_train_000000.bin", 300000), ("sotu_val_000000.bin", 40000)):
    toks = [random.randrange(32000) if random.random() < 0.3 else random.randrange(3000) for _ in range(n)]
    hdr = [20240801, 7, n] + [0] * 253
    with open(sys.argv[1] + "/" + name, "wb") as f:
        f.write(struct.pack("<256i", *hdr)); f.write(struct.pack("<%dI" % n, *toks))
PY
        LTR=$WORK/data/sotu/llama2/sotu_train_000000.bin; LVA=$WORK/data/sotu/llama2/sotu_val_000000.bin
        log "data: synthetic Llama shards in $WORK/data/sotu/llama2"
    fi
fi
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
COMMON=(--model d4c256 --train "$TR" --val "$VA" --data "$DATA" --seq 128 --steps 10 --warmup 2 --lr 1e-3 --eval-every 0
        --eval-batches 2 --sample-every 0 --shuffle 0 --threads 4)
train_rows() { grep '"event": "train"' "$1" 2>/dev/null | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+),.*/\1 \2/'; }
# compare_losses NAME A.jsonl B.jsonl RTOL [FIRST_STEP]: every step's loss from FIRST_STEP (default 1) to 10 within
# RTOL relative (0: bitwise equal as printed), matched by step number; prints both columns
compare_losses() {
    if [ -n "$PLAN" ]; then planned "$DRY$1"; return; fi
    local out first=${5:-1}
    out=$(join <(train_rows "$2" | awk -v f="$first" '$1 >= f' | sort -k1,1) <(train_rows "$3" | awk -v f="$first" '$1 >= f' | sort -k1,1) |
        sort -n | awk -v r="$4" -v want=$((11 - first)) '
        { n++; d = $2 - $3; if (d < 0) d = -d; rel = d / ($3 < 0 ? -$3 : $3); if (rel > mx) mx = rel;
          printf "step %s: %s vs %s (rel %.2e)\n", $1, $2, $3, rel; if (rel > r) bad++ }
        END { printf "steps %d, max rel diff %.3e, tolerance %g\n", n, mx, r; exit (n < want || bad > 0) }')
    local rc=$?
    if [ $rc -eq 0 ]; then pass "$DRY$1" "$(echo "$out" | tail -1)"; else fail "$DRY$1" "$(echo "$out" | tail -1)"; fi
    echo "$out" | sed 's/^/        | /' >> "$REPORT"
}
# compare_mask_events NAME A.jsonl B.jsonl: the "mask" events (--mask-stats-every) of two runs: the same steps and
# tensors, every Jaccard equal as logged (%.9g of doubles both updates compute exactly alike), every energy within
# 1e-8 relative (double sums added in another order, printed to 9 digits)
compare_mask_events() {
    if [ -n "$PLAN" ]; then planned "$DRY$1"; return; fi
    local out
    if ! have python3; then notrun "$DRY$1" "no python3 to read the mask events"; return; fi
    out=$(python3 - "$2" "$3" <<'PY'
import json, sys
ev = [{e["step"]: e for e in map(json.loads, open(f)) if e.get("event") == "mask"} for f in sys.argv[1:3]]
a, b = ev
bad, worst, n, jbad = [], 0.0, 0, 0
if not a or sorted(a) != sorted(b): bad.append("mask events at steps %s vs %s" % (sorted(a), sorted(b)))
for t in sorted(set(a) & set(b)):
    x, y = a[t], b[t]
    if x["tensors"] != y["tensors"]: bad.append("step %d: tensors differ" % t); continue
    for k in ("jaccard_m", "jaccard_g", "mean_jaccard_m", "mean_jaccard_g"):
        u, v = x.get(k), y.get(k)
        u, v = (u, v) if isinstance(u, list) else ([u], [v])
        for i, (p, q) in enumerate(zip(u, v)):
            if p != q: bad.append("step %d: %s[%d] %s vs %s" % (t, k, i, p, q)); jbad += 1
    for k in ("energy_m", "energy_g", "mean_energy_m", "mean_energy_g"):
        u, v = x.get(k), y.get(k)
        u, v = (u, v) if isinstance(u, list) else ([u], [v])
        for p, q in zip(u, v):
            n += 1
            r = 0.0 if p == q else (abs(p - q) / abs(q) if p is not None and q is not None and q else float("inf"))
            worst = max(worst, r)
            if r > 1e-8: bad.append("step %d: %s %s vs %s" % (t, k, p, q))
print("%d mask events, %d energies, worst energy rel diff %.2e, %d jaccards differ%s" %
      (len(a), n, worst, jbad, "" if not bad else "; " + "; ".join(bad[:3])))
sys.exit(1 if bad else 0)
PY
)
    if [ $? -eq 0 ]; then pass "$DRY$1" "$out"; else fail "$DRY$1" "$out"; fi
}
trun() { # trun NAME BIN ARGS...: one run into $WORK/NAME, 0 on success (PLAN: its estimate, and 0)
    local name=$1; shift
    plan_cost "run:$name" && return 0
    over_budget "$name" && return 1
    rm -rf "$WORK/$name"
    timeout 300 "$@" --out "$WORK/$name" > "$WORK/$name.out" 2>&1 || { fail "$name" "run failed: $(tail -2 "$WORK/$name.out" | tr '\n' ' ')"; return 1; }
}

# ---------------------------------------------------------------- 2. whole models against the CPU trainers
log "== 2. whole models against the CPU trainers (T=128 throughout: every cuDNN 9 plans it)"
for bin in "${M_BINS[@]}"; do case $bin in *update*|*updater*) ;; *) model_test "$bin" ;; esac; done
LCOMMON=(--model l4c256h8kv2f688 --train "$LTR" --val "$LVA" --data "$DATA" --seq 128 --steps 10 --warmup 2 --lr 1e-3
         --eval-every 0 --eval-batches 2 --sample-every 0 --shuffle 0 --threads 4 --batch 4)
SC=(--optimizer scape --density 0.1 --density-warmup 3)
MEMM=500m; [ "${BIG:-0}" = 1 ] && MEMM=1.8b
if [ $TRAIN_OK = 1 ]; then
    trun cpu ./train_gpt "${COMMON[@]}" --batch 4 --ckpt-every 5 --keep-ckpts 0 &&
    trun gpu_fp32 $GT32 "${COMMON[@]}" --batch 4 &&
        compare_losses train_fp32_vs_cpu_10_steps "$WORK/gpu_fp32/log.jsonl" "$WORK/cpu/log.jsonl" 1e-4
    trun gpu_bf16 $GT "${COMMON[@]}" --batch 4 --ckpt-every 5 --keep-ckpts 0 &&
        compare_losses train_bf16_vs_cpu_10_steps "$WORK/gpu_bf16/log.jsonl" "$WORK/cpu/log.jsonl" 2e-2
    # two identical runs: bitwise equal losses and final model
    if trun gpu_bf16_again $GT "${COMMON[@]}" --batch 4 --ckpt-every 5 --keep-ckpts 0; then
        if diff <(train_rows "$WORK/gpu_bf16/log.jsonl") <(train_rows "$WORK/gpu_bf16_again/log.jsonl") > /dev/null &&
           cmp -s "$WORK/gpu_bf16/ckpt_10/model.bin" "$WORK/gpu_bf16_again/ckpt_10/model.bin"; then
            pass "${DRY}identical_runs_bitwise" "10 losses and ckpt_10/model.bin equal"
        else fail "${DRY}identical_runs_bitwise" "losses or ckpt_10/model.bin differ"; fi
    fi
    # save at 5, resume, continue to 10: bitwise equal to the uninterrupted run
    if exists "$WORK/gpu_bf16/ckpt_5" && trun gpu_bf16_resumed $GT "${COMMON[@]}" --batch 4 --resume "$WORK/gpu_bf16/ckpt_5"; then
        if diff <(train_rows "$WORK/gpu_bf16/log.jsonl" | awk '$1 > 5') <(train_rows "$WORK/gpu_bf16_resumed/log.jsonl") > /dev/null &&
           cmp -s "$WORK/gpu_bf16/ckpt_10/model.bin" "$WORK/gpu_bf16_resumed/ckpt_10/model.bin" &&
           cmp -s "$WORK/gpu_bf16/ckpt_10/state_rank0.bin" "$WORK/gpu_bf16_resumed/ckpt_10/state_rank0.bin"; then
            pass "${DRY}save_resume_bitwise" "steps 6-10 losses, model.bin and state_rank0.bin equal"
        else fail "${DRY}save_resume_bitwise" "resumed run differs from the uninterrupted one"; fi
    fi
    # Llama: the CUDA trainer against train_llama for 10 steps (GQA, RoPE, SwiGLU, untied head)
    if exists "$LTR"; then
        trun llama_cpu ./train_llama "${LCOMMON[@]}" &&
        trun llama_fp32 $LT32 "${LCOMMON[@]}" &&
            compare_losses llama_train_fp32_vs_cpu_10_steps "$WORK/llama_fp32/log.jsonl" "$WORK/llama_cpu/log.jsonl" 1e-4
        trun llama_bf16 $LT "${LCOMMON[@]}" &&
            compare_losses llama_train_bf16_vs_cpu_10_steps "$WORK/llama_bf16/log.jsonl" "$WORK/llama_cpu/log.jsonl" 2e-2
    else
        notrun llama_train_fp32_vs_cpu_10_steps "no Llama shards and no python3 to write synthetic ones"
        notrun llama_train_bf16_vs_cpu_10_steps "no Llama shards and no python3 to write synthetic ones"
    fi
    # cuDNN attention: train_gptcu_cudnn against train_gptcu (cuBLAS attention) over the same 10 steps, bf16 both
    if [ -n "$CUDNN_REASON" ]; then notrun cudnn_vs_cublas_bf16_10_steps "$CUDNN_REASON"; notrun cudnn_identical_runs_bitwise "$CUDNN_REASON"
    elif ! exists "$WORK/gpu_bf16/log.jsonl"; then notrun cudnn_vs_cublas_bf16_10_steps "the train_gptcu run (gpu_bf16) it compares with failed"
    elif trun gpu_bf16_cudnn $GTC "${COMMON[@]}" --batch 4; then
        if cudnn_ran "$WORK/gpu_bf16_cudnn.out"; then
            compare_losses cudnn_vs_cublas_bf16_10_steps "$WORK/gpu_bf16_cudnn/log.jsonl" "$WORK/gpu_bf16/log.jsonl" 1e-2
            # two identical cuDNN runs: bitwise equal losses, where cuDNN took the deterministic backward graph
            if [ -n "$PLAN" ] || grep -q '^attention: cuDNN.*backward deterministic' "$WORK/gpu_bf16_cudnn.out"; then
                if trun gpu_bf16_cudnn_again $GTC "${COMMON[@]}" --batch 4; then
                    if diff <(train_rows "$WORK/gpu_bf16_cudnn/log.jsonl") <(train_rows "$WORK/gpu_bf16_cudnn_again/log.jsonl") > /dev/null; then
                        pass cudnn_identical_runs_bitwise "10 losses equal"
                    else fail cudnn_identical_runs_bitwise "losses of two identical cuDNN runs differ"; fi
                fi
            else notrun cudnn_identical_runs_bitwise "cuDNN refused the deterministic backward: $(grep -m1 'deterministic attention backward' "$WORK/gpu_bf16_cudnn.out" | cut -c1-250)"; fi
        else fail cudnn_vs_cublas_bf16_10_steps "train_gptcu_cudnn did not run on cuDNN attention: $(cudnn_why_not "$WORK/gpu_bf16_cudnn.out")"; fi
    fi
    # grouped-query attention on cuDNN (key/value heads expanded, cuda/gqa.cuh) against cuBLAS, bf16 both
    if [ -n "$CUDNN_REASON" ]; then notrun llama_cudnn_vs_cublas_bf16_10_steps "$CUDNN_REASON"
    elif ! exists "$WORK/llama_bf16/log.jsonl"; then notrun llama_cudnn_vs_cublas_bf16_10_steps "the train_llamacu run it compares with failed"
    elif trun llama_bf16_cudnn $LTC "${LCOMMON[@]}"; then
        if cudnn_ran "$WORK/llama_bf16_cudnn.out"; then
            compare_losses llama_cudnn_vs_cublas_bf16_10_steps "$WORK/llama_bf16_cudnn/log.jsonl" "$WORK/llama_bf16/log.jsonl" 1e-2
        else fail llama_cudnn_vs_cublas_bf16_10_steps "train_llamacu_cudnn did not run on cuDNN attention: $(cudnn_why_not "$WORK/llama_bf16_cudnn.out")"; fi
    fi

# ---------------------------------------------------------------- 3. the device update against the host update
    log "== 3. the device update against the host update"
    for bin in "${M_BINS[@]}"; do case $bin in *scape*) ;; *update*) model_test "$bin" ;; esac; done
    # the device-resident update (the default above) against the host update of the same trainer: fp32 bitwise
    trun gpu_fp32_host_update $GT32 "${COMMON[@]}" --batch 4 --update host &&
        compare_losses device_vs_host_update_fp32 "$WORK/gpu_fp32/log.jsonl" "$WORK/gpu_fp32_host_update/log.jsonl" 0
    trun gpu_bf16_host_update $GT "${COMMON[@]}" --batch 4 --update host &&
        compare_losses device_vs_host_update_bf16 "$WORK/gpu_bf16/log.jsonl" "$WORK/gpu_bf16_host_update/log.jsonl" 2e-2
    if exists "$LTR" && exists "$WORK/llama_fp32/log.jsonl"; then
        trun llama_fp32_host_update $LT32 "${LCOMMON[@]}" --update host &&
            compare_losses llama_device_vs_host_update_fp32 "$WORK/llama_fp32/log.jsonl" "$WORK/llama_fp32_host_update/log.jsonl" 0
    else notrun llama_device_vs_host_update_fp32 "the train_llamacu_fp32 run it compares with did not run"; fi
    # 2 ranks on one GPU (host-staged MPI all-reduce) vs 1 rank accumulating 2 micro-steps of the same windows
    trun one_rank_accum $GT32 "${COMMON[@]}" --batch 4 --total-batch 1024 &&
    trun two_ranks env OMP_NUM_THREADS=2 "${MPI[@]}" -np 2 $GT32 "${COMMON[@]}" --batch 4 &&
        compare_losses two_ranks_one_gpu_vs_accumulation "$WORK/two_ranks/log.jsonl" "$WORK/one_rank_accum/log.jsonl" 1e-5
    # ZeRO-1 (reduce to owners, sharded update, parameter all-gather) on 2 ranks == no ZeRO, ranks in sync
    if trun two_ranks_zero env OMP_NUM_THREADS=2 SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 2 $GT32 "${COMMON[@]}" --batch 4 --zero; then
        compare_losses two_ranks_zero1_vs_no_zero "$WORK/two_ranks_zero/log.jsonl" "$WORK/two_ranks/log.jsonl" 1e-6
        if grep -q "sync check: .*identical on 2 ranks" "$WORK/two_ranks_zero.out" 2>/dev/null; then pass "${DRY}zero1_ranks_in_sync"
        else fail "${DRY}zero1_ranks_in_sync" "no 'identical on 2 ranks' sync line in $WORK/two_ranks_zero.out"; fi
    fi
    # the device update on 2 ranks sharing the GPU (host-staged MPI) against the host DistOptim
    [ -z "$DRY" ] && run_test updater_2_ranks_one_gpu 300 env OMP_NUM_THREADS=2 "${MPI[@]}" -np 2 build/cuda/test_updater

# ---------------------------------------------------------------- 4. SCAPE on the device against the host SCAPE
    log "== 4. SCAPE on the device against the host SCAPE"
    for bin in "${M_BINS[@]}"; do case $bin in *scape*) model_test "$bin" ;; esac; done
    # SCAPE on the device (d 0.1 after a 3-step warm-up) == SCAPE on the host DistOptim, bitwise in fp32; the residual
    # offloaded to pinned host memory changes nothing; the CPU trainer agrees to fp32 rounding. Mask statistics every
    # 2 steps in both update runs: the device's "mask" events equal the host DistOptim's
    trun scape_cpu ./train_gpt "${COMMON[@]}" --batch 4 "${SC[@]}" &&
    trun scape_device_fp32 $GT32 "${COMMON[@]}" --batch 4 "${SC[@]}" --mask-stats-every 2 &&
        compare_losses scape_device_fp32_vs_cpu "$WORK/scape_device_fp32/log.jsonl" "$WORK/scape_cpu/log.jsonl" 1e-4
    if trun scape_host_fp32 $GT32 "${COMMON[@]}" --batch 4 "${SC[@]}" --update host --mask-stats-every 2; then
        compare_losses scape_device_vs_host_update_fp32 "$WORK/scape_device_fp32/log.jsonl" "$WORK/scape_host_fp32/log.jsonl" 0
        compare_mask_events scape_mask_stats_device_vs_host_fp32 "$WORK/scape_device_fp32/log.jsonl" "$WORK/scape_host_fp32/log.jsonl"
    fi
    if [ -z "$DRY" ]; then
        trun scape_offload_fp32 $GT32 "${COMMON[@]}" --batch 4 "${SC[@]}" --scape-offload-residual &&
            compare_losses scape_offload_vs_resident_fp32 "$WORK/scape_offload_fp32/log.jsonl" "$WORK/scape_device_fp32/log.jsonl" 0
        run_test scape_updater_2_ranks_one_gpu 300 env OMP_NUM_THREADS=2 "${MPI[@]}" -np 2 build/cuda-fp32/test_scape_updater
    fi
    # SCAPE with ZeRO-1 on the device (cuda/dist_scape_zero.cuh), 2 ranks sharing the GPU: the same losses as
    # without it to the printed digit (bitwise in fp32 on 2 ranks), ranks in sync, and a smaller optim_state_bytes
    if trun scape_two_ranks_fp32 env OMP_NUM_THREADS=2 "${MPI[@]}" -np 2 $GT32 "${COMMON[@]}" --batch 4 "${SC[@]}" &&
       trun scape_two_ranks_zero_fp32 env OMP_NUM_THREADS=2 SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 2 $GT32 "${COMMON[@]}" --batch 4 "${SC[@]}" --zero; then
        compare_losses scape_zero1_vs_no_zero_fp32 "$WORK/scape_two_ranks_zero_fp32/log.jsonl" "$WORK/scape_two_ranks_fp32/log.jsonl" 0
        if grep -q "sync check: .*identical on 2 ranks" "$WORK/scape_two_ranks_zero_fp32.out" 2>/dev/null; then pass "${DRY}scape_zero1_ranks_in_sync"
        else fail "${DRY}scape_zero1_ranks_in_sync" "no 'identical on 2 ranks' sync line in $WORK/scape_two_ranks_zero_fp32.out"; fi
        sb0=$(grep -o '"optim_state_bytes": [0-9]*' "$WORK/scape_two_ranks_fp32/log.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
        sb1=$(grep -o '"optim_state_bytes": [0-9]*' "$WORK/scape_two_ranks_zero_fp32/log.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
        if [ -n "$sb0" ] && [ -n "$sb1" ] && [ "$sb1" -lt "$sb0" ]; then pass "${DRY}scape_zero1_state_smaller" "optim_state_bytes rank 0: $sb1 with --zero, $sb0 without"
        else fail "${DRY}scape_zero1_state_smaller" "optim_state_bytes rank 0: '${sb1:-none}' with --zero, '${sb0:-none}' without"; fi
    fi
    # a non-finite gradient at step 3 is skipped, every other step trained
    if trun gpu_nan env SCAPE_TEST_INJECT_NAN=3 $GT32 "${COMMON[@]}" --batch 4; then
        ns=$(grep -c '"skipped": 1' "$WORK/gpu_nan/log.jsonl" 2>/dev/null)
        if [ "$ns" = 1 ] && grep '"skipped": 1' "$WORK/gpu_nan/log.jsonl" | grep -q '"step": 3,'; then pass "${DRY}nan_step_skipped"
        else fail "${DRY}nan_step_skipped" "$ns skipped steps in $WORK/gpu_nan/log.jsonl (want exactly step 3)"; fi
    fi
    # checkpoints interchange: the CPU trainer's step-5 checkpoint resumed by the GPU trainer
    exists "$WORK/cpu/ckpt_5" && trun gpu_from_cpu_ckpt $GT32 "${COMMON[@]}" --batch 4 --resume "$WORK/cpu/ckpt_5" &&
        compare_losses cpu_checkpoint_resumed_on_gpu "$WORK/gpu_from_cpu_ckpt/log.jsonl" "$WORK/cpu/log.jsonl" 1e-4 6

# ---------------------------------------------------------------- 5. throughput and memory
    log "== 5. throughput and memory (speed, after every correctness check)"
    # throughput: GPT-2 124M (d12) and 350M (d24) at T=1024, the largest batch of 32/16/8/4 that fits (or the
    # batches given); peak GPU memory sampled by nvidia-smi every 100 ms (device-wide). On PASS sets THR_B,
    # THR_TOKS, THR_MEM, THR_MS. REQUIRE_CUDNN=1: the run must have used cuDNN attention throughout. SEQ (default
    # 1024), STEPS (default 12) and EXTRA (more trainer flags, split on spaces) change the run.
    throughput() { # throughput NAME BIN MODEL [BATCH...]
        local name=$1 bin=$2 model=$3 tried="" b batches smi seq=${SEQ:-1024} steps=${STEPS:-12}
        shift 3; batches=${*:-32 16 8 4}
        THR_B=""; THR_TOKS=""; THR_MEM=""; THR_MS=""
        local extra=(); [ -n "${EXTRA:-}" ] && read -r -a extra <<< "$EXTRA"
        if plan_cost "$name"; then planned "$name"; THR_B=${batches%% *}; THR_TOKS=1; THR_MEM=1; THR_MS=1; return; fi
        if [ -n "$DRY" ]; then notrun "$name" "CPU_DRY=1"; return; fi
        for b in $batches; do
            over_budget "$name" && return
            rm -rf "$WORK/bench"
            : > "$WORK/mem_$name.txt"; smi=""
            if have nvidia-smi; then
                nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$WORK/mem_$name.txt" 2>/dev/null &
                smi=$!
            fi
            timeout 240 "$bin" --model "$model" --train "$TR" --val "$VA" --data "$DATA" --seq "$seq" --batch $b \
                --steps "$steps" --warmup 2 --eval-every 0 --eval-batches 1 --sample-every 0 --peak-flops "$PEAK_FLOPS" \
                "${extra[@]}" --out "$WORK/bench" > "$WORK/bench_$name.out" 2>&1
            local rc=$?
            [ -n "$smi" ] && { kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; }
            if [ $rc -eq 0 ]; then
                # the median of steps 3-12 (the first steps include cuBLASLt heuristics and allocation)
                local med mem
                local keep=$(( steps - 2 < 10 ? steps - 2 : 10 )) # the first 2 steps plan and allocate
                [ $keep -lt 1 ] && keep=1
                med=$(grep -E '^step .* tok\/s \| MFU ' "$WORK/bench_$name.out" | tail -n $keep |
                      sed -E 's/.*\| ([0-9.]+) ms \| ([0-9]+) tok\/s \| MFU ([^ ]+).*/\1 \2 \3/' | sort -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}')
                mem=$(grep -E '^[0-9]+$' "$WORK/mem_$name.txt" | sort -n | tail -1)
                if [ "${REQUIRE_CUDNN:-0}" = 1 ] && ! cudnn_ran "$WORK/bench_$name.out"; then
                    fail "$name" "B=$b ran, but not on cuDNN attention: $(cudnn_why_not "$WORK/bench_$name.out")"; return
                fi
                THR_B=$b; THR_TOKS=$(echo "$med" | cut -d' ' -f2); THR_MEM=${mem:-?}; THR_MS=${med%% *}
                pass "$name" "B=$b T=$seq${EXTRA:+ $EXTRA}: median of the last $keep steps: $THR_MS ms, $THR_TOKS tok/s, MFU $(echo "$med" | cut -d' ' -f3), peak GPU memory ${THR_MEM} MiB"
                grep -m1 '^attention:' "$WORK/bench_$name.out" | sed 's/^/        | /' >> "$REPORT"
                [ -n "$tried" ] && log "        | $name: larger batches failed first:$tried"
                return
            fi
            tried="$tried B=$b: $(tail -1 "$WORK/bench_$name.out");"
        done
        fail "$name" "no batch size ran:$tried"
    }
    throughput throughput_gpt2_124M_d12 ./train_gptcu d12
    db=$THR_B; dms=$THR_MS; dtok=$THR_TOKS; dmem=$THR_MEM
    # the host update at the same batch (the path topk-ef and --update host take): every step uploads 4P bytes of
    # parameters from page-locked memory (cuda/trainer.cuh; 0.5 GB for d12: about 10-20 ms at PCIe 5 rates, 50-80
    # ms from pageable memory as before) and downloads 2P bytes of gradients; its cost over the device update
    if [ -n "$db" ]; then
        STEPS=6 EXTRA="--update host" throughput throughput_gpt2_124M_d12_host_update ./train_gptcu d12 "$db"
        [ -n "$THR_B" ] && [ -z "$PLAN" ] && log "        | d12 B=$db T=1024: host update $THR_MS ms vs device update $dms ms per step (+$(awk -v a="$THR_MS" -v b="$dms" 'BEGIN { printf "%.1f", a - b }') ms: upload, download, the CPU's AdamW)"
    else notrun throughput_gpt2_124M_d12_host_update "the device-update d12 run it compares with did not pass"; fi
    # d12 with cuDNN attention at the batch the cuBLAS run used (the same work), then the comparison
    if [ -n "$CUDNN_REASON" ]; then notrun throughput_gpt2_124M_d12_cudnn "$CUDNN_REASON"
    elif [ -z "$db" ]; then notrun throughput_gpt2_124M_d12_cudnn "the cuBLAS d12 throughput run it compares with did not pass"
    else
        b0=$db; t0=$dtok; m0=$dmem
        REQUIRE_CUDNN=1 throughput throughput_gpt2_124M_d12_cudnn $GTC d12 "$b0"
        if [ -n "$THR_B" ]; then
            [ -z "$PLAN" ] && log "        | d12 B=$b0 T=1024, cuDNN vs cuBLAS attention: $THR_TOKS vs $t0 tok/s ($(awk -v a="$THR_TOKS" -v b="$t0" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "?" }')), peak GPU memory $THR_MEM vs $m0 MiB"
        fi
    fi
    # SCAPE on one GPU (issue 9's benchmark). With one rank no collective moves bytes, so the step time against
    # dense AdamS at the same batch is SCAPE's compute overhead (c and compaction, top-k, masked update; target
    # at most 5%): Llama-500M at T=2048, d = 0.01 from step 1, and with the bf16 payload; 8 steps each (the
    # median of the last 6). Then the same AdamS run on cuDNN attention (issue 9's tokens/s, the faster path).
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.3f", a / b; else print "?" }'; }
    say() { [ -z "$PLAN" ] && log "$@"; } # a comparison line of two measured runs (nothing to say in PLAN mode)
    SCB="--optimizer scape --density 0.01 --density-start 0.01"
    STEPS=8 SEQ=2048 EXTRA="--optimizer adams" TR=$LTR VA=$LVA throughput throughput_llama_500M_adams $LT 500m 8 4 2
    if [ -n "$THR_B" ]; then
        b0=$THR_B; ms0=$THR_MS; m0=$THR_MEM; t0=$THR_TOKS
        STEPS=8 SEQ=2048 EXTRA="$SCB" TR=$LTR VA=$LVA throughput throughput_llama_500M_scape $LT 500m "$b0"
        [ -n "$THR_B" ] && say "        | Llama-500M B=$b0 T=2048, 1 rank: SCAPE d=0.01 $THR_MS ms vs AdamS $ms0 ms per step ($(ratio "$THR_MS" "$ms0"); target <= x1.05), peak GPU memory $THR_MEM vs $m0 MiB"
        STEPS=8 SEQ=2048 EXTRA="$SCB --scape-payload bf16" TR=$LTR VA=$LVA throughput throughput_llama_500M_scape_bf16 $LT 500m "$b0"
        [ -n "$THR_B" ] && say "        | Llama-500M B=$b0 T=2048, 1 rank: SCAPE d=0.01 bf16 payload $THR_MS ms vs AdamS $ms0 ms ($(ratio "$THR_MS" "$ms0"))"
        if [ -n "$CUDNN_REASON" ]; then notrun throughput_llama_500M_cudnn "$CUDNN_REASON"
        else
            REQUIRE_CUDNN=1 STEPS=8 SEQ=2048 EXTRA="--optimizer adams" TR=$LTR VA=$LVA throughput throughput_llama_500M_cudnn $LTC 500m "$b0"
            [ -n "$THR_B" ] && say "        | Llama-500M B=$b0 T=2048 AdamS, cuDNN vs cuBLAS attention: $THR_TOKS vs $t0 tok/s ($(ratio "$THR_TOKS" "$t0")), peak GPU memory $THR_MEM vs $m0 MiB"
        fi
    else
        for c in throughput_llama_500M_scape throughput_llama_500M_scape_bf16 throughput_llama_500M_cudnn; do
            notrun $c "the AdamS run it compares with did not pass"; done
    fi
    # memory: SCAPE's residual offloaded to pinned host memory (saves 4P bytes of GPU memory), and SCAPE with ZeRO-1
    # on 2 ranks sharing the GPU (host-staged MPI) against without; B=1 T=2048, d=0.01. On Llama-500M by default
    # (P = 0.5e9: 4P is about 1.9 GiB); BIG=1 runs them on Llama-1.8B as the paper's figures (6-9 GB offloaded),
    # which costs about 2.5 more minutes, over the 8 of the plan.
    MEMM=500m; MEMP=0.5e9; [ "${BIG:-0}" = 1 ] && { MEMM=1.8b; MEMP=1.8e9; }
    SEQ=2048 STEPS=4 EXTRA="$SCB" TR=$LTR VA=$LVA throughput memory_llama_${MEMM}_scape $LT $MEMM 1
    if [ -n "$THR_B" ]; then
        m0=$THR_MEM; ms0=$THR_MS
        SEQ=2048 STEPS=4 EXTRA="$SCB --scape-offload-residual" TR=$LTR VA=$LVA throughput memory_llama_${MEMM}_scape_offload $LT $MEMM 1
        [ -n "$THR_B" ] && say "        | Llama-$MEMM B=1 T=2048 SCAPE d=0.01: peak GPU memory $m0 MiB resident vs $THR_MEM MiB offloaded: $(awk -v a="$m0" -v b="$THR_MEM" 'BEGIN { printf "%.0f", a - b }') MiB saved (4P = $(awk -v p=$MEMP 'BEGIN { printf "%.0f", 4 * p / 1048576 }') MiB expected); step $ms0 vs $THR_MS ms"
    else notrun memory_llama_${MEMM}_scape_offload "the resident run it compares with did not pass"; fi
    # ZeRO-1: the peak GPU memory of both processes together (nvidia-smi, device-wide) and rank 0's
    # optim_state_bytes; with --zero each rank holds m compact on its part of the mask instead of dense over P
    # (scripts/bench_zero.sh computes 8.38P -> 4.42P a rank)
    mem2() { # mem2 NAME EXTRA...: sets M2_MEM (MiB) and M2_STATE (bytes) on PASS
        local name=$1 smi=""; shift
        M2_MEM=""; M2_STATE=""
        if plan_cost "$name"; then planned "$name"; M2_MEM=1; M2_STATE=1; return; fi
        if [ -n "$DRY" ]; then notrun "$name" "CPU_DRY=1"; return; fi
        over_budget "$name" && return
        rm -rf "$WORK/$name"; : > "$WORK/mem_$name.txt"
        if have nvidia-smi; then
            nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 > "$WORK/mem_$name.txt" 2>/dev/null &
            smi=$!
        fi
        timeout 300 env OMP_NUM_THREADS=2 "${MPI[@]}" -np 2 $LT --model $MEMM --train "$LTR" --val "$LVA" --data "$DATA" \
            --seq 2048 --batch 1 --steps 4 --warmup 2 --eval-every 0 --eval-batches 1 --sample-every 0 --comm mpi \
            --optimizer scape --density 0.01 --density-start 0.01 "$@" --out "$WORK/$name" > "$WORK/$name.out" 2>&1
        local rc=$?
        [ -n "$smi" ] && { kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; }
        if [ $rc -ne 0 ]; then fail "$name" "run failed: $(tail -2 "$WORK/$name.out" | tr '\n' ' ')"; return; fi
        M2_MEM=$(grep -E '^[0-9]+$' "$WORK/mem_$name.txt" | sort -n | tail -1)
        M2_STATE=$(grep -o '"optim_state_bytes": [0-9]*' "$WORK/$name/log.jsonl" | tail -1 | grep -o '[0-9]*$')
        pass "$name" "2 ranks on one GPU, B=1 T=2048 SCAPE d=0.01 $*: peak GPU memory ${M2_MEM:-?} MiB (both processes), rank 0 optim_state_bytes ${M2_STATE:-?}"
    }
    mem2 memory_llama_${MEMM}_scape_2_ranks
    if [ -n "$M2_MEM" ]; then
        m0=$M2_MEM; s0=$M2_STATE
        mem2 memory_llama_${MEMM}_scape_2_ranks_zero --zero
        [ -n "$M2_MEM" ] && say "        | Llama-$MEMM, 2 ranks sharing the GPU, SCAPE d=0.01: peak GPU memory $m0 MiB without --zero vs $M2_MEM MiB with it ($(awk -v a="$m0" -v b="$M2_MEM" 'BEGIN { printf "%.0f", a - b }') MiB saved); rank 0's optim_state_bytes $s0 vs $M2_STATE"
    else notrun memory_llama_${MEMM}_scape_2_ranks_zero "the run without --zero it compares with did not pass"; fi
    # BIG=1: GPT-2 350M's throughput too
    [ "${BIG:-0}" = 1 ] && throughput throughput_gpt2_350M_d24 ./train_gptcu d24
else
    # every check of sections 2-5 (the names PLAN=1 lists; test/test_gpu_check.sh keeps the two in step)
    for c in train_fp32_vs_cpu_10_steps train_bf16_vs_cpu_10_steps identical_runs_bitwise save_resume_bitwise \
             llama_train_fp32_vs_cpu_10_steps llama_train_bf16_vs_cpu_10_steps cudnn_vs_cublas_bf16_10_steps \
             cudnn_identical_runs_bitwise llama_cudnn_vs_cublas_bf16_10_steps device_vs_host_update_fp32 \
             device_vs_host_update_bf16 llama_device_vs_host_update_fp32 two_ranks_one_gpu_vs_accumulation \
             two_ranks_zero1_vs_no_zero zero1_ranks_in_sync updater_2_ranks_one_gpu scape_device_fp32_vs_cpu \
             scape_device_vs_host_update_fp32 scape_mask_stats_device_vs_host_fp32 scape_offload_vs_resident_fp32 \
             scape_updater_2_ranks_one_gpu scape_zero1_vs_no_zero_fp32 scape_zero1_ranks_in_sync scape_zero1_state_smaller \
             nan_step_skipped cpu_checkpoint_resumed_on_gpu throughput_gpt2_124M_d12 throughput_gpt2_124M_d12_host_update \
             throughput_gpt2_124M_d12_cudnn \
             throughput_llama_500M_adams throughput_llama_500M_scape throughput_llama_500M_scape_bf16 \
             throughput_llama_500M_cudnn memory_llama_${MEMM}_scape memory_llama_${MEMM}_scape_offload \
             memory_llama_${MEMM}_scape_2_ranks memory_llama_${MEMM}_scape_2_ranks_zero \
             $([ "${BIG:-0}" = 1 ] && echo throughput_gpt2_350M_d24); do notrun $c "$reason"; done
    for bin in "${M_BINS[@]}"; do case $bin in *update*|*updater*) model_test "$bin" ;; esac; done
fi

if [ -n "$PLAN" ]; then
    log "== PLAN: $plan_n checks; estimated $plan_s s of GPU-machine time (budget $BUDGET_S s, limit 480 s)"
    [ "$plan_s" -le "$BUDGET_S" ] && [ "$plan_s" -le 480 ]; exit
fi
log "== $npass passed, $nfail failed, $nnot not run ($(since) s); report: $REPORT"
[ $nfail -eq 0 ] && [ $nnot -eq 0 ]
