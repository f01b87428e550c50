// train/train_stop.h: stopping a run early and cleanly: a signal (SIGTERM from scancel or
// the Slurm time limit, SIGUSR1 from Slurm's --signal, Ctrl-C), Megatron's
// --exit-duration-in-mins and --exit-interval. Every rank agrees at an iteration boundary;
// the run then saves a checkpoint, flushes its logs and trace and exits 0 with one line
// saying why (train_loop.c).
#pragma once
#include <stddef.h>
#include "trainer.h"

// Keeps the stop-signal handler (cmd_train installs it before MPI_Init, so a signal during
// start-up is not fatal either), or removes it with --no-exit-signal-handler; starts the
// clock of --exit-duration-in-mins. Call once, early in trainer_create. Never fails.
void train_stop_init(Trainer *t);

// Collective over MPI_COMM_WORLD, once per iteration boundary (one 4-int all-reduce): 2 if
// the run must stop as a failure (a --log-json or --tensorboard-dir write failed on rank 0:
// full disk, ulimit -f),
// 1 if it must stop cleanly (a rank received a stop signal, the duration is exceeded on some
// rank, or t->iteration is a multiple of --exit-interval after this run's first step), with
// the reason in why (n bytes, the same on every rank); else 0.
int train_stop_check(Trainer *t, int64_t it_start, char *why, size_t n);

// Collective over MPI_COMM_WORLD (one 1-int all-reduce): the stop signal some rank has
// received (SIGTERM, ...; the largest number when ranks differ), else 0. For loops between
// iteration boundaries (evaluation) that must give way to a stop. Never fails.
int train_stop_signalled(void);
