// backend/cpu/cpu_backend.c: placeholder until the CPU backend lands.
#include "backend/backend.h"
#include "core/check.h"
Backend *backend_cpu_create(int nthreads) {
    (void)nthreads;
    core_fatal("CPU backend not implemented yet");
}
