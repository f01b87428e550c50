// backend/cuda/emu/emu_threads.cpp: the emulator's real-thread engine (MEGAC_EMU_ENGINE=threads,
// and always under ThreadSanitizer: see emu_kernel.cpp), the pool that creates and owns the
// state of emu_block.h, and the wait both engines' barriers use.
#include "emu_block.h"
#include "emu_fiber.h"

#include <cstdio>
#include <pthread.h>
#include <sched.h>

namespace emu {

constexpr size_t kStackBytes = 2u << 20;  // per worker thread
constexpr int kYields = 16;               // sched_yield polls before sleeping (emu_bench)

thread_local constinit ThreadCtx tctx;

// The pool: created on first use, never destroyed (see emu_kernel.cpp's header comment).
Pool &pool() {
    static Pool *const p = new Pool;
    return *p;
}

void wait_change(const std::atomic<unsigned> &a, unsigned old) {
    if (emu_fiber_self() >= 0) {
        for (bool stalled = false; a.load(std::memory_order_acquire) == old; stalled = true)
            emu_fiber_yield(stalled);
        return;
    }
    for (int i = 0; i < kYields; i++) {
        if (a.load(std::memory_order_acquire) != old) return;
        sched_yield();
    }
    while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

namespace {

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

}  // namespace

bool run_threads(Pool &P) {
    const unsigned nthreads = P.launch.nthreads;
    if (!grow(P, nthreads, P.launch.name)) return false;
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
    return true;
}

}  // namespace emu
