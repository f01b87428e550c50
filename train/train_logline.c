// train/train_logline.c: Megatron's log line and validation block with Megatron's meaning
// (train_logline.h), the logging flags, and rank 0's per-iteration work behind them
// (train_log.h: the interval sums, the line, the TensorBoard events).
#include "train_logline.h"
#include "train_log.h"
#include "tb_events.h"
#include "core/check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int train_log_flags_specs(ArgSpec *specs, TrainLogFlags *f) {
    *f = (TrainLogFlags){0, NULL, 1, 0, 0, 0, 0, 0};
    const ArgSpec s[TRAIN_LOG_FLAGS_N] = {
        {"--log-throughput", ARG_BOOL, &f->log_throughput, "add Megatron's \"throughput per GPU (TFLOP/s/GPU)\" to the log line (the interval's model FLOPs, Megatron's formula, / time / world size)"},
        {"--tensorboard-dir", ARG_STR, &f->tensorboard_dir, "write TensorBoard event files (Megatron's tags: lm loss, learning-rate, grad-norm, loss-scale, batch-size, lm loss validation) into DIR; rank 0"},
        {"--tensorboard-log-interval", ARG_I64, &f->tensorboard_log_interval, "iterations between TensorBoard events"},
        {"--log-timers-to-tensorboard", ARG_BOOL, &f->timers_to_tb, "TensorBoard: iteration-time (s) and, with --log-throughput, throughput, every --log-interval"},
        {"--log-memory-to-tensorboard", ARG_BOOL, &f->memory_to_tb, "TensorBoard: mem-allocated-bytes etc. (rank 0's parameters, gradients, optimizer state, activations and workspace; allocated once)"},
        {"--log-validation-ppl-to-tensorboard", ARG_BOOL, &f->validation_ppl_to_tb, "TensorBoard: lm loss validation ppl"},
        {"--log-world-size-to-tensorboard", ARG_BOOL, &f->world_size_to_tb, "TensorBoard: world-size"},
        {"--no-log-loss-scale-to-tensorboard", ARG_BOOL, &f->no_loss_scale_to_tb, "TensorBoard: no loss-scale events"},
    };
    memcpy(specs, s, sizeof s);
    return TRAIN_LOG_FLAGS_N;
}

void train_log_flags_check(const TrainLogFlags *f) {
    if (f->tensorboard_log_interval < 1)
        core_usage_error("--tensorboard-log-interval %lld must be >= 1", (long long)f->tensorboard_log_interval);
}

void train_log_interval_add(TrainLogInterval *s, double loss, int skipped, int nan, double ms,
                            double flops, double tokens) {
    if (skipped) s->skipped++;
    else {
        s->advanced++;
        s->loss_sum += loss;
    }
    s->nan += skipped && nan;
    s->ms_sum += ms;
    s->flops_sum += flops;
    s->tokens_sum += tokens;
}

// NaN as Python formats it (no sign: glibc prints "-nan").
static double unsigned_nan(double x) { return isnan(x) ? fabs(x) : x; }

int train_logline_format(char *buf, size_t n, const TrainLogLine *v) {
    char when[32];
    struct tm tm;
    localtime_r(&v->when.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    char tput[64] = "";
    if (v->log_throughput)
        snprintf(tput, sizeof tput, " throughput per GPU (TFLOP/s/GPU): %.1f |", unsigned_nan(v->tflops_per_gpu));
    return snprintf(buf, n,
                    " [%s.%06ld] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
                    "iteration (ms): %.1f |%s learning rate: %.6E | global batch size: %5d | lm loss: %.6E |"
                    " loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3d |"
                    " number of nan iterations: %3d |%s",
                    when, (long)(v->when.tv_nsec / 1000), (long long)v->iteration, (long long)v->train_iters,
                    (long long)v->consumed_samples, v->ms_per_iter, tput, v->lr, v->global_batch,
                    unsigned_nan(v->lm_loss), unsigned_nan(v->loss_scale), unsigned_nan(v->grad_norm),
                    v->skipped, v->nan, v->extra ? v->extra : "");
}

int train_logline_validation(char *buf, size_t n, const char *where, double loss) {
    char mid[512], rule[512];
    int m = snprintf(mid, sizeof mid, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                     where, unsigned_nan(loss), unsigned_nan(exp(fmin(20.0, loss))));
    int r = m + 1 < (int)sizeof rule ? m + 1 : (int)sizeof rule - 1;
    memset(rule, '-', (size_t)r);
    rule[r] = 0;
    return snprintf(buf, n, "%s\n%s\n%s\n", rule, mid, rule);
}

// Rank 0's memory (the start-up table's row: parameters, gradients, optimizer state,
// activations, workspace), as TensorBoard's mem-* tags.
static void tb_memory(Trainer *t, TbScalar *v, int *k) {
    double bytes = train_log_memory_bytes(t);
    v[(*k)++] = (TbScalar){"mem-reserved-bytes", bytes};
    v[(*k)++] = (TbScalar){"mem-allocated-bytes", bytes};
    v[(*k)++] = (TbScalar){"mem-max-allocated-bytes", bytes};  // megac allocates once, at start-up
}

// Megatron's per-iteration TensorBoard scalars (every --tensorboard-log-interval): by
// iteration, and the "vs samples" copies by consumed samples.
static void tb_iteration(Trainer *t, const StepResult *r, int64_t it) {
    const TrainLogFlags *f = &t->args.logf;
    if (!t->tb || it % f->tensorboard_log_interval) return;
    TbScalar v[12], s[6];
    int k = 0, ks = 0;
    v[k++] = (TbScalar){"learning-rate", r->lr};
    v[k++] = (TbScalar){"batch-size", r->global_batch};
    v[k++] = (TbScalar){"lm loss", r->loss};
    if (!f->no_loss_scale_to_tb) v[k++] = (TbScalar){"loss-scale", r->loss_scale};
    if (f->world_size_to_tb) v[k++] = (TbScalar){"world-size", t->grid->dims.world_size};
    v[k++] = (TbScalar){"grad-norm", r->grad_norm};
    for (int i = 0; i < k; i++) {
        if (!strcmp(v[i].tag, "learning-rate")) s[ks++] = (TbScalar){"learning-rate vs samples", r->lr};
        if (!strcmp(v[i].tag, "batch-size")) s[ks++] = (TbScalar){"batch-size vs samples", r->global_batch};
        if (!strcmp(v[i].tag, "lm loss")) s[ks++] = (TbScalar){"lm loss vs samples", r->loss};
        if (!strcmp(v[i].tag, "loss-scale")) s[ks++] = (TbScalar){"loss-scale vs samples", r->loss_scale};
        if (!strcmp(v[i].tag, "world-size")) s[ks++] = (TbScalar){"world-size vs samples", t->grid->dims.world_size};
        if (!strcmp(v[i].tag, "grad-norm")) s[ks++] = (TbScalar){"grad-norm vs samples", r->grad_norm};
    }
    if (f->memory_to_tb) tb_memory(t, v, &k);
    if (!t->tb_errno) t->tb_errno = tb_write(t->tb, it, v, k);
    if (!t->tb_errno) t->tb_errno = tb_write(t->tb, t->consumed_samples, s, ks);
}

void train_log_line_step(Trainer *t, const StepResult *r, double ms, int64_t it, const char *extra) {
    const TrainArgs *a = &t->args;
    TrainLogInterval *s = &t->interval;
    double flops = gpt_flops_per_iteration(&a->model, t->model->Vp, r->global_batch);
    train_log_interval_add(s, r->loss, r->skipped, r->skipped && (!r->overflow || !isfinite(r->loss)), ms,
                           flops, (double)r->global_batch * a->model.seq_length);
    tb_iteration(t, r, it);
    int first = it == t->log_first_iteration, at_interval = it % a->log_interval == 0 || it == a->train_iters;
    if (!first && !at_interval) {
        if (t->tb && !t->tb_errno) t->tb_errno = tb_flush(t->tb);
        return;
    }
    int n_it = s->advanced + s->skipped;
    double ms_per = s->ms_sum / n_it, tflops = s->flops_sum / (s->ms_sum / 1e3) / 1e12 / t->grid->dims.world_size;
    char more[640], line[1280];
    snprintf(more, sizeof more, " tokens/s: %.0f |%s", s->tokens_sum / (s->ms_sum / 1e3), extra ? extra : "");
    TrainLogLine v = {{0, 0}, it, a->train_iters, t->consumed_samples, ms_per, a->logf.log_throughput, tflops,
                      r->lr, r->global_batch, s->loss_sum / (s->advanced > 0 ? s->advanced : 1),
                      r->loss_scale, r->grad_norm, s->skipped, s->nan, more};
    clock_gettime(CLOCK_REALTIME, &v.when);
    train_logline_format(line, sizeof line, &v);
    printf("%s\n", line);  // one write per line, so other ranks' messages cannot land inside it
    fflush(stdout);
    if (t->tb && a->logf.timers_to_tb && !first) {  // Megatron: not for the first iteration's line
        TbScalar tv[2] = {{"iteration-time", ms_per / 1e3}, {"throughput", tflops}};
        if (!t->tb_errno) t->tb_errno = tb_write(t->tb, it, tv, a->logf.log_throughput ? 2 : 1);
    }
    if (t->tb && !t->tb_errno) t->tb_errno = tb_flush(t->tb);
    if (!first || at_interval) *s = (TrainLogInterval){0};
}

void train_log_eval(Trainer *t, int64_t it, double loss, const char *event) {
    train_log_eval_json(t, it, loss, event);
    char where[96], block[1600];
    int test = !strcmp(event, "test");
    snprintf(where, sizeof where, "iteration %lld%s", (long long)it, test ? " on test set" : "");
    train_logline_validation(block, sizeof block, where, loss);
    fputs(block, stdout);
    fflush(stdout);
    if (!t->tb || test || t->tb_errno) return;  // Megatron's test loss shares the validation tag: not written
    double ppl = exp(fmin(20.0, loss));
    TbScalar v[2] = {{"lm loss validation", loss}, {"lm loss validation ppl", ppl}};
    TbScalar s[2] = {{"lm loss validation vs samples", loss}, {"lm loss validation ppl vs samples", ppl}};
    int n = t->args.logf.validation_ppl_to_tb ? 2 : 1;
    t->tb_errno = tb_write(t->tb, it, v, n);
    if (!t->tb_errno) t->tb_errno = tb_write(t->tb, t->consumed_samples, s, n);
    if (!t->tb_errno) t->tb_errno = tb_flush(t->tb);
}
