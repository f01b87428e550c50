// train/train_log.h: the run's output (see train_log.c).
#pragma once
#include <stdint.h>
#include "trainer.h"

// Start-up summary on rank 0, with every rank's memory. Collective over the world.
void train_log_startup(const Trainer *t);
// Every rank's process id (by host), so a launcher message naming a PID names a rank. Collective.
void train_log_process_ids(const Trainer *t);
// Rank 0: the --log-json record of iteration `it`, and the text line every log interval.
void train_log_iteration(Trainer *t, const StepResult *r, double ms, int64_t it);
// A progress bar with ETA on stdout (call only when stdout is a terminal); the next line
// printed should start with "\r\033[K" to clear it.
// it: iterations done, of total; `elapsed` seconds were spent on those after it_start.
void train_log_progress(int64_t it, int64_t it_start, int64_t total, double elapsed);
