// backend/cuda/emu/emu_block.h: the block model the emulator's two engines share (internal to
// emu_kernel.cpp and emu_threads.cpp): a block's barriers, its warps' exchange slots, the
// running launch, and what each kernel thread knows about itself (tctx).
#pragma once
#include "emu_kernel.h"

#include <atomic>
#include <mutex>

namespace emu {

constexpr unsigned kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr size_t kMaxSmem = 232448;           // 227 KB: sm_90's opt-in dynamic shared memory

// Waits until a != old (emu_threads.cpp). On a fiber: gives the block's other threads turns
// until it changes. On a real thread: a few sched_yield polls (cheap when the peers are about
// to arrive), then sleeps in std::atomic::wait (a futex).
void wait_change(const std::atomic<unsigned> &a, unsigned old);

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
struct ThreadCtx {             // what a worker knows about the kernel thread it runs
    Launch *launch = nullptr;  // NULL outside a kernel
    Block *block = nullptr;
    Warp *warp = nullptr;
    int lane = 0;
    unsigned parity = 0;
    uint64_t tag = 0;          // (block serial << 32) | warp exchanges so far
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
    ThreadCtx fiber_ctx[kMaxThreads];  // the fibers' barrier state between their turns
};

// The pool: created on first use, never destroyed (see the header comment).
Pool &pool();

// The running kernel thread's state (the fiber engine swaps it in and out at each turn).
extern thread_local constinit ThreadCtx tctx;

// Sets the barriers and warps of the block for nthreads threads.
inline void reset_block(Block &b, unsigned nthreads) {
    b.sync.reset((int)nthreads);
    for (unsigned w = 0; w * 32 < nthreads; w++) {
        b.warps[w].lanes = (int)(nthreads - w * 32 < 32 ? nthreads - w * 32 : 32);
        b.warps[w].bar.reset(b.warps[w].lanes);
    }
    b.serial++;
}

// Runs P.launch on the pool's real threads (emu_threads.cpp): grows the pool to the block
// size, runs every block, returns when the last has ended. Launch lock held. False (with a
// message, nothing run) if a worker thread cannot be started.
bool run_threads(Pool &P);

}  // namespace emu
