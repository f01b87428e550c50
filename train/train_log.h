// train/train_log.h: the run's output (see train_log.c).
#pragma once
#include <stdint.h>
#include "trainer.h"

// Start-up summary on rank 0, with every rank's memory. Collective over the world.
void train_log_startup(const Trainer *t);
// Every rank's process id (by host), so a launcher message naming a PID names a rank. Collective.
void train_log_process_ids(Trainer *t);
// Rank 0: the --log-json record of iteration `it` ({"iteration":it,"consumed_samples":...,
// "lm_loss":...}: this iteration's values), then train_log_line_step.
void train_log_iteration(Trainer *t, const StepResult *r, double ms, int64_t it);
// Rank 0 (train_logline.c): adds iteration `it` to t->interval, writes its TensorBoard
// events (--tensorboard-dir), and every --log-interval (also at the last iteration and at
// t->log_first_iteration, as Megatron does) prints Megatron's line with the interval's means
// and counts, then `extra` (megac's fields), and resets the sums (not at the first iteration).
void train_log_line_step(Trainer *t, const StepResult *r, double ms, int64_t it, const char *extra);
// Rank 0's memory in bytes: the start-up table's row (parameters, gradients, optimizer
// state, activations, workspace).
double train_log_memory_bytes(const Trainer *t);
// Rank 0: the run record at the head of this run's --log-json records (Megatron-like):
// {"event":"run_start","start_iteration":N,"resumed":0|1,"superseded_records":K,"time":...,
// version, git revision, layout, batch, model sizes, device, backend, precision, strategy
// flags, data, hosts, "argv":[the flags as given]}. It has no "iteration" member: readers
// of iteration records skip it. Call after train_log_process_ids (hosts) and the load.
void train_log_run_record(Trainer *t, long superseded_records);
// Rank 0: train_log_eval(t, it, loss, "validation").
void train_log_validation(Trainer *t, int64_t it, double loss);
// Rank 0: the --log-json record {"event":event,"after_iteration":N,"consumed_samples":S,
// "lm_loss":x,"lm_loss_ppl":e^x} (no "iteration" member either: train_log_eval_json), then
// Megatron's validation block on stdout ("test": "iteration N on test set"), and for
// "validation" the TensorBoard scalars "lm loss validation" (+ "ppl"; by iteration and
// "vs samples"). (train_logline.c)
void train_log_eval(Trainer *t, int64_t it, double loss, const char *event);
void train_log_eval_json(Trainer *t, int64_t it, double loss, const char *event);
// A progress bar with ETA on stdout (call only when stdout is a terminal); the next line
// printed should start with "\r\033[K" to clear it.
// it: iterations done, of total; `elapsed` seconds were spent on those after it_start.
void train_log_progress(int64_t it, int64_t it_start, int64_t total, double elapsed);
