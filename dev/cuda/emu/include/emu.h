/*
 * dev/cuda/emu/include/emu.h - the CPU emulator of CUDA that `make test-emu` builds the project's CUDA code with
 * (g++ only: no nvcc, no GPU, no CUDA headers). This header stands in for cuda_runtime.h and cuda_bf16.h (those
 * names, beside it, include it); emu_blas.h does cublas_v2.h / cublasLt.h. README.md says what it checks and what
 * it cannot.
 *
 * Execution model: a launch runs its blocks one after another on the calling OS thread. A kernel that may
 * synchronise (dev/cuda/emu/rewrite.py finds __syncthreads, warp collectives and the device functions that call
 * them, transitively) runs each thread of a block as a fiber (own stack, switched by a few instructions of
 * assembly); a fiber runs until its next barrier or warp collective, and the scheduler releases a barrier only
 * when every thread of the block (or every lane the mask names) has reached it - else it stops with an
 * "EMU ERROR" (a hang or undefined behaviour on a GPU). Other kernels run their threads in a plain loop.
 * Device memory is host memory from the allocator (AddressSanitizer sees out-of-bounds accesses), registered so
 * that copies, kernel arguments and cuBLAS operands can be checked against it, and filled with 0xFF bytes
 * (NaN in fp32 and bf16, -1 as an integer) so reads of memory nobody wrote show up.
 * Not for: the nvcc build (cuda/common.cuh includes the real headers there).
 */
#ifndef EMU_H
#define EMU_H

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmath>
#include <functional>
#include <type_traits>

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__
#define __launch_bounds__(...)
/* one copy per kernel (blocks run in turn, so per block); never reset between blocks or launches */
#define __shared__ static
#define __constant__ static

/* ---- types ---- */
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    dim3(uint3 u) : x(u.x), y(u.y), z(u.z) {}
};
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

typedef enum cudaError {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17, cudaErrorInvalidMemcpyDirection = 21, cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600
} cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
                      cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMultiProcessorCount = 16,
                      cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37 };
typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2
#define cudaHostRegisterDefault 0x0
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount, maxThreadsPerBlock, warpSize, clockRate, memoryClockRate,
        memoryBusWidth;
    size_t sharedMemPerBlock;
};

/* ---- bf16: the storage format, conversions round to nearest even as the device's ---- */
struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f);
    /* bit casts by __builtin_bit_cast, not memcpy: under ASan a memcpy here is an intercepted call per element */
    operator float() const { return __builtin_bit_cast(float, (uint32_t)x << 16); }
};
typedef __nv_bfloat16 nv_bfloat16;
static inline unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
static inline float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
static inline int __float_as_int(float f) { return __builtin_bit_cast(int, f); }
static inline float __int_as_float(int u) { return __builtin_bit_cast(float, u); }
static inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u = __float_as_uint(f);
    __nv_bfloat16 b;
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) { b.x = (uint16_t)((u >> 16) | 0x40u); return b; }
    u += 0x7FFFu + ((u >> 16) & 1);
    b.x = (uint16_t)(u >> 16);
    return b;
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16::__nv_bfloat16(float f) { x = __float2bfloat16_rn(f).x; }

/* ---- device math: IEEE host operations (build with -ffp-contract=off: nvcc contracts a*b+c into an FMA unless
 * the _rn intrinsics are used; the emulator never does, so it cannot show what contraction changes) ---- */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
template <typename T> static inline T __ldg(const T *p) { return *p; }

/* ---- the scheduler (emu.cpp) ---- */
namespace emu {
/* Prints "FAIL emu: <what>" on stdout (counted by test/run.sh) and the details on stderr, then aborts. */
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* collective kinds */
enum { C_SHFL_XOR = 1, C_SHFL_IDX, C_SHFL_DOWN, C_SHFL_UP, C_BALLOT, C_ANY, C_ALL, C_MATCH, C_SYNCWARP };
uint64_t collective(int kind, unsigned mask, uint64_t val, int arg, int width);
void syncthreads(const char *file, int line);
/* one launch: sync = the kernel may synchronise (fibers); bound = its __launch_bounds__ (0: none) */
struct Cfg {
    int sync;
    long bound;
    const char *name, *file;
    int line;
    dim3 grid, block;
    cudaStream_t stream;
};
void run(const Cfg &c, void (*tramp)(void *), void *ctx);
/* the launch configuration check (grid, block, __launch_bounds__): 0 with cudaGetLastError's error set */
int launch_ok(const Cfg &c);
/* Work for stream s (NULL: the legacy default stream), described by `what`. EMU_STREAMS says when it runs:
 *   defer (the default): only when a synchronisation needs it (the host synchronising s or an event recorded
 *     after it, a wait on such an event by work that runs, a copy into pageable memory or host to host on s),
 *     or at a device-wide point (cudaFree, cudaDeviceSynchronize: every stream; a synchronous copy or memset,
 *     legacy-stream work: the blocking ones), where the stream whose next operation is the latest goes first. A host read of pinned memory before its copy was synchronised, or a consumer
 *     that runs before a producer it does not wait for, then sees stale data (0 or NaN) and the test fails.
 *   reverse: every synchronisation runs all queued work, latest-enqueued stream first, so of two operations on
 *     different streams not ordered by an event, the later in program order runs first: a missing
 *     cudaStreamWaitEvent between a writer and a reader (either order) gives wrong results.
 *   sync: at once, in program order (what a GPU running one stream at a time would do).
 * The legacy stream drains every blocking stream, then runs at once. */
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn);
/* kernel argument check: a pointer argument must be NULL or inside a cudaMalloc / cudaMallocHost allocation */
void check_arg(const Cfg &c, int index, const void *p);
template <typename T> static inline void check_args(const Cfg &c, int i, const T &) {}
template <typename T> static inline void check_args(const Cfg &c, int i, T *const &p) { check_arg(c, i, (const void *)p); }
/* a launch of kernel f with args: checked now (pointer arguments, configuration), queued on c.stream to run */
template <typename F, typename... A> static inline void enqueue_launch(const Cfg &c, F f, A... args) {
    int i = 0;
    (check_args(c, i++, args), ...);
    if (!launch_ok(c)) return;
    enqueue(c.stream, c.name, [c, f, args...]() {
        auto call = [&]() { f(args...); };
        run(c, [](void *p) { (*(decltype(call) *)p)(); }, &call);
    });
}
template <typename... P> struct Launcher {
    Cfg c;
    void (*fn)(P...);
    void operator()(P... args) const { enqueue_launch(c, fn, args...); }
};
/* a kernel template launched without template arguments: they are deduced from the call's arguments */
template <typename F> struct DeducingLauncher {
    Cfg c;
    F f;
    template <typename... A> void operator()(A... args) const { enqueue_launch(c, f, args...); }
};
struct LaunchSite {
    Cfg c;
    template <typename... P> Launcher<P...> k(void (*fn)(P...)) const { return Launcher<P...>{c, fn}; }
    template <typename F> DeducingLauncher<F> deduce(F f) const { return DeducingLauncher<F>{c, f}; }
};
static inline LaunchSite launch(int sync, long bound, const char *name, const char *file, int line, dim3 g, dim3 b,
                                size_t shmem = 0, cudaStream_t s = 0) {
    (void)shmem;
    return LaunchSite{Cfg{sync, bound, name, file, line, g, b, s}};
}
}  // namespace emu

/* ---- barriers and warp collectives ---- */
#define __syncthreads() emu::syncthreads(__FILE__, __LINE__)
static inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) { emu::collective(emu::C_SYNCWARP, mask, 0, 0, 32); }
template <typename T> static inline uint64_t emu_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move at most 64 bits");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T emu_from_bits(uint64_t u) {
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return emu_from_bits<T>(emu::collective(emu::C_SHFL_XOR, mask, emu_bits(v), lane_mask, width));
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu_from_bits<T>(emu::collective(emu::C_SHFL_IDX, mask, emu_bits(v), src, width));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return emu_from_bits<T>(emu::collective(emu::C_SHFL_DOWN, mask, emu_bits(v), (int)d, width));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return emu_from_bits<T>(emu::collective(emu::C_SHFL_UP, mask, emu_bits(v), (int)d, width));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return (unsigned)emu::collective(emu::C_BALLOT, mask, pred != 0, 0, 32); }
static inline int __any_sync(unsigned mask, int pred) { return (int)emu::collective(emu::C_ANY, mask, pred != 0, 0, 32); }
static inline int __all_sync(unsigned mask, int pred) { return (int)emu::collective(emu::C_ALL, mask, pred != 0, 0, 32); }
template <typename T> static inline unsigned __match_any_sync(unsigned mask, T v) {
    return (unsigned)emu::collective(emu::C_MATCH, mask, emu_bits(v), 0, 32);
}
static inline unsigned __activemask() { return 0xFFFFFFFFu; }

/* ---- atomics: one OS thread, and fibers switch only at barriers and collectives, so a plain read-modify-write
 * is atomic here; the ORDER in which threads' atomics land is the emulator's (thread order), not a GPU's ---- */
template <typename T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> static inline T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <typename T> static inline T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> static inline T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
template <typename T> static inline T atomicXor(T *p, T v) { T o = *p; *p = o ^ v; return o; }
template <typename T> static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <typename T> static inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <typename T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

/* ---- runtime (emu.cpp): streams and events as emu::enqueue says; synchronous calls complete before they return ---- */
cudaError_t cudaMalloc(void **p, size_t n);
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
template <typename T> static inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMallocHost((void **)p, n); }
cudaError_t cudaFreeHost(void *p);
/* page-locks the caller's memory [p, p+n): copies from and to it then behave as with cudaMallocHost's (read and
 * written when they run); cudaHostUnregister runs every queued operation first, then forgets the range */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
/* stream-ordered allocation: the memory exists at once (usable by work enqueued on s after the call); the free runs
 * when s reaches it, so work queued before it on s may still use the memory */
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
template <typename T> static inline cudaError_t cudaMallocAsync(T **p, size_t n, cudaStream_t s) {
    return cudaMallocAsync((void **)p, n, s);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st = 0);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int dev);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);

namespace emu {
/* size of the device (or pinned host) allocation holding [p, p+bytes), or -1 with *why set */
long alloc_holding(const void *p, size_t bytes, int *pinned);
}

#endif
