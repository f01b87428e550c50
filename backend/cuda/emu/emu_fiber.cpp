// backend/cuda/emu/emu_fiber.cpp: fibers on the calling thread (contract in emu_fiber.h).
//
// A fiber is a stack of its own (mmap'd, lazily committed, a guard page below it) and a
// saved stack pointer. emu_ctx_switch pushes the callee-saved registers and the x87/SSE
// control words on the current stack, stores the stack pointer, loads the other one and pops
// the same in reverse (System V x86-64; other machines use ucontext, slower: it makes a
// system call per switch). A new fiber's stack is laid out as if it had switched away just
// before fiber_entry, so the first switch to it "returns" there. Fibers belong to the thread
// that made them (thread_local pool: kernels cache thread-local addresses, so a fiber must
// never resume on another thread) and live until the process ends (never unmapped: exit()
// may run on one of them). AddressSanitizer is told of every stack switch.
#include "emu_fiber.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>  // defines: __sanitizer_start_switch_fiber
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
// emu_ctx_switch(save, to): stores the current stack pointer in *save, resumes the context
// whose stack pointer is `to`.
extern "C" void emu_ctx_switch(void **save, void *to);
asm(R"(
    .pushsection .text
    .globl emu_ctx_switch
    .hidden emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr 8(%rsp)
    fldcw (%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
    .popsection
)");
#else
#define EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

namespace {

constexpr size_t kStackBytes = 512u << 10;  // per fiber: kernels keep small arrays only

struct Fiber {
    void *sp = nullptr;       // saved stack pointer while not running
    char *stack = nullptr;    // (kStackBytes) usable stack, above a guard page
    bool done = false, stalled = false;
#if !EMU_ASM_SWITCH
    ucontext_t uc;
#endif
};

struct FiberPool {
    Fiber **f = nullptr;      // (cap) fibers, each allocated once (a parked fiber's context
    unsigned cap = 0, made = 0;  // must not move); the first `made` exist
    int cur = -1;             // the running fiber, -1 on the thread's own stack
    void *host_sp = nullptr;  // the thread's own context while a fiber runs
#if !EMU_ASM_SWITCH
    ucontext_t host_uc;
#endif
    const EmuFiberHooks *hooks = nullptr;
    const void *host_bottom = nullptr;  // the thread's own stack, for AddressSanitizer
    size_t host_size = 0;
};

// This thread's pool: allocated on first use, never freed (see the header comment).
FiberPool &pool() {
    static thread_local FiberPool *p = nullptr;
    if (!p) p = new FiberPool;
    return *p;
}

// Switches from the context saved in *save (the caller's) to `to`, telling AddressSanitizer
// which stack comes next.
#if EMU_ASM_SWITCH
void switch_to(void **save, void *to, const void *to_bottom, size_t to_size) {
#if EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, to_bottom, to_size);
    emu_ctx_switch(save, to);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    (void)to_bottom;
    (void)to_size;
    emu_ctx_switch(save, to);
#endif
}
#endif

// From fiber f back to the thread's own context (emu_fibers_run's loop).
void to_host(FiberPool &P, Fiber &f) {
#if EMU_ASM_SWITCH
    switch_to(&f.sp, P.host_sp, P.host_bottom, P.host_size);
#else
    swapcontext(&f.uc, &P.host_uc);
#endif
}

[[noreturn]] void fiber_entry(void) {
    FiberPool &P = pool();
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &P.host_bottom, &P.host_size);
#endif
    const unsigned id = (unsigned)P.cur;
    for (;;) {
        P.hooks->body(id, P.hooks->arg);
        Fiber &f = *P.f[id];
        f.done = true;
        to_host(P, f);
    }
}

#if !EMU_ASM_SWITCH
void fiber_entry_uc(void) { fiber_entry(); }
#endif

// Gives fiber i a stack whose first switch lands in fiber_entry. Aborts if mmap fails.
void make_fiber(FiberPool &P, unsigned i) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) {
        fprintf(stderr, "emu: cannot map the stack of kernel thread %u (%zu bytes)\n", i,
                kStackBytes);
        abort();
    }
    Fiber &f = *(P.f[i] = new Fiber);
    f.stack = (char *)m + page;
#if EMU_ASM_SWITCH
    // From the top: a zero return address for fiber_entry (16-aligned above it, as at a call),
    // fiber_entry itself (emu_ctx_switch's ret), six zero registers, the control words.
    uint64_t *top = (uint64_t *)(f.stack + kStackBytes);
    uint64_t *sp = top - 10;
    memset(sp, 0, 10 * sizeof *sp);
    top[-2] = (uint64_t)(uintptr_t)&fiber_entry;
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    memcpy((char *)sp + 8, &mxcsr, sizeof mxcsr);
    memcpy(sp, &fpucw, sizeof fpucw);
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = kStackBytes;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_entry_uc, 0);
#endif
}

// Makes sure fibers [0, n) exist.
void grow(FiberPool &P, unsigned n) {
    if (n > P.cap) {
        Fiber **nf = new Fiber *[n];
        for (unsigned i = 0; i < P.made; i++) nf[i] = P.f[i];
        delete[] P.f;
        P.f = nf;
        P.cap = n;
    }
    for (; P.made < n; P.made++) make_fiber(P, P.made);
}

// Runs fiber i until it yields or returns.
void turn(FiberPool &P, unsigned i) {
    Fiber &f = *P.f[i];
    P.cur = (int)i;
    P.hooks->enter(i, P.hooks->arg);
#if EMU_ASM_SWITCH
    switch_to(&P.host_sp, f.sp, f.stack, kStackBytes);
#else
    swapcontext(&P.host_uc, &f.uc);
#endif
    P.hooks->leave(i, P.hooks->arg);
    P.cur = -1;
}

}  // namespace

bool emu_fibers_run(unsigned n, const EmuFiberHooks &hooks) {
    FiberPool &P = pool();
    if (P.cur >= 0) {
        fprintf(stderr, "emu: emu_fibers_run called from a fiber\n");
        abort();
    }
    grow(P, n);
    P.hooks = &hooks;
    for (unsigned i = 0; i < n; i++) P.f[i]->done = false;
    unsigned left = n;
    while (left > 0) {
        bool progress = false;
        for (unsigned i = 0; i < n; i++) {
            Fiber &f = *P.f[i];
            if (f.done) continue;
            f.stalled = false;
            turn(P, i);
            if (f.done) left--;
            if (f.done || !f.stalled) progress = true;
        }
        if (!progress) return false;
    }
    return true;
}

int emu_fiber_self(void) { return pool().cur; }

void emu_fiber_yield(bool stalled) {
    FiberPool &P = pool();
    if (P.cur < 0) {
        fprintf(stderr, "emu: emu_fiber_yield called outside a fiber\n");
        abort();
    }
    Fiber &f = *P.f[P.cur];
    f.stalled = stalled;
    to_host(P, f);
}
