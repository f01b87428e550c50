// train/train_stop.c: the agreed, graceful early stop (see train_stop.h).
#include "train_stop.h"
#include "core/check.h"
#include "core/stop.h"
#include "core/timer.h"

#include <stdio.h>
#include <string.h>  // defines: strerror

void train_stop_init(Trainer *t) {
    t->t_launch = core_now();
    if (t->args.exit_signal_handler) core_stop_install();
    else core_stop_uninstall();
}

int train_stop_check(Trainer *t, int64_t it_start, char *why, size_t n) {
    const TrainArgs *a = &t->args;
    double minutes = (core_now() - t->t_launch) / 60.0;
    // [signal received, duration exceeded, --log-json write error, event write error]: MAX over the world, so
    // every rank sees the same
    int mine[4] = {core_stop_signal(), a->exit_duration_mins > 0 && minutes >= a->exit_duration_mins,
                   t->log_errno, t->tb_errno};  // + a --tensorboard-dir write error
    int all[4];
    MPI_CHECK(MPI_Allreduce(mine, all, 4, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (all[2]) {
        snprintf(why, n, "cannot write --log-json %s: %s", a->log_json, strerror(all[2]));
        return 2;
    }
    if (all[3]) {
        snprintf(why, n, "cannot write --tensorboard-dir %s: %s", a->logf.tensorboard_dir, strerror(all[3]));
        return 2;
    }
    if (all[0]) {
        snprintf(why, n, "%s received", core_stop_signal_name(all[0]));
        return 1;
    }
    if (all[1]) {
        snprintf(why, n, "--exit-duration-in-mins %g reached", a->exit_duration_mins);
        return 1;
    }
    if (a->exit_interval > 0 && t->iteration > it_start && t->iteration % a->exit_interval == 0) {
        snprintf(why, n, "--exit-interval %lld reached", (long long)a->exit_interval);
        return 1;
    }
    return 0;
}

int train_stop_signalled(void) {
    int mine = core_stop_signal(), all = 0;
    MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return all;
}
