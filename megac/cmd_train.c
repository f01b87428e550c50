// megac/cmd_train.c: `megac train`: parse flags, set up MPI and the run, train.
#include "commands.h"
#include "core/check.h"
#include "core/host.h"    // defines: core_launcher_rank
#include "core/limits.h"  // defines: core_check_limits
#include "core/stop.h"
#include "core/watchdog.h"
#include "train/train_args.h"
#include "train/trainer.h"

#include <stdlib.h>  // defines: atoi

int cmd_train(int argc, char **argv) {
    TrainArgs args;
    core_stop_install();  // before anything slow: a stop signal during start-up is not fatal
    core_check_limits("train");  // ulimit -n: one line before MPI fails inside its start-up
    // --distributed-timeout-minutes also bounds start-up: MPI_Init to the first iteration
    // (trainer_run disarms it), whichever rank is stuck or gone.
    const char *rank = core_launcher_rank();
    core_watchdog_start(core_watchdog_timeout_from_argv(argc, argv, 600.0), rank ? atoi(rank) : -1);
    core_watchdog_arm("start-up (MPI_Init to the first iteration)");
    MPI_CHECK(MPI_Init(NULL, NULL));
    core_watchdog_set_rank(core_world_rank());
    core_watchdog_test_stop("start", core_world_rank());  // test hook (core/watchdog.h)
    train_args_parse(&args, argc, argv);
    Trainer *t = trainer_create(&args);
    int rc = trainer_run(t);
    trainer_destroy(t);
    MPI_CHECK(MPI_Finalize());
    return rc;
}
