// backend/cuda/emu/emu_fiber.h: fibers for the emulator's kernel threads (emu_fiber.cpp). The
// threads of a block run as fibers on the launching host thread: each runs until it waits at
// a barrier (emu_fiber_yield), then the next one runs. A switch saves and restores the
// callee-saved registers and the stack pointer (~10 ns), where handing over between OS
// threads costs a futex round trip (~1 us) per thread per barrier. C++ only, internal.
#pragma once
#ifndef __cplusplus
#error "emu_fiber.h is C++"
#endif

// Called around each turn of fiber id: `enter` before it runs, `leave` after it yields or
// returns (the emulator swaps the thread's threadIdx and barrier state in and out there).
struct EmuFiberHooks {
    void (*enter)(unsigned id, void *arg);
    void (*leave)(unsigned id, void *arg);
    void (*body)(unsigned id, void *arg);  // the fiber's work; returning ends the fiber
    void *arg;
};

// Runs hooks.body(id, arg) for every id in [0, n) as fibers on the calling thread, in turns
// (ids in order, each until it yields or returns), until all have returned. True when all
// returned; false (the fibers left parked, reusable) when a whole round of turns made no
// progress: every fiber that ran yielded stalled (a deadlock, e.g. threads of one block
// waiting at different barriers). Not reentrant (a fiber may not call it). Aborts with a
// message if a fiber stack cannot be mapped.
bool emu_fibers_run(unsigned n, const EmuFiberHooks &hooks);

// The id of the calling fiber, or -1 when the caller is not one of emu_fibers_run's fibers.
int emu_fiber_self(void);

// Gives the other fibers a turn; returns when this fiber's next turn comes. `stalled`: the
// fiber is waiting and found nothing changed since its last turn (no progress). Inside a
// fiber only.
void emu_fiber_yield(bool stalled);
