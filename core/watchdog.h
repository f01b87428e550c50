// core/watchdog.h: a deadline on blocking phases that are not Comm operations (which time
// out on their own, comm/comm.h): start-up from MPI_Init to the first iteration, and the
// collective HDF5 I/O of a checkpoint save or load. A rank stopped or stuck there would
// otherwise leave every other rank waiting inside MPI or HDF5 forever.
//
// A thread checks, every 100 ms, the innermost armed phase: when it has made no progress
// (core_watchdog_progress) for the timeout, the rank prints one line
//     megac: [rank R] <phase> did not finish within N s (--distributed-timeout-minutes): a
//     rank is stuck or dead; ending the job
// and aborts the job (MPI_Abort; _exit(1) before MPI_Init). Rank 0 fires first; the other
// ranks 2 s later, so the line usually comes once, from a rank that was waiting.
#pragma once

// Starts the watchdog with `timeout_s` (<= 0: it never fires; below 30 s it is raised to
// 30 s, as start-up on a loaded machine takes seconds; test hook MEGAC_TEST_WATCHDOG_FLOOR
// sets another floor) for this process, whose rank (for
// the message, before MPI is up) is `rank`. Idempotent; the first call's timeout stays.
// Never fails: without a thread the watchdog is off.
void core_watchdog_start(double timeout_s, int rank);

// Sets the rank named by the message (after MPI_Init). Never fails.
void core_watchdog_set_rank(int rank);

// Arms phase `what` (a string that outlives the phase) inside any armed one (4 deep at
// most). Never fails.
void core_watchdog_arm(const char *what);

// The armed phase made progress (a collective step completed): its clock restarts.
void core_watchdog_progress(void);

// Ends the innermost phase; the enclosing one's clock restarts. Never fails.
void core_watchdog_disarm(void);

// The timeout from argv's "--distributed-timeout-minutes M" (or "=M"), in seconds, or
// `fallback` without one: for starting the watchdog before the flags are parsed. Pure.
double core_watchdog_timeout_from_argv(int argc, char **argv, double fallback);

// Test hook: MEGAC_TEST_STOP_AT=WHERE:RANK makes rank RANK stop itself (SIGSTOP, a hung
// rank) when it reaches the place named WHERE ("start": after MPI_Init; "save": in the
// middle of a checkpoint save, between collective HDF5 steps). Never fails.
void core_watchdog_test_stop(const char *where, int rank);
