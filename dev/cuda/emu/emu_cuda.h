/*
 * dev/cuda/emu/emu_cuda.h - a CPU emulation of the CUDA execution model, so kernel tests run where there is no GPU
 * (`make test-scape-emu`). The test source is compiled by g++ with this header force-included (-include) and each
 * `kernel<<<grid, block, shmem, stream>>>(args)` of the headers under test rewritten to
 * `emu_launch(kernel, grid, block, shmem, stream)(args)` (rewrite_launches.py).
 * Model: each block runs as blockDim cooperative fibers (ucontext) on one OS thread, blocks one after another.
 * __syncthreads waits for every thread of the block; the warp collectives (__ballot_sync, __any_sync,
 * __match_any_sync, __shfl_xor_sync) wait for all 32 lanes of the warp, and the run aborts with "EMU ERROR" when a
 * lane is missing or calls another collective, or __syncthreads is reached after some threads exited: what would
 * hang or be undefined on a GPU. __shared__ is `static` (one copy per block, blocks run in turn). Device memory is
 * host memory filled with 0xA5 bytes (garbage reads show), so AddressSanitizer sees the kernels' out-of-bounds
 * accesses. Fibers switch only at barriers and collectives, so atomics are plain read-modify-writes.
 * What it cannot show: races between threads that a GPU could interleave differently between two barriers
 * (each fiber runs to its next barrier alone), timing, the real CUB, and float intrinsics' device rounding beyond
 * IEEE (the _rn intrinsics are plain IEEE operations, as on the device; -ffp-contract=off keeps g++ from fusing).
 * Only 1-D launches and full-warp masks are emulated. Not for: production code.
 */
#pragma once
#define __device__
#define __host__
#define __global__
#define __shared__ static
#define __forceinline__ inline
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <cmath>
#include <functional>
#include <vector>
using std::isfinite;

#ifdef __SANITIZE_ADDRESS__
extern "C" {
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
}
#endif

namespace emu {
enum { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
enum { C_BALLOT = 1, C_ANY, C_MATCH, C_SHFL_XOR };
struct Fiber {
    ucontext_t ctx;
    char *stack;
    int state;
    int kind;
    uint32_t mask;
    uint64_t val;
    int arg;
    uint64_t result;
};
static const size_t STACK = 256 * 1024;
static std::vector<Fiber> fibers;
static ucontext_t sched_ctx;
static int cur = -1;
static std::function<void()> body;
static long long launches = 0, syncs = 0;
}  // namespace emu

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace emu {
[[noreturn]] static void die(const char *what) {
    fprintf(stderr, "EMU ERROR: %s (block %u thread %d)\n", what, blockIdx.x, cur);
    fflush(stderr);
    abort();
}
}  // namespace emu
/* the fibers' stacks, freed at exit (LeakSanitizer). Classes and templates here sit in an unnamed namespace: their
 * inline code uses this file's static state, which must not be merged across translation units. */
namespace {
struct StackReaper {
    ~StackReaper() {
        for (auto &f : emu::fibers) free(f.stack);
    }
};
StackReaper emu_reaper;
}  // namespace

namespace emu {
static void set_thread(int t) {
    threadIdx.x = (unsigned)t;
    threadIdx.y = threadIdx.z = 0;
}
static void yield_to_sched() {
    Fiber &f = fibers[cur];
#ifdef __SANITIZE_ADDRESS__
    void *fs = nullptr;
    __sanitizer_start_switch_fiber(&fs, nullptr, 0);
#endif
    swapcontext(&f.ctx, &sched_ctx);
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_finish_switch_fiber(fs, nullptr, nullptr);
#endif
}
static void entry() {
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    body();
    fibers[cur].state = DONE;
    yield_to_sched();
    die("finished fiber resumed");
}
static void resume(int t) {
    cur = t;
    set_thread(t);
    Fiber &f = fibers[t];
    f.state = RUN;
#ifdef __SANITIZE_ADDRESS__
    void *fs = nullptr;
    __sanitizer_start_switch_fiber(&fs, f.stack, STACK);
#endif
    swapcontext(&sched_ctx, &f.ctx);
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_finish_switch_fiber(fs, nullptr, nullptr);
#endif
    cur = -1;
}
/* one block: nt fibers run until all are done, released at barriers and warp collectives */
static void run_block(int nt) {
    if ((int)fibers.size() < nt) fibers.resize(nt);
    for (int t = 0; t < nt; t++) {
        Fiber &f = fibers[t];
        if (!f.stack) f.stack = (char *)malloc(STACK);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, (void (*)())entry, 0);
        f.state = RUN;
    }
    for (;;) {
        for (int t = 0; t < nt; t++)
            if (fibers[t].state == RUN) resume(t);
        int done = 0, wb = 0, ww = 0;
        for (int t = 0; t < nt; t++) {
            done += fibers[t].state == DONE;
            wb += fibers[t].state == WAIT_BLOCK;
            ww += fibers[t].state == WAIT_WARP;
        }
        if (done == nt) return;
        int progressed = 0;
        /* warps whose 32 lanes all wait at a collective */
        for (int w0 = 0; w0 < nt; w0 += 32) {
            int n = 0;
            for (int l = 0; l < 32 && w0 + l < nt; l++) n += fibers[w0 + l].state == WAIT_WARP;
            if (n == 0) continue;
            if (n != 32) { /* nothing is running: the other lanes exited or wait at __syncthreads */
                fprintf(stderr, "EMU ERROR: warp %d of block %u: %d of 32 lanes at a warp collective, the others exited or at "
                        "__syncthreads (a hang or undefined on a GPU)\n", w0 / 32, blockIdx.x, n);
                abort();
            }
            Fiber *L = &fibers[w0];
            for (int l = 1; l < 32; l++)
                if (L[l].kind != L[0].kind || L[l].mask != L[0].mask) {
                    fprintf(stderr, "EMU ERROR: warp %d: lanes call different collectives (%d vs %d)\n", w0 / 32, L[l].kind, L[0].kind);
                    abort();
                }
            if (L[0].mask != 0xFFFFFFFFu) die("warp collective with a partial mask (not used here)");
            for (int l = 0; l < 32; l++) {
                uint64_t r = 0;
                switch (L[0].kind) {
                case C_BALLOT:
                    for (int i = 0; i < 32; i++) r |= (uint64_t)(L[i].val != 0) << i;
                    break;
                case C_ANY:
                    for (int i = 0; i < 32; i++) r |= L[i].val != 0;
                    break;
                case C_MATCH:
                    for (int i = 0; i < 32; i++) r |= (uint64_t)(L[i].val == L[l].val) << i;
                    break;
                case C_SHFL_XOR:
                    r = L[(l ^ L[l].arg) & 31].val;
                    break;
                }
                L[l].result = r;
            }
            for (int l = 0; l < 32; l++) L[l].state = RUN;
            progressed = 1;
        }
        if (progressed) continue;
        if (wb > 0 && wb + done == nt) {
            if (done) die("__syncthreads reached by some threads after others exited");
            for (int t = 0; t < nt; t++) fibers[t].state = RUN;
            syncs++;
            continue;
        }
        fprintf(stderr, "EMU ERROR: deadlock: %d at __syncthreads, %d at warp collectives, %d done of %d\n", wb, ww, done, nt);
        abort();
    }
}
static uint64_t collective(int kind, uint32_t mask, uint64_t val, int arg) {
    if (cur < 0) die("collective outside a kernel");
    Fiber &f = fibers[cur];
    f.state = WAIT_WARP;
    f.kind = kind;
    f.mask = mask;
    f.val = val;
    f.arg = arg;
    yield_to_sched();
    return fibers[cur].result;
}
template <typename... P, typename... A> static void launch_fn(void (*fn)(P...), dim3 grid, dim3 block, A... args) {
    if (block.y != 1 || block.z != 1 || grid.y != 1 || grid.z != 1) die("only 1-D launches are emulated");
    if (grid.x == 0 || block.x == 0 || block.x > 1024) {
        fprintf(stderr, "EMU ERROR: bad launch configuration grid %u block %u\n", grid.x, block.x);
        abort();
    }
    launches++;
    gridDim = grid;
    blockDim = block;
    body = [=]() { fn(args...); };
    for (unsigned b = 0; b < grid.x; b++) {
        blockIdx.x = b;
        blockIdx.y = blockIdx.z = 0;
        run_block((int)block.x);
    }
    body = nullptr;
}
}  // namespace emu
namespace {
template <typename F> struct Launcher {
    F fn;
    dim3 grid, block;
    template <typename... A> void operator()(A... args) const { emu::launch_fn(fn, grid, block, args...); }
};
template <typename F> Launcher<F> emu_make_launcher(F fn, dim3 g, dim3 b, size_t shmem, cudaStream_t s) {
    (void)shmem;
    (void)s;
    return Launcher<F>{fn, g, b};
}
}  // namespace
#define emu_launch(fn, ...) emu_make_launcher(fn, __VA_ARGS__)

/* ---- intrinsics ---- */
static inline void __syncthreads() {
    if (emu::cur < 0) emu::die("__syncthreads outside a kernel");
    emu::fibers[emu::cur].state = emu::WAIT_BLOCK;
    emu::yield_to_sched();
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return (unsigned)emu::collective(emu::C_BALLOT, mask, pred != 0, 0); }
static inline int __any_sync(unsigned mask, int pred) { return (int)emu::collective(emu::C_ANY, mask, pred != 0, 0); }
static inline unsigned __match_any_sync(unsigned mask, int v) { return (unsigned)emu::collective(emu::C_MATCH, mask, (uint64_t)(uint32_t)v, 0); }
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int o) {
    static_assert(sizeof(T) <= 8, "64-bit at most");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = emu::collective(emu::C_SHFL_XOR, mask, u, o);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
/* single OS thread, fibers switch only at collectives: plain read-modify-write is atomic */
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
static inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
static inline int atomicOr(int *p, int v) { int o = *p; *p = o | v; return o; }
