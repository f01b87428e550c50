// tests/train/test_train_logline.c: megac's log line and validation block against the text
// Megatron-LM's training_log and evaluate_and_print_results (megatron/training/training.py,
// core_v0.16 on: microseconds in the timestamp) print for the same values. The expected
// strings are facts, written here: what Python's format strings of those functions give.
// Also the interval sums (means over the interval, counts per interval) and the CRC32C and
// TFRecord framing of the TensorBoard writer (train/tb_events.c).
#include "train/train_logline.h"
#include "train/tb_events.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>  // defines: tzset

static void line_matches_megatron(void) {
    // 2024-05-06 07:08:09.012345 UTC; 1.23456 s per iteration; throughput 123.456 TFLOP/s/GPU
    TrainLogLine v = {{1714979289, 12345678}, 20, 500, 640, 1.23456 * 1000.0, 1, 123.456, 2.5e-4, 32,
                      6.123456789, 65536.0, 1.23456, 1, 0, NULL};
    const char *want =
        " [2024-05-06 07:08:09.012345] iteration       20/     500 | consumed samples:          640 |"
        " elapsed time per iteration (ms): 1234.6 | throughput per GPU (TFLOP/s/GPU): 123.5 |"
        " learning rate: 2.500000E-04 | global batch size:    32 | lm loss: 6.123457E+00 |"
        " loss scale: 65536.0 | grad norm: 1.235 | number of skipped iterations:   1 |"
        " number of nan iterations:   0 |";
    char got[1024];
    train_logline_format(got, sizeof got, &v);
    EXPECT(!strcmp(got, want), "\n got  '%s'\n want '%s'", got, want);
    // without --log-throughput the field is absent; megac's fields follow Megatron's
    v.log_throughput = 0;
    v.extra = " tokens/s: 5 |";
    train_logline_format(got, sizeof got, &v);
    EXPECT(!strstr(got, "throughput") && strstr(got, "(ms): 1234.6 | learning rate:") &&
           !strcmp(got + strlen(got) - 31, "iterations:   0 | tokens/s: 5 |"), "'%s'", got);
    // NaN as Python prints it ('{:.3f}' -> nan, '{:.6E}' -> NAN), whatever its sign bit
    v.grad_norm = -NAN;
    v.lm_loss = NAN;
    train_logline_format(got, sizeof got, &v);
    EXPECT(strstr(got, " lm loss: NAN | loss scale: 65536.0 | grad norm: nan |") != NULL, "'%s'", got);
}

static void validation_matches_megatron(void) {
    // PPL = exp(min(20, L)): 25.5 prints exp(20)
    const char *mid = " validation loss at iteration 4 | lm loss value: 2.550000E+01 | lm loss PPL: 4.851652E+08 | ";
    char rule[128], want[512], got[512];
    memset(rule, '-', 93);  // len(middle line) + 1, as Megatron draws it
    rule[93] = 0;
    snprintf(want, sizeof want, "%s\n%s\n%s\n", rule, mid, rule);
    train_logline_validation(got, sizeof got, "iteration 4", 25.5);
    EXPECT(!strcmp(got, want), "\n got  '%s'\n want '%s'", got, want);
    EXPECT_EQ_INT(strlen(mid) + 1, 93);
}

static void interval_sums(void) {
    TrainLogInterval s = {0};
    train_log_interval_add(&s, 4.0, 0, 0, 10.0, 1e9, 64);
    train_log_interval_add(&s, NAN, 1, 1, 30.0, 1e9, 64);  // a NaN step: skipped, not in the mean
    train_log_interval_add(&s, 2.0, 0, 0, 20.0, 1e9, 64);
    train_log_interval_add(&s, 9.0, 1, 0, 20.0, 1e9, 64);  // an fp16 overflow: skipped, not NaN
    EXPECT_EQ_INT(s.advanced, 2);
    EXPECT_EQ_INT(s.skipped, 2);
    EXPECT_EQ_INT(s.nan, 1);
    EXPECT(s.loss_sum / s.advanced == 3.0, "mean loss %g", s.loss_sum / s.advanced);
    EXPECT(s.ms_sum / (s.advanced + s.skipped) == 20.0, "mean ms %g", s.ms_sum / 4);
}

static void tfrecord_framing(void) {
    EXPECT_EQ_INT(tb_crc32c(0, "123456789", 9), 0xE3069283u);  // CRC-32C's check value
    EXPECT_EQ_INT(tb_crc32c(tb_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    uint8_t buf[256];
    size_t n = tb_record_encode(buf, sizeof buf, 0.0, 0, "brain.Event:2", NULL, 0);
    // record: wall_time (9 bytes), step (2), file_version (2 + 13)
    EXPECT_EQ_INT(n, 12 + 26 + 4);
    EXPECT(buf[0] == 26 && buf[8 + 4] == 0x09 && buf[12 + 9] == 0x10 && buf[12 + 11] == 0x1a &&
           buf[12 + 12] == 13 && !memcmp(buf + 12 + 13, "brain.Event:2", 13), "layout");
    uint32_t hdr = buf[8] | buf[9] << 8 | buf[10] << 16 | (uint32_t)buf[11] << 24;
    EXPECT_EQ_INT(hdr, tb_masked_crc(tb_crc32c(0, buf, 8)));
    TbScalar v[2] = {{"lm loss", 2.5}, {"grad-norm", 1.0}};
    n = tb_record_encode(buf, sizeof buf, 1.5, 300, NULL, v, 2);
    // step 300 = varint ac 02; summary 5: two values of 2 + 7 + 5 and 2 + 9 + 5 bytes, framed
    EXPECT_EQ_INT(n, 12 + 9 + 3 + 2 + (2 + 14) + (2 + 16) + 4);
    EXPECT(buf[12 + 10] == 0xac && buf[12 + 11] == 0x02 && buf[12 + 12] == 0x2a && buf[12 + 13] == 34,
           "step / summary bytes");
    EXPECT_EQ_INT(tb_record_encode(buf, 40, 1.5, 300, NULL, v, 2), 0);  // too small: nothing
}

int main(void) {
    setenv("TZ", "UTC", 1);  // the timestamp is local time, as Megatron's datetime.now()
    tzset();
    line_matches_megatron();
    validation_matches_megatron();
    interval_sums();
    tfrecord_framing();
    return test_result("train_logline");
}
