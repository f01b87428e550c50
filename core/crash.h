// core/crash.h: a crash report that names the rank.
//
// A rank killed by a fatal signal it can catch (segfault, abort, bus error, FPE, illegal
// instruction) prints "[rank R] megac: fatal signal N" before dying, since the launcher's
// own message names only a PID (and, with MPICH 4.0's hydra, not reliably the dead one).
// SIGKILL (e.g. the OOM killer) cannot be caught: core/rank_guard.h names that rank, and
// megac train's start-up "process ids" line maps PIDs to ranks.
#pragma once

// Installs the report for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT, naming global rank
// `rank`; each fires once (SA_RESETHAND), then the process dies of the signal as it would
// have. Never fails.
void core_crash_install(int rank);
