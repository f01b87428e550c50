// megac/cmd_train.c: `megac train`: parse flags, set up MPI and the run, train.
#include "commands.h"
#include "core/check.h"
#include "core/stop.h"
#include "train/train_args.h"
#include "train/trainer.h"

int cmd_train(int argc, char **argv) {
    TrainArgs args;
    core_stop_install();  // before anything slow: a stop signal during start-up is not fatal
    MPI_CHECK(MPI_Init(NULL, NULL));
    train_args_parse(&args, argc, argv);
    Trainer *t = trainer_create(&args);
    int rc = trainer_run(t);
    trainer_destroy(t);
    MPI_CHECK(MPI_Finalize());
    return rc;
}
