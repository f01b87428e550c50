// core/stop.h: graceful stop on a signal (scancel, the Slurm time limit, a preempting
// scheduler, Ctrl-C): the handler only records the signal; the training loop asks at each
// iteration boundary, all ranks agree (train/train_loop.c), save a checkpoint and exit 0.
#pragma once

// Installs the handler for SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 (SA_RESTART: interrupted
// system calls resume). Further signals while a stop is pending are recorded again, not
// fatal (a launcher may deliver one signal twice: to the process group and via the rank
// guard). Never fails.
void core_stop_install(void);

// Restores the default action of those signals (they end the process at once). Never fails.
void core_stop_uninstall(void);

// The last stop signal received (SIGTERM, ...), or 0. Async-signal-safe to read. Never fails.
int core_stop_signal(void);

// "SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2" or "signal N" (static storage). Pure.
const char *core_stop_signal_name(int sig);
