// core/stop.h: graceful stop on a signal (scancel, the Slurm time limit, a preempting
// scheduler, Ctrl-C, a closed terminal or dropped ssh): the handler only records the signal;
// the training loop asks at each iteration boundary, all ranks agree (train/train_loop.c),
// save a checkpoint and exit 0.
#pragma once

// Installs the handler for SIGTERM, SIGINT, SIGUSR1, SIGUSR2 and SIGHUP (SA_RESTART:
// interrupted system calls resume), and ignores SIGPIPE and SIGXFSZ
// (core_stop_ignore_output_signals). Further signals while a stop is pending are recorded
// again, not fatal (a launcher may deliver one signal twice: to the process group and via
// the rank guard; a user presses Ctrl-C twice); during the stop's save
// (core_stop_saving(1)) each one prints "saving the checkpoint, please wait". Never fails.
void core_stop_install(void);

// Ignores SIGPIPE (a closed stdout or stderr, `megac ... | head`: the write fails with EPIPE
// and the run goes on, its files intact) and SIGXFSZ (`ulimit -f`: the write fails with EFBIG,
// handled like a full disk). Every command calls it. Never fails.
void core_stop_ignore_output_signals(void);

// Restores the default action of the stop signals (they end the process at once). Never fails.
void core_stop_uninstall(void);

// The last stop signal received (SIGTERM, ...), or 0. Async-signal-safe to read. Never fails.
int core_stop_signal(void);

// Marks the stop's checkpoint save as running (1) or over (0): further signals then say
// "please wait" on stderr. Never fails.
void core_stop_saving(int on);

// "SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP" or "signal N" (static storage). Pure.
const char *core_stop_signal_name(int sig);
