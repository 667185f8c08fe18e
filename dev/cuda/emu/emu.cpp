/*
 * dev/cuda/emu/emu.cpp - the CPU emulator's runtime (see include/emu.h): the block scheduler (fibers meeting at
 * barriers and warp collectives), device memory (registered host allocations), streams, events and errors.
 * Work on a stream is queued and runs when a synchronisation needs it (emu::enqueue in include/emu.h says the
 * orders); synchronous calls have finished when they return. Launches from several host threads are serialised
 * by one lock (the kernels' __shared__ variables are per process).
 */
#include "emu.h"
#include <stdarg.h>
#include <sys/mman.h>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
extern "C" {
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
}
extern "C" void *__asan_region_is_poisoned(void *beg, size_t size);
#else
#define EMU_ASAN 0
#endif
extern "C" void emu_raw_copy(void *d, const void *s, size_t n); /* emu_raw.c, not instrumented */
extern "C" void emu_raw_fill(void *d, int v, size_t n);

/* emu_switch(save, load): saves the callee-saved registers on the current stack, stores the stack pointer in
 * *save, loads `load` as the stack pointer and restores the registers saved there (x86-64 System V). A few
 * instructions where swapcontext makes a system call per switch. */
#if !defined(__x86_64__)
#error "dev/cuda/emu: the fiber switch is written for x86-64"
#endif
extern "C" void emu_switch(void **save, void *load);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

namespace emu {
enum { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
static const char *kind_name(int k) {
    static const char *n[] = {"?", "__shfl_xor_sync", "__shfl_sync", "__shfl_down_sync", "__shfl_up_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__match_any_sync", "__syncwarp"};
    return k >= 0 && k <= C_SYNCWARP ? n[k] : "?";
}
struct Fiber {
    void *sp;
    char *stack_lo;
    int state, kind, arg, width, line;
    unsigned mask;
    uint64_t val, result;
    const char *file;
    void *fake;
};
static const size_t STACK = 256 * 1024, GUARD = 4096;
static std::vector<Fiber> fibers;
static void *sched_sp;
static const void *sched_bottom;
static size_t sched_size;
static int cur = -1; /* fiber running; -1 outside kernels, -2 in a plain (sync-free) kernel */
static int nthreads;
static void (*g_tramp)(void *);
static void *g_ctx;
static const Cfg *g_cfg;
static std::recursive_mutex launch_lock;
static long long n_launches, n_blocks, n_switches, n_enqueued;
static cudaError_t last_error = cudaSuccess;

[[noreturn]] void die(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[512] = "";
    if (g_cfg)
        snprintf(where, sizeof where, " [kernel %s launched at %s:%d, block (%u,%u,%u), thread (%u,%u,%u)]", g_cfg->name,
                 g_cfg->file, g_cfg->line, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    fflush(stdout);
    printf("FAIL emu: %s%s\n", msg, where);
    fflush(stdout);
    fprintf(stderr, "EMU ERROR: %s%s\n", msg, where);
    fflush(stderr);
    abort();
}

static void set_thread(int t) {
    threadIdx.x = (unsigned)t % blockDim.x;
    threadIdx.y = ((unsigned)t / blockDim.x) % blockDim.y;
    threadIdx.z = (unsigned)t / (blockDim.x * blockDim.y);
}

/* ---- fibers ---- */
static void to_scheduler(Fiber &f, int finished) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &f.fake, sched_bottom, sched_size);
#endif
    n_switches++;
    emu_switch(&f.sp, sched_sp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake, &sched_bottom, &sched_size);
#endif
}
static void fiber_main() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    g_tramp(g_ctx);
    fibers[cur].state = DONE;
    to_scheduler(fibers[cur], 1);
    die("a finished fiber was resumed");
}
static void resume(int t) {
    Fiber &f = fibers[t];
    cur = t;
    set_thread(t);
    f.state = RUN;
#if EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack_lo, STACK);
#endif
    emu_switch(&sched_sp, f.sp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    cur = -1;
}
static void fiber_start(Fiber &f) {
    if (!f.stack_lo) {
        char *m = (char *)mmap(nullptr, STACK + GUARD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) die("cannot map a fiber stack");
        mprotect(m, GUARD, PROT_NONE); /* a stack overflow faults instead of corrupting the next stack */
        f.stack_lo = m + GUARD;
    }
    void **sp = (void **)(f.stack_lo + STACK); /* 16-byte aligned */
    *--sp = nullptr;                           /* fiber_main's return address: it never returns */
    *--sp = (void *)fiber_main;                /* where emu_switch's ret goes */
    for (int i = 0; i < 6; i++) *--sp = nullptr;
    f.sp = sp;
    f.state = RUN;
    f.fake = nullptr;
}

/* a waiting lane's group (its mask) is ready when every lane of the mask waits at the same collective, same mask */
static int group_ready(int w0, int nl, int l) {
    Fiber &L = fibers[w0 + l];
    for (int p = 0; p < 32; p++) {
        if (!(L.mask >> p & 1u)) continue;
        if (p >= nl) return 0;
        Fiber &P = fibers[w0 + p];
        if (P.state != WAIT_WARP || P.kind != L.kind || P.mask != L.mask || P.width != L.width) return 0;
    }
    return 1;
}
static void resolve_group(int w0, unsigned mask) {
    Fiber *F = &fibers[w0];
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        Fiber &L = F[l];
        int w = L.width, seg = l & ~(w - 1), src = l;
        uint64_t r = 0;
        switch (L.kind) {
        case C_SHFL_XOR: src = l ^ L.arg; if ((src & ~(w - 1)) != seg) src = l; break;
        case C_SHFL_IDX: src = seg + (L.arg & (w - 1)); break;
        case C_SHFL_DOWN: src = (l - seg) + L.arg < w ? l + L.arg : l; break;
        case C_SHFL_UP: src = (l - seg) >= L.arg ? l - L.arg : l; break;
        case C_BALLOT: for (int i = 0; i < 32; i++) if (mask >> i & 1u) r |= (uint64_t)(F[i].val != 0) << i; break;
        case C_ANY: for (int i = 0; i < 32; i++) if (mask >> i & 1u) r |= F[i].val != 0; break;
        case C_ALL: r = 1; for (int i = 0; i < 32; i++) if (mask >> i & 1u) r &= F[i].val != 0; break;
        case C_MATCH: for (int i = 0; i < 32; i++) if (mask >> i & 1u) r |= (uint64_t)(F[i].val == L.val) << i; break;
        default: break;
        }
        if (L.kind >= C_SHFL_XOR && L.kind <= C_SHFL_UP) {
            if (src < 0 || src >= 32 || !(mask >> src & 1u))
                die("%s in warp %d: lane %d reads lane %d, which is not in the mask 0x%08x (undefined on a GPU)",
                    kind_name(L.kind), w0 / 32, l, src, mask);
            r = F[src].val;
        }
        L.result = r;
    }
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1u) F[l].state = RUN;
}
/* nothing can run and no barrier or group can be released: say why */
[[noreturn]] static void diagnose(int nt) {
    int done = 0, wb = 0, ww = 0;
    for (int t = 0; t < nt; t++) {
        done += fibers[t].state == DONE;
        wb += fibers[t].state == WAIT_BLOCK;
        ww += fibers[t].state == WAIT_WARP;
    }
    for (int w0 = 0; w0 < nt; w0 += 32) {
        int nl = nt - w0 < 32 ? nt - w0 : 32;
        for (int l = 0; l < nl; l++) {
            Fiber &L = fibers[w0 + l];
            if (L.state != WAIT_WARP) continue;
            for (int p = 0; p < 32; p++) {
                if (!(L.mask >> p & 1u)) continue;
                if (p >= nl)
                    die("%s with mask 0x%08x in warp %d, which has only %d lanes (block of %d threads): lane %d does "
                        "not exist", kind_name(L.kind), L.mask, w0 / 32, nl, nt, p);
                Fiber &P = fibers[w0 + p];
                if (P.state == DONE)
                    die("%s with mask 0x%08x in warp %d: lane %d waits for lane %d, which has exited (a hang or "
                        "undefined on a GPU)", kind_name(L.kind), L.mask, w0 / 32, l, p);
                if (P.state == WAIT_BLOCK)
                    die("%s with mask 0x%08x in warp %d: lane %d waits for lane %d, which waits at __syncthreads "
                        "(%s:%d)", kind_name(L.kind), L.mask, w0 / 32, l, p, P.file, P.line);
                if (P.kind != L.kind || P.mask != L.mask || P.width != L.width)
                    die("warp %d: lane %d calls %s (mask 0x%08x, width %d), lane %d calls %s (mask 0x%08x, width %d)",
                        w0 / 32, l, kind_name(L.kind), L.mask, L.width, p, kind_name(P.kind), P.mask, P.width);
            }
        }
    }
    die("deadlock: %d threads at __syncthreads, %d at warp collectives, %d exited, of %d", wb, ww, done, nt);
}
static void run_block_fibers(int nt) {
    if ((int)fibers.size() < nt) fibers.resize(nt, Fiber{});
    for (int t = 0; t < nt; t++) fiber_start(fibers[t]);
    for (;;) {
        for (int t = 0; t < nt; t++)
            if (fibers[t].state == RUN) resume(t);
        int progressed = 0, done = 0, wb = 0;
        for (int w0 = 0; w0 < nt; w0 += 32) {
            int nl = nt - w0 < 32 ? nt - w0 : 32;
            for (int l = 0; l < nl; l++)
                if (fibers[w0 + l].state == WAIT_WARP && group_ready(w0, nl, l)) {
                    resolve_group(w0, fibers[w0 + l].mask);
                    progressed = 1;
                }
        }
        if (progressed) continue;
        for (int t = 0; t < nt; t++) {
            done += fibers[t].state == DONE;
            wb += fibers[t].state == WAIT_BLOCK;
        }
        if (done == nt) return;
        if (wb + done == nt) {
            int first = -1;
            for (int t = 0; t < nt && first < 0; t++)
                if (fibers[t].state == WAIT_BLOCK) first = t;
            if (done) {
                int gone = -1;
                for (int t = 0; t < nt && gone < 0; t++)
                    if (fibers[t].state == DONE) gone = t;
                die("__syncthreads (%s:%d) reached by %d threads while %d had exited (thread %d first): undefined "
                    "on a GPU", fibers[first].file, fibers[first].line, wb, done, gone);
            }
            for (int t = 0; t < nt; t++)
                if (fibers[t].line != fibers[first].line || fibers[t].file != fibers[first].file)
                    die("threads of one block wait at different __syncthreads: thread %d at %s:%d, thread %d at %s:%d",
                        first, fibers[first].file, fibers[first].line, t, fibers[t].file, fibers[t].line);
            for (int t = 0; t < nt; t++) fibers[t].state = RUN;
            continue;
        }
        diagnose(nt);
    }
}

void syncthreads(const char *file, int line) {
    if (cur == -2)
        die("__syncthreads (%s:%d) in a kernel that dev/cuda/emu/rewrite.py classified as free of synchronisation; "
            "teach it the helper that synchronises", file, line);
    if (cur < 0) die("__syncthreads (%s:%d) outside a kernel", file, line);
    Fiber &f = fibers[cur];
    f.state = WAIT_BLOCK;
    f.file = file;
    f.line = line;
    to_scheduler(f, 0);
}
uint64_t collective(int kind, unsigned mask, uint64_t val, int arg, int width) {
    if (cur == -2)
        die("%s in a kernel that dev/cuda/emu/rewrite.py classified as free of synchronisation; teach it the helper "
            "that synchronises", kind_name(kind));
    if (cur < 0) die("%s outside a kernel", kind_name(kind));
    if (width < 1 || width > 32 || (width & (width - 1))) die("%s with width %d (must be a power of 2 <= 32)", kind_name(kind), width);
    int lane = cur % 32;
    if (!(mask >> lane & 1u)) die("%s with mask 0x%08x called by lane %d, which is not in the mask", kind_name(kind), mask, lane);
    Fiber &f = fibers[cur];
    f.state = WAIT_WARP;
    f.kind = kind;
    f.mask = mask;
    f.val = val;
    f.arg = arg;
    f.width = width;
    to_scheduler(f, 0);
    return fibers[cur].result;
}

int launch_ok(const Cfg &c) {
    const dim3 &g = c.grid, &b = c.block;
    unsigned long nt = (unsigned long)b.x * b.y * b.z;
    const char *bad = nullptr;
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) bad = "a zero dimension";
    else if (b.x > 1024 || b.y > 1024 || b.z > 64 || nt > 1024) bad = "more than 1024 threads per block (or y > 1024, z > 64)";
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) bad = "grid beyond 2^31-1 x 65535 x 65535";
    else if (c.bound > 0 && (long)nt > c.bound) bad = "more threads per block than the kernel's __launch_bounds__";
    if (bad) {
        fprintf(stderr, "emu: launch of %s at %s:%d with grid (%u,%u,%u) block (%u,%u,%u) fails: %s\n", c.name, c.file,
                c.line, g.x, g.y, g.z, b.x, b.y, b.z, bad);
        last_error = cudaErrorInvalidConfiguration;
        return 0;
    }
    n_enqueued++;
    return 1;
}

void run(const Cfg &c, void (*tramp)(void *), void *ctx) {
    const dim3 &g = c.grid, &b = c.block;
    unsigned long nt = (unsigned long)b.x * b.y * b.z;
    std::lock_guard<std::recursive_mutex> lock(launch_lock);
    if (cur != -1) die("kernel %s launched from inside a kernel", c.name);
    const Cfg *saved = g_cfg;
    g_cfg = &c;
    g_tramp = tramp;
    g_ctx = ctx;
    gridDim = g;
    blockDim = b;
    n_launches++;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                blockIdx.x = x;
                blockIdx.y = y;
                blockIdx.z = z;
                n_blocks++;
                if (c.sync) run_block_fibers((int)nt);
                else {
                    cur = -2;
                    for (int t = 0; t < (int)nt; t++) {
                        set_thread(t);
                        tramp(ctx);
                    }
                    cur = -1;
                }
            }
    g_cfg = saved;
}

/* ---- device memory ---- */
struct Alloc { size_t size; int pinned; };
static std::map<uintptr_t, Alloc> allocs;
static std::mutex alloc_lock;
static int fill_byte() {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("EMU_FILL");
        v = e ? (int)strtol(e, nullptr, 0) & 0xFF : 0xFF;
    }
    return v;
}
long alloc_holding(const void *p, size_t bytes, int *pinned) {
    std::lock_guard<std::mutex> lock(alloc_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return -1;
    --it;
    if (a < it->first || a + bytes > it->first + it->second.size || a > it->first + it->second.size) return -1;
    if (pinned) *pinned = it->second.pinned;
    return (long)it->second.size;
}
static const Alloc *alloc_at(const void *p) {
    auto it = allocs.find((uintptr_t)p);
    return it == allocs.end() ? nullptr : &it->second;
}
void check_arg(const Cfg &c, int index, const void *p) {
    if (!p) return;
    int pinned = 0;
    if (alloc_holding(p, 0, &pinned) < 0)
        die("kernel %s launched at %s:%d: pointer argument %d (%p) is neither device memory (cudaMalloc) nor pinned "
            "host memory (cudaMallocHost): a host pointer the GPU cannot read", c.name, c.file, c.line, index, p);
}
static cudaError_t do_alloc(void **p, size_t n, int pinned) {
    void *m = nullptr;
    if (posix_memalign(&m, 256, n ? n : 1)) return cudaErrorMemoryAllocation;
    emu_raw_fill(m, pinned ? 0 : fill_byte(), n);
    std::lock_guard<std::mutex> lock(alloc_lock);
    allocs[(uintptr_t)m] = Alloc{n, pinned};
    *p = m;
    return cudaSuccess;
}
static cudaError_t do_free(void *p, int pinned, const char *fn) {
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(alloc_lock);
        const Alloc *a = alloc_at(p);
        if (!a || a->pinned != pinned)
            die("%s(%p): not a pointer %s returned (host memory, a view into an allocation, or already freed)", fn, p,
                pinned ? "cudaMallocHost" : "cudaMalloc");
        allocs.erase((uintptr_t)p);
    }
    free(p);
    return cudaSuccess;
}
/* side: 1 device (cudaMalloc), 0 host (anything but cudaMalloc), -1 either */
static void check_side(const char *fn, const char *which, const void *p, size_t n, int side) {
    int pinned = 0;
    long sz = alloc_holding(p, n, &pinned);
    int dev = sz >= 0 && !pinned;
    if (side == 1 && !dev) {
        long s0 = alloc_holding(p, 0, &pinned);
        if (s0 >= 0 && !pinned) die("%s: %s [%p, +%zu bytes) runs past the end of its device allocation of %ld bytes", fn, which, p, n, s0);
        die("%s: %s %p is not device memory (wrong direction, or a host pointer)", fn, which, p);
    }
    if (side == 0 && alloc_holding(p, 0, &pinned) >= 0 && !pinned) die("%s: %s %p is device memory where the copy direction says host", fn, which, p);
    if (side == -1 && alloc_holding(p, 0, &pinned) >= 0 && sz < 0) die("%s: %s [%p, +%zu bytes) runs past the end of its allocation", fn, which, p, n);
}
/* under ASan: the whole range is addressable (the raw copy is not instrumented, so check it here) */
static void check_addressable(const char *fn, const char *which, const void *p, size_t n) {
#if EMU_ASAN
    void *bad = __asan_region_is_poisoned((void *)p, n);
    if (bad)
        die("%s: %s [%p, +%zu bytes) is not addressable from byte %zu on (past the end of a buffer, or freed)", fn,
            which, p, n, (size_t)((const char *)bad - (const char *)p));
#endif
}
static void check_copy(const char *fn, void *d, const void *s, size_t n, cudaMemcpyKind k) {
    if (!n) return;
    check_addressable(fn, "destination", d, n);
    check_addressable(fn, "source", s, n);
    switch (k) {
    case cudaMemcpyHostToDevice: check_side(fn, "destination", d, n, 1); check_side(fn, "source", s, n, 0); break;
    case cudaMemcpyDeviceToHost: check_side(fn, "destination", d, n, 0); check_side(fn, "source", s, n, 1); break;
    case cudaMemcpyDeviceToDevice: check_side(fn, "destination", d, n, 1); check_side(fn, "source", s, n, 1); break;
    case cudaMemcpyHostToHost: check_side(fn, "destination", d, n, 0); check_side(fn, "source", s, n, 0); break;
    default: check_side(fn, "destination", d, n, -1); check_side(fn, "source", s, n, -1); break;
    }
}
/* ---- streams and events ----
 * A stream is a queue of work (emu::enqueue). done counts the operations that have run, enq those enqueued, so
 * operation i (0-based, in enqueue order) has run when done > i. An event remembers its latest record: the
 * stream and the index of the record operation. Streams and events are never freed, only marked destroyed: a
 * wait captured before a cudaStreamDestroy may still name the stream, whose queued work still runs when needed,
 * and a record queued before a cudaEventDestroy still runs (it changes nothing once a later record was made). */
struct Op {
    unsigned long long ticket; /* global enqueue order */
    const char *what;
    std::function<void()> fn;
};
}  // namespace emu
struct emu_stream {
    int flags, dead;
    std::deque<emu::Op> q;
    unsigned long long enq, done;
};
struct emu_event {
    unsigned flags;
    int recorded; /* the latest record has run */
    double t;
    cudaStream_t s; /* the latest record's stream (NULL: never recorded, or recorded on the legacy stream) */
    unsigned long long idx;
    unsigned long long nrec; /* records made; a queued record that is no longer the latest changes nothing */
};
namespace emu {
static std::set<const void *> streams, events;
/* every stream ever created, in creation order; never destroyed (nor are the streams: see above), so that it
 * outlives static destructors and the leak check at exit finds it */
static std::vector<emu_stream *> &all_streams = *new std::vector<emu_stream *>;
static std::vector<emu_event *> &all_events = *new std::vector<emu_event *>; /* likewise */
static std::mutex obj_lock;
static std::recursive_mutex queue_lock; /* the queues and their execution */
static unsigned long long g_ticket;
static void check_stream(const char *fn, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(obj_lock);
    if (s && !streams.count(s)) die("%s: stream %p was never created or is already destroyed", fn, (void *)s);
}
static emu_event *check_event(const char *fn, cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(obj_lock);
    if (!e || !events.count(e)) die("%s: event %p was never created or is already destroyed", fn, (void *)e);
    return e;
}
static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
/* EMU_STREAMS: 0 sync (run at once), 1 defer (lazy: run what a synchronisation needs, no more), 2 reverse (every
 * synchronisation runs all queued work, latest-enqueued stream first) */
static int stream_mode() {
    static int m = -1;
    if (m < 0) {
        const char *e = getenv("EMU_STREAMS");
        if (!e || !*e || !strcmp(e, "defer")) m = 1;
        else if (!strcmp(e, "sync")) m = 0;
        else if (!strcmp(e, "reverse")) m = 2;
        else die("EMU_STREAMS=%s: expected sync, defer or reverse", e);
    }
    return m;
}
static void run_head(emu_stream *s) {
    Op op = std::move(s->q.front());
    s->q.pop_front();
    op.fn();
    s->done++;
}
/* runs s's operations up to and including index idx (and, through their waits, what they depend on) */
static void run_until(emu_stream *s, unsigned long long idx) {
    std::lock_guard<std::recursive_mutex> lock(queue_lock);
    while (s->done <= idx && !s->q.empty()) run_head(s);
}
/* runs every queued operation of the streams chosen (all, or the blocking ones: the legacy stream's view): among
 * the streams with work, the one whose next operation was enqueued last goes next (so of two unordered operations
 * on different streams, the later one in program order runs first) */
static void run_all(int blocking_only) {
    std::lock_guard<std::recursive_mutex> lock(queue_lock);
    for (;;) {
        emu_stream *pick = nullptr;
        for (emu_stream *s : all_streams) {
            if (s->q.empty() || (blocking_only && (s->flags & cudaStreamNonBlocking))) continue;
            if (!pick || s->q.front().ticket > pick->q.front().ticket) pick = s;
        }
        if (!pick) return;
        run_head(pick);
    }
}
/* the host waits for operation idx of s: defer runs just that (and what it waits for), reverse everything */
static void force(emu_stream *s, unsigned long long idx) {
    if (stream_mode() == 2) run_all(0);
    else run_until(s, idx);
}
static void report_unsynchronised() {
    unsigned long long n = 0;
    for (emu_stream *s : all_streams) n += s->q.size();
    if (n)
        fprintf(stderr, "emu: %llu operations were still queued at exit (never synchronised, so never run or checked)\n", n);
}
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn) {
    std::lock_guard<std::recursive_mutex> lock(queue_lock);
    if (s && s->dead) die("%s on stream %p after cudaStreamDestroy", what, (void *)s);
    static int registered;
    if (!registered) {
        registered = 1;
        atexit(report_unsynchronised);
    }
    if (stream_mode() == 0) {
        fn();
        return;
    }
    if (!s) { /* the legacy stream: after all blocking streams' work, and before any later */
        run_all(1);
        fn();
        return;
    }
    s->q.push_back(Op{g_ticket++, what, std::move(fn)});
    s->enq++;
}
/* index of the operation enqueue() just put on s */
static unsigned long long last_index(cudaStream_t s) { return s->enq - 1; }
__attribute__((constructor)) static void emu_init() { setvbuf(stdout, nullptr, _IOLBF, 0); }
__attribute__((destructor)) static void emu_fini() {
    if (getenv("EMU_STATS"))
        fprintf(stderr, "emu: %lld launches, %lld blocks, %lld fiber switches, %zu allocations still held\n", n_launches,
                n_blocks, n_switches, allocs.size());
}
}  // namespace emu

using namespace emu;
cudaError_t cudaMalloc(void **p, size_t n) { return do_alloc(p, n, 0); }
/* cudaFree and cudaFreeHost synchronise the device first, as CUDA does */
cudaError_t cudaFree(void *p) {
    run_all(0);
    return do_free(p, 0, "cudaFree");
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    (void)s;
    return do_alloc(p, n, 0);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    enqueue(s, "cudaFreeAsync", [p]() { do_free(p, 0, "cudaFreeAsync"); });
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return do_alloc(p, n, 1); }
cudaError_t cudaFreeHost(void *p) {
    run_all(0);
    return do_free(p, 1, "cudaFreeHost");
}
/* registered memory is pinned (kind 2 in the table, so cudaFreeHost refuses it) and stays the caller's */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
    (void)flags;
    if (!p || !n) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lock(alloc_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a + n - 1);
    if (it != allocs.begin() && (--it, it->first + it->second.size > a))
        die("cudaHostRegister(%p, %zu): the range overlaps memory the emulator already knows (an allocation or a "
            "registered range)", p, n);
    allocs[a] = Alloc{n, 2};
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
    run_all(0);
    std::lock_guard<std::mutex> lock(alloc_lock);
    const Alloc *al = alloc_at(p);
    if (!al || al->pinned != 2) die("cudaHostUnregister(%p): not the start of a range cudaHostRegister page-locked", p);
    allocs.erase((uintptr_t)p);
    return cudaSuccess;
}
/* The same large device-to-host download repeated with no launch in between is a bug pattern (a macro that
 * evaluates `model->logits(model)` once per element turns one copy into millions: hours on a GPU, a hang here).
 * After EMU_MAX_REPEATED_DOWNLOADS (default 100) identical downloads of >= 64 KiB in a row, stop and say so. */
static void check_repeated_download(const void *s, size_t n, cudaMemcpyKind k) {
    static const void *last_src;
    static size_t last_n;
    static long long last_launch = -1, repeats;
    if (k != cudaMemcpyDeviceToHost || n < (64u << 10)) return;
    if (s == last_src && n == last_n && n_enqueued == last_launch) repeats++;
    else { last_src = s; last_n = n; last_launch = n_enqueued; repeats = 1; }
    const char *e = getenv("EMU_MAX_REPEATED_DOWNLOADS");
    long long limit = e ? atoll(e) : 100;
    if (limit > 0 && repeats >= limit)
        die("cudaMemcpy: the same %zu bytes downloaded from device %p %lld times in a row with no kernel launch in "
            "between (a download inside a loop, e.g. a macro argument evaluated per element?)", n, s, repeats);
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    check_copy("cudaMemcpy", d, s, n, k);
    check_repeated_download(s, n, k);
    if (stream_mode()) run_all(1); /* the legacy stream: after every blocking stream's work */
    if (n) emu_raw_copy(d, s, n);
    return cudaSuccess;
}
enum { PAGEABLE, PINNED, DEVICE };
static int memory_kind(const void *p) {
    int pinned = 0;
    if (alloc_holding(p, 0, &pinned) < 0) return PAGEABLE;
    return pinned ? PINNED : DEVICE;
}
/* On a stream, as CUDA does: a copy from pageable host memory takes the bytes at the call (they are staged); one
 * into pageable memory, or host to host, is synchronous with respect to the host (so it runs the stream up to it
 * now); otherwise pinned and device memory are read and written when the copy runs. */
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    check_stream("cudaMemcpyAsync", st);
    check_copy("cudaMemcpyAsync", d, s, n, k);
    check_repeated_download(s, n, k);
    if (!n) return cudaSuccess;
    const int kd = memory_kind(d), ks = memory_kind(s);
    if (ks == PAGEABLE) {
        std::shared_ptr<std::vector<char>> staged = std::make_shared<std::vector<char>>((const char *)s, (const char *)s + n);
        enqueue(st, "cudaMemcpyAsync", [d, staged, n]() { emu_raw_copy(d, staged->data(), n); });
    } else {
        enqueue(st, "cudaMemcpyAsync", [d, s, n]() { emu_raw_copy(d, s, n); });
    }
    if (st && stream_mode() && (kd == PAGEABLE || (kd != DEVICE && ks != DEVICE))) force(st, last_index(st));
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    if (n) check_side("cudaMemset", "destination", d, n, 1);
    if (stream_mode()) run_all(1);
    if (n) emu_raw_fill(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    check_stream("cudaMemsetAsync", st);
    if (!n) return cudaSuccess;
    check_side("cudaMemsetAsync", "destination", d, n, 1);
    enqueue(st, "cudaMemsetAsync", [d, v, n]() { emu_raw_fill(d, v, n); });
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new emu_stream{(int)flags, 0, {}, 0, 0};
    std::lock_guard<std::recursive_mutex> qlock(queue_lock);
    all_streams.push_back(*s);
    std::lock_guard<std::mutex> lock(obj_lock);
    streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    check_stream("cudaStreamDestroy", s);
    if (!s) return cudaErrorInvalidResourceHandle;
    /* CUDA lets queued work finish on its own: it stays queued here (and runs when something needs it); the
     * stream can take no more */
    std::lock_guard<std::mutex> lock(obj_lock);
    streams.erase(s);
    s->dead = 1;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    check_stream("cudaStreamSynchronize", s);
    if (!s) run_all(1);
    else if (!s->q.empty()) force(s, s->enq - 1);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    check_stream("cudaStreamWaitEvent", s);
    check_event("cudaStreamWaitEvent", e);
    emu_stream *es = e->s; /* the record current now (a later record does not move this wait) */
    unsigned long long idx = e->idx;
    if (!es) return cudaSuccess; /* never recorded, or on the legacy stream (already run): nothing to wait for */
    enqueue(s, "cudaStreamWaitEvent", [es, idx]() { run_until(es, idx); });
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { run_all(0); return cudaSuccess; }
/* EMU_DEVICES (default 1): how many GPUs the process sees; all are the same host memory, so two ranks under
 * mpirun with EMU_DEVICES=2 each "own" one and take the one-GPU-per-rank paths (NCCL: include/nccl.h) */
static int emu_devices() {
    const char *e = getenv("EMU_DEVICES");
    int n = e ? atoi(e) : 1;
    return n >= 1 ? n : 1;
}
static int current_device;
/* EMU_DRIVER_VERSION (CUDA's encoding, e.g. 12080) plays a driver older than the emulated CUDA 13.0 runtime: every
 * device query then fails as a real one does, with cudaErrorInsufficientDriver (the failure drill of an old driver) */
static int emu_driver_version() {
    const char *e = getenv("EMU_DRIVER_VERSION");
    return e ? atoi(e) : 13000;
}
cudaError_t cudaGetDeviceCount(int *n) {
    if (emu_driver_version() < 13000) { *n = 0; return cudaErrorInsufficientDriver; }
    *n = emu_devices();
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = current_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu_devices()) return cudaErrorInvalidValue;
    current_device = d;
    return cudaSuccess;
}
/* each emulated device its own bus id, so ranks on different devices count as owning a GPU each */
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int dev) {
    if (dev < 0 || dev >= emu_devices()) return cudaErrorInvalidValue;
    snprintf(bus, (size_t)len, "0000:%02x:00.0", dev + 1);
    return cudaSuccess;
}
static int emu_sms() {
    const char *e = getenv("EMU_SMS");
    return e ? atoi(e) : 4; /* few SMs: grids sized by the SM count stay small */
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = emu_sms(); break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    default: *v = 0; return cudaErrorInvalidValue; /* clock and bus width: unknown, callers skip bandwidth figures */
    }
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (dev/cuda/emu)");
    p->totalGlobalMem = (size_t)8 << 30;
    p->major = 9;
    p->multiProcessorCount = emu_sms();
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->sharedMemPerBlock = 48 << 10;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = emu_driver_version(); return cudaSuccess; }
cudaError_t cudaGetLastError() { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return last_error; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    default: return "emulated error";
    }
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new emu_event{flags, 0, 0, nullptr, 0, 0};
    std::lock_guard<std::recursive_mutex> qlock(queue_lock);
    all_events.push_back(*e);
    std::lock_guard<std::mutex> lock(obj_lock);
    events.insert(*e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    check_stream("cudaEventRecord", s);
    check_event("cudaEventRecord", e);
    std::lock_guard<std::recursive_mutex> lock(queue_lock);
    const unsigned long long my = ++e->nrec;
    e->recorded = 0;
    enqueue(s, "cudaEventRecord", [e, my]() {
        if (my != e->nrec) return; /* superseded by a later record */
        e->recorded = 1;
        e->t = now_ms();
    });
    e->s = s && stream_mode() ? s : nullptr;
    e->idx = e->s ? last_index(s) : 0;
    return cudaSuccess;
}
static void event_wait(emu_event *e) {
    if (e->s && e->s->done <= e->idx) force(e->s, e->idx);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { event_wait(check_event("cudaEventSynchronize", e)); return cudaSuccess; }
/* runs the record (a program that polls would spin forever otherwise) */
cudaError_t cudaEventQuery(cudaEvent_t e) { event_wait(check_event("cudaEventQuery", e)); return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    check_event("cudaEventElapsedTime", a);
    check_event("cudaEventElapsedTime", b);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    event_wait(a);
    event_wait(b);
    if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    check_event("cudaEventDestroy", e); /* its queued records may still run: the event is marked, not freed */
    {
        std::lock_guard<std::mutex> lock(obj_lock);
        events.erase(e);
    }
    return cudaSuccess; /* not freed: records queued before may still run (all_events keeps it) */
}
