// backend/cuda/emu/emu_kernel.cpp: runs kernel launches (the model and its limits are in
// emu_kernel.h) on one of two engines, the same barriers and warp exchanges for both:
//
// fibers (the default): the launching thread runs each block's threads as fibers
//   (emu_fiber.h), in turns: a thread runs until it waits at a barrier, then the next one
//   does; the last to arrive releases the barrier and carries on. No OS thread hand-overs,
//   so a barrier costs ~10-50 ns per thread instead of a futex round trip (emu_bench). A
//   round of turns in which every waiting thread finds its barrier still closed is a
//   deadlock (threads of a block at different barriers): one stderr line, abort.
// threads (MEGAC_EMU_ENGINE=threads, and always under ThreadSanitizer, which sees races only
//   between real threads): the launcher (holding the pool's launch lock, so host threads
//   launch one at a time) grows a pool of real threads to the block size, resets the
//   block's barriers, publishes the launch and wakes the first block-size workers. Worker i
//   is thread i of every block: it runs the kernel for block 0, then leaves the warp and
//   block barriers and waits at the block-end barrier; the last thread to arrive resets the
//   barriers for the next block. After the last block it signals the launcher. All waiting
//   is on std::atomic (futex) after a few sched_yield polls, and every hand-over is a mutex
//   or an acquire/release pair, so ThreadSanitizer sees the same happens-before as CUDA.
//
// Either way launches run one at a time (the launch lock): static __shared__ is one copy per
// kernel function (a global, so AddressSanitizer checks its bounds).
//
// Global state: the pool (workers, the block's barriers and warp slots, the current launch).
// It models the hardware, so it is process-wide; it is allocated once and never destroyed,
// and its threads are detached, so exit() or abort() from a kernel thread cannot hang on it.
#include "emu_block.h"
#include "emu_fiber.h"
#include "emu_internal.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

thread_local constinit uint3 threadIdx{};
thread_local constinit uint3 blockIdx{};
thread_local constinit dim3 blockDim{};
thread_local constinit dim3 gridDim{};

using namespace emu;

namespace {

void require_kernel(const char *what) {
    if (tctx.launch) return;
    fprintf(stderr, "emu: %s called outside a kernel\n", what);
    abort();
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

// Which engine runs launches: fibers unless MEGAC_EMU_ENGINE=threads or ThreadSanitizer.
bool use_fibers(void) {
#if defined(__SANITIZE_THREAD__)
    return false;
#else
    static const bool fibers = [] {
        const char *e = getenv("MEGAC_EMU_ENGINE");
        if (!e || !*e || strcmp(e, "fibers") == 0) return true;
        if (strcmp(e, "threads") != 0)
            fprintf(stderr, "emu: ignoring MEGAC_EMU_ENGINE=%s (fibers or threads)\n", e);
        return strcmp(e, "threads") != 0;
    }();
    return fibers;
#endif
}

void fiber_enter(unsigned id, void *arg) {
    Pool &P = *static_cast<Pool *>(arg);
    const dim3 b = P.launch.block;
    threadIdx = uint3{id % b.x, id / b.x % b.y, id / (b.x * b.y)};
    tctx = P.fiber_ctx[id];
}
void fiber_leave(unsigned id, void *arg) { static_cast<Pool *>(arg)->fiber_ctx[id] = tctx; }
void fiber_body(unsigned id, void *arg) {
    (void)id;
    const Launch &L = static_cast<Pool *>(arg)->launch;
    L.thunk(L.call);
    tctx.warp->bar.leave();
    tctx.block->sync.leave();
}

// Runs every block of P.launch as fibers on this thread, one block after another. Launch
// lock held. Aborts on a deadlock.
void run_fibers(Pool &P) {
    Launch &L = P.launch;
    Block &B = P.block;
    const ThreadCtx host = tctx;
    blockDim = L.block;
    gridDim = L.grid;
    const EmuFiberHooks hooks{fiber_enter, fiber_leave, fiber_body, &P};
    for (uint64_t b = 0; b < L.nblocks; b++) {
        blockIdx = uint3{(unsigned)(b % L.grid.x), (unsigned)(b / L.grid.x % L.grid.y),
                         (unsigned)(b / L.grid.x / L.grid.y)};
        reset_block(B, L.nthreads);
        for (unsigned i = 0; i < L.nthreads; i++)
            P.fiber_ctx[i] = ThreadCtx{&L, &B, &B.warps[i / 32], (int)(i % 32), 0, B.serial << 32};
        if (!emu_fibers_run(L.nthreads, hooks)) {
            fprintf(stderr,
                    "emu: kernel %s: block (%u,%u,%u): its threads wait at barriers that can "
                    "never open (some at __syncthreads, others at a warp barrier or one that "
                    "returned threads cannot reach): a deadlock (undefined on a GPU)\n",
                    L.name, blockIdx.x, blockIdx.y, blockIdx.z);
            abort();
        }
    }
    tctx = host;
    threadIdx = uint3{};
    blockIdx = uint3{};
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
    const bool fibers = use_fibers();
    void *smem_buf = nullptr;
    if (posix_memalign(&smem_buf, 64, smem) != 0) {
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
    if (fibers)
        run_fibers(P);
    else if (!run_threads(P))
        emu_set_last_error(cudaErrorLaunchFailure);
    free(smem_buf);
}
