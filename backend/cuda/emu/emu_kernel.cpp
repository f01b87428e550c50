// backend/cuda/emu/emu_kernel.cpp: runs kernel launches on a pool of real threads (the model
// and its limits are in emu_kernel.h).
//
// How a launch runs: the launcher (holding the pool's launch lock, so host threads launch
// one at a time) checks the configuration, grows the pool to the block size, resets the
// block's barriers, publishes the launch and wakes the first block-size workers. Worker i is
// thread i of every block: it runs the kernel for block 0, then leaves the warp and block
// barriers and waits at the block-end barrier; the last thread to arrive resets the barriers
// for the next block. After the last block it signals the launcher. All waiting is on
// std::atomic (futex) after a few sched_yield polls, and every hand-over is a mutex or an
// acquire/release pair, so ThreadSanitizer sees the same happens-before as CUDA gives.
//
// Global state: the pool (workers, the block's barriers and warp slots, the current launch).
// It models the hardware, so it is process-wide; it is allocated once and never destroyed,
// and its threads are detached, so exit() or abort() from a kernel thread cannot hang on it.
#include "emu_kernel.h"
#include "emu_internal.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <sched.h>

thread_local constinit uint3 threadIdx{};
thread_local constinit uint3 blockIdx{};
thread_local constinit dim3 blockDim{};
thread_local constinit dim3 gridDim{};

namespace {

constexpr unsigned kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr size_t kMaxSmem = 232448;           // 227 KB: sm_90's opt-in dynamic shared memory
constexpr size_t kStackBytes = 2u << 20;     // per worker thread
constexpr int kYields = 16;                  // sched_yield polls before sleeping (emu_bench)

// Waits until a != old: a few sched_yield polls (cheap when the peers are about to arrive),
// then sleeps in std::atomic::wait (a futex).
template <class T>
void wait_change(const std::atomic<T> &a, T old) {
    for (int i = 0; i < kYields; i++) {
        if (a.load(std::memory_order_acquire) != old) return;
        sched_yield();
    }
    while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

// A reusable barrier of `expected` threads, from which a thread can leave for good (a
// kernel thread that returns no longer counts, as on hardware).
class Barrier {
  public:
    void reset(int n) {
        std::lock_guard<std::mutex> lock(m_);
        expected_ = n;
        arrived_ = 0;
    }
    // Waits for the others; the last to arrive runs on_complete() first. True for that one.
    template <class F>
    bool arrive_and_wait(F &&on_complete) {
        std::unique_lock<std::mutex> lock(m_);
        unsigned g = gen_.load(std::memory_order_relaxed);
        if (++arrived_ == expected_) {
            on_complete();
            release(g);
            return true;
        }
        lock.unlock();
        wait_change(gen_, g);
        return false;
    }
    bool arrive_and_wait() { return arrive_and_wait([] {}); }
    void leave() {
        std::lock_guard<std::mutex> lock(m_);
        if (--expected_ > 0 && arrived_ == expected_) release(gen_.load(std::memory_order_relaxed));
    }

  private:
    void release(unsigned g) {
        arrived_ = 0;
        gen_.store(g + 1, std::memory_order_release);
        gen_.notify_all();
    }
    std::mutex m_;
    int expected_ = 0, arrived_ = 0;
    std::atomic<unsigned> gen_{0};
};

struct Slot {
    uint64_t bits, tag;  // a lane's offer in a warp exchange, tagged with the exchange
};
struct alignas(64) Warp {
    Barrier bar;
    int lanes = 0;        // 32, or fewer in a partial last warp
    Slot slot[2][32];     // double-buffered: exchange k uses slot[k % 2]
};
struct Block {            // the block running now (blocks run in turn)
    Barrier sync, end;    // __syncthreads; all threads returned
    Warp warps[kMaxWarps];
    uint64_t serial = 0;  // blocks run so far (tags the warp slots)
};
struct Launch {
    const char *name;
    EmuThunk thunk;
    const void *call;
    dim3 grid, block;
    unsigned nthreads;
    uint64_t nblocks;
    void *smem;                 // (smem bytes) dynamic shared memory
    std::atomic<bool> warned;   // a bad shuffle was reported
};
struct Pool {
    std::mutex launch_lock;     // one launch at a time
    unsigned nworkers = 0;
    uint32_t serial = 0;        // launches so far, mod 2^21
    // Per group of 32 workers: (launch serial << 11) | threads of the launch's blocks.
    std::atomic<uint32_t> start[kMaxWarps];
    std::atomic<uint32_t> done{0};  // serial of the last finished launch
    Launch launch;
    Block block;
};

// The pool: created on first use, never destroyed (see the header comment).
Pool &pool() {
    static Pool *const p = new Pool;
    return *p;
}

struct ThreadCtx {             // what a worker knows about the kernel thread it runs
    Launch *launch = nullptr;  // NULL outside a kernel
    Block *block = nullptr;
    Warp *warp = nullptr;
    int lane = 0;
    unsigned parity = 0;
    uint64_t tag = 0;          // (block serial << 32) | warp exchanges so far
};
thread_local constinit ThreadCtx tctx;

void require_kernel(const char *what) {
    if (tctx.launch) return;
    fprintf(stderr, "emu: %s called outside a kernel\n", what);
    abort();
}

// Sets the barriers and warps of the block for nthreads threads.
void reset_block(Block &b, unsigned nthreads) {
    b.sync.reset((int)nthreads);
    for (unsigned w = 0; w * 32 < nthreads; w++) {
        b.warps[w].lanes = (int)(nthreads - w * 32 < 32 ? nthreads - w * 32 : 32);
        b.warps[w].bar.reset(b.warps[w].lanes);
    }
    b.serial++;
}

// Worker `id` runs thread id of every block of the current launch.
void run_thread(Pool &P, unsigned id) {
    const Launch &L = P.launch;  // read before the last block ends: then the launcher reuses it
    const EmuThunk thunk = L.thunk;
    const void *const call = L.call;
    const dim3 grid = L.grid, block = L.block;
    const uint64_t nblocks = L.nblocks;
    const unsigned nthreads = L.nthreads;
    threadIdx = uint3{id % block.x, id / block.x % block.y, id / (block.x * block.y)};
    blockDim = block;
    gridDim = grid;
    Block &B = P.block;
    tctx = ThreadCtx{&P.launch, &B, &B.warps[id / 32], (int)(id % 32), 0, 0};
    for (uint64_t b = 0; b < nblocks; b++) {
        blockIdx = uint3{(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                         (unsigned)(b / grid.x / grid.y)};
        tctx.tag = B.serial << 32;
        tctx.parity = 0;
        thunk(call);
        tctx.warp->bar.leave();
        B.sync.leave();
        bool last = B.end.arrive_and_wait([&] { reset_block(B, nthreads); });
        if (last && b + 1 == nblocks) {
            tctx.launch = nullptr;
            P.done.store(P.serial, std::memory_order_release);
            P.done.notify_all();
            return;
        }
    }
    tctx.launch = nullptr;
}

struct WorkerStart {
    unsigned id;
    uint32_t seen;  // the group's start word when the worker was made
};

void *worker_main(void *arg) {
    WorkerStart ws = *static_cast<WorkerStart *>(arg);
    delete static_cast<WorkerStart *>(arg);
    Pool &P = pool();
    std::atomic<uint32_t> &start = P.start[ws.id / 32];
    for (uint32_t seen = ws.seen;;) {
        wait_change(start, seen);
        seen = start.load(std::memory_order_acquire);
        if (ws.id < (seen & 2047u)) run_thread(P, ws.id);
    }
    return nullptr;
}

// Grows the pool to n workers. Launch lock held. False (with a message) if a thread fails.
bool grow(Pool &P, unsigned n, const char *name) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, kStackBytes);
    bool ok = true;
    for (; P.nworkers < n && ok; P.nworkers++) {
        auto *ws = new WorkerStart{P.nworkers, P.start[P.nworkers / 32].load()};
        pthread_t t;
        int rc = pthread_create(&t, &attr, worker_main, ws);
        if (rc != 0) {
            delete ws;
            fprintf(stderr, "emu: launch of %s: cannot start worker thread %u (error %d)\n",
                    name, P.nworkers, rc);
            ok = false;
            break;
        }
    }
    pthread_attr_destroy(&attr);
    return ok;
}

// False (with "emu: launch of <name>: <what> (<value> > <limit>)") if v > limit.
bool within(const char *name, const char *what, unsigned long long v, unsigned long long limit) {
    if (v <= limit) return true;
    fprintf(stderr, "emu: launch of %s: %s (%llu > %llu)\n", name, what, v, limit);
    return false;
}

bool config_ok(const char *name, dim3 g, dim3 b, size_t smem) {
    const unsigned dims[6] = {g.x, g.y, g.z, b.x, b.y, b.z};
    const char *names[6] = {"grid.x", "grid.y", "grid.z", "block.x", "block.y", "block.z"};
    for (int i = 0; i < 6; i++) {
        if (dims[i] == 0) {
            fprintf(stderr, "emu: launch of %s: %s is zero (0 < 1)\n", name, names[i]);
            return false;
        }
    }
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    return within(name, "threads per block", threads, kMaxThreads) &&
           within(name, "block.x", b.x, 1024) && within(name, "block.y", b.y, 1024) &&
           within(name, "block.z", b.z, 64) && within(name, "grid.x", g.x, 0x7fffffffu) &&
           within(name, "grid.y", g.y, 65535) && within(name, "grid.z", g.z, 65535) &&
           within(name, "dynamic shared memory bytes", smem, kMaxSmem);
}

// Offers bits to the warp and waits for its lanes; returns the slot buffer used.
unsigned exchange(uint64_t bits) {
    unsigned p = tctx.parity ^= 1u;
    tctx.warp->slot[p][tctx.lane] = Slot{bits, ++tctx.tag};
    tctx.warp->bar.arrive_and_wait();
    return p;
}

// The source lane of a shuffle by PTX's shfl rules (own lane when out of the segment).
int source_lane(EmuShflMode mode, int lane, int b, int width) {
    int seg = (32 - width) & 31;                 // lane bits that select the segment
    int lo = lane & seg, hi = lo | (31 & ~seg);  // the segment's first and last lane
    int j = lane;
    switch (mode) {
    case EMU_SHFL_IDX: j = lo | (b & 31 & ~seg); break;
    case EMU_SHFL_UP: j = lane - b; return j >= lo ? j : lane;
    case EMU_SHFL_DOWN: j = lane + b; break;
    case EMU_SHFL_XOR: j = lane ^ b; break;
    }
    return j <= hi ? j : lane;
}

}  // namespace

void __syncthreads(void) {
    require_kernel("__syncthreads");
    tctx.block->sync.arrive_and_wait();
}

void __syncwarp(unsigned mask) {
    (void)mask;
    require_kernel("__syncwarp");
    tctx.warp->bar.arrive_and_wait();
}

// A seq_cst read-modify-write on one shared atomic: a full fence on the host, and an ordering
// ThreadSanitizer understands (it does not model atomic_thread_fence).
void __threadfence(void) {
    static std::atomic<unsigned> fence;  // models the memory system's ordering point
    fence.fetch_add(1, std::memory_order_seq_cst);
}
void __threadfence_block(void) { __threadfence(); }

uint64_t emu_shfl(uint64_t bits, EmuShflMode mode, int b, int width) {
    require_kernel("__shfl_*_sync");
    unsigned p = exchange(bits);
    int src = source_lane(mode, tctx.lane, b, width);
    const Warp &w = *tctx.warp;
    if (src < w.lanes && w.slot[p][src].tag == tctx.tag) return w.slot[p][src].bits;
    if (!tctx.launch->warned.exchange(true)) {
        fprintf(stderr,
                "emu: kernel %s: __shfl_*_sync in warp %d reads lane %d, which does not exist "
                "or has returned (undefined on a GPU; NaN here)\n",
                tctx.launch->name, (int)(&w - tctx.block->warps), src);
    }
    return ~(uint64_t)0;
}

unsigned emu_ballot(int pred, unsigned *live) {
    require_kernel("__ballot_sync");
    unsigned p = exchange(pred != 0);
    const Warp &w = *tctx.warp;
    unsigned yes = 0, alive = 0;
    for (int l = 0; l < w.lanes; l++) {
        if (w.slot[p][l].tag != tctx.tag) continue;
        alive |= 1u << l;
        if (w.slot[p][l].bits) yes |= 1u << l;
    }
    if (live) *live = alive;
    return yes;
}

void *emu_dynamic_shared(void) {
    require_kernel("DYNAMIC_SHARED");
    return tctx.launch->smem;
}

void emu_launch_erased(const char *name, EmuThunk thunk, const void *call, dim3 grid, dim3 block,
                       size_t smem) {
    if (tctx.launch) {
        fprintf(stderr, "emu: kernel %s launches %s: device-side launches are not emulated\n",
                tctx.launch->name, name);
        abort();
    }
    if (!config_ok(name, grid, block, smem)) {
        emu_set_last_error(cudaErrorInvalidConfiguration);
        return;
    }
    Pool &P = pool();
    std::lock_guard<std::mutex> lock(P.launch_lock);
    const unsigned nthreads = block.x * block.y * block.z;
    void *smem_buf = nullptr;
    if (!grow(P, nthreads, name) || posix_memalign(&smem_buf, 64, smem) != 0) {
        emu_set_last_error(cudaErrorLaunchFailure);
        return;
    }
    memset(smem_buf, EMU_GARBAGE_BYTE, smem);
    Launch &L = P.launch;
    L.name = name;
    L.thunk = thunk;
    L.call = call;
    L.grid = grid;
    L.block = block;
    L.nthreads = nthreads;
    L.nblocks = (uint64_t)grid.x * grid.y * grid.z;
    L.smem = smem_buf;
    L.warned.store(false, std::memory_order_relaxed);
    P.block.end.reset((int)nthreads);
    reset_block(P.block, nthreads);
    const uint32_t done0 = P.done.load(std::memory_order_relaxed);
    P.serial = (P.serial + 1) & 0x1fffffu;
    const uint32_t word = P.serial << 11 | nthreads;
    for (unsigned g = 0; g * 32 < nthreads; g++) {
        P.start[g].store(word, std::memory_order_release);
        P.start[g].notify_all();
    }
    wait_change(P.done, done0);
    free(smem_buf);
}
