// train/train_outputs.h: the run's output files (--log-json, --trace, --tensorboard-dir), checked before any
// work, and the --log-json file opened for appending (a resumed run never loses its log).
#pragma once
#include "trainer.h"

// Collective, in trainer_create. Rank 0 checks that --log-json and --trace are writable
// (creating nothing that is not there), are not a directory, FIFO or device, are not the
// same file as each other or as an input of this run (the --data-path file, the `latest`
// file or checkpoint of --load and --save); then opens --log-json for appending into
// t->log_json, first removing a last line cut short by a crash or a full disk (one line says
// so; records are written whole, so only such a failure leaves one), t->log_json_prior = its
// size after that. --tensorboard-dir: a new or empty folder or one of event files only, not
// --save's or --load's; a new event file opened in it (t->tb). On failure one line, exit 2 on
// every rank.
void train_outputs_check(Trainer *t);

// Rank 0, after the checkpoint is loaded: appends this run's record
// {"event":"run_start",...} (train_log_run_record: where it starts, how many earlier
// records, iteration > the start, it supersedes, and the run's configuration) to
// --log-json, fresh or resumed; the file is never truncated (but for a cut last line, above).
// A failed write stops the run (train_log.c). Never fails.
void train_outputs_run_start(Trainer *t);
