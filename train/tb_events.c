// train/tb_events.c: TensorBoard event files written by hand (see tb_events.h). The wire
// format: TFRecord = uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
// the record, uint32 masked CRC32C of the record. The record is an Event message:
//   1 wall_time double (fixed64)  2 step int64 (varint)  3 file_version string
//   5 summary Summary { repeated 1 value Value { 1 tag string, 2 simple_value float } }
#include "tb_events.h"
#include "ckpt/ckpt_fs.h"  // defines: ckpt_fs_mkdirs

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct TbWriter {
    FILE *f;
    int err;           // errno of the first failed write, or 0
    char path[4352];   // the event file
    uint8_t *buf;      // (cap) one encoded record
    size_t cap;
};

uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n) {
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// A bounded output cursor: writes past cap only clear ok.
typedef struct {
    uint8_t *p;
    size_t len, cap;
    int ok;
} Out;

static void put(Out *o, const void *src, size_t n) {
    if (o->len + n > o->cap) o->ok = 0;
    else memcpy(o->p + o->len, src, n);
    o->len += n;
}

static void put_byte(Out *o, uint8_t b) { put(o, &b, 1); }

// Little-endian fixed-width integer of `bytes` bytes.
static void put_le(Out *o, uint64_t x, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(x >> (8 * i));
    put(o, b, (size_t)bytes);
}

static void put_varint(Out *o, uint64_t x) {
    do {
        put_byte(o, (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0)));
        x >>= 7;
    } while (x);
}

static size_t varint_len(uint64_t x) {
    size_t n = 1;
    while (x > 0x7f) x >>= 7, n++;
    return n;
}

// Length-delimited field: key, length, bytes.
static void put_bytes_field(Out *o, int field, const void *s, size_t n) {
    put_byte(o, (uint8_t)(field << 3 | 2));
    put_varint(o, n);
    put(o, s, n);
}

// Bytes of Summary.Value {tag, simple_value}.
static size_t value_len(const TbScalar *v) {
    size_t t = strlen(v->tag);
    return 1 + varint_len(t) + t + 1 + 4;
}

static void put_value(Out *o, const TbScalar *v) {
    put_bytes_field(o, 1, v->tag, strlen(v->tag));
    float f = (float)v->value;
    uint32_t u;
    memcpy(&u, &f, 4);
    put_byte(o, 2 << 3 | 5);  // simple_value: fixed32
    put_le(o, u, 4);
}

size_t tb_record_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                        const char *file_version, const TbScalar *v, int n) {
    if (cap < 16) return 0;
    Out o = {buf + 12, 0, cap - 16, 1};  // the record, between the header and its CRC
    uint64_t w;
    memcpy(&w, &wall_time, 8);
    put_byte(&o, 1 << 3 | 1);  // wall_time: fixed64
    put_le(&o, w, 8);
    put_byte(&o, 2 << 3 | 0);  // step: varint
    put_varint(&o, (uint64_t)step);
    if (file_version) put_bytes_field(&o, 3, file_version, strlen(file_version));
    if (n > 0) {
        size_t summary = 0;
        for (int i = 0; i < n; i++) summary += 1 + varint_len(value_len(&v[i])) + value_len(&v[i]);
        put_byte(&o, 5 << 3 | 2);
        put_varint(&o, summary);
        for (int i = 0; i < n; i++) {
            put_byte(&o, 1 << 3 | 2);
            put_varint(&o, value_len(&v[i]));
            put_value(&o, &v[i]);
        }
    }
    if (!o.ok) return 0;
    Out h = {buf, 0, 12, 1};
    put_le(&h, o.len, 8);
    put_le(&h, tb_masked_crc(tb_crc32c(0, buf, 8)), 4);
    Out t = {buf + 12 + o.len, 0, 4, 1};
    put_le(&t, tb_masked_crc(tb_crc32c(0, buf + 12, o.len)), 4);
    return 12 + o.len + 4;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Encodes and appends one record; grows the buffer as needed. Returns w->err.
static int append(TbWriter *w, int64_t step, const char *version, const TbScalar *v, int n) {
    if (w->err) return w->err;
    size_t len;
    double now = wall_now();
    while (!(len = tb_record_encode(w->buf, w->cap, now, step, version, v, n))) {
        uint8_t *b = realloc(w->buf, w->cap * 2);
        if (!b) return w->err = ENOMEM;
        w->buf = b;
        w->cap *= 2;
    }
    if (fwrite(w->buf, 1, len, w->f) != len) w->err = errno ? errno : EIO;
    return w->err;
}

TbWriter *tb_open(const char *dir, char *err, size_t n) {
    char host[64] = "localhost", why[512];
    gethostname(host, sizeof host - 1);
    if (ckpt_fs_mkdirs(dir, why, sizeof why) != 0) {
        snprintf(err, n, "--tensorboard-dir %s: %s", dir, why);
        return NULL;
    }
    TbWriter *w = calloc(1, sizeof *w);
    if (w) w->buf = malloc(w->cap = 4096);
    if (!w || !w->buf) {
        free(w);
        snprintf(err, n, "--tensorboard-dir %s: out of memory", dir);
        return NULL;
    }
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL),
             host, (int)getpid());
    w->f = fopen(w->path, "wbx");  // never another run's file
    if (!w->f || append(w, 0, "brain.Event:2", NULL, 0) || tb_flush(w)) {
        snprintf(err, n, "cannot write --tensorboard-dir %s: %s: %s", dir, w->path,
                 strerror(w->f ? w->err : errno));
        if (w->f) fclose(w->f);
        free(w->buf);
        free(w);
        return NULL;
    }
    return w;
}

int tb_write(TbWriter *w, int64_t step, const TbScalar *v, int n) { return append(w, step, NULL, v, n); }

int tb_flush(TbWriter *w) {
    if (!w->err && fflush(w->f) != 0) w->err = errno ? errno : EIO;
    return w->err;
}

int tb_close(TbWriter *w) {
    if (!w) return 0;
    int e = tb_flush(w);
    if (fclose(w->f) != 0 && !e) e = errno ? errno : EIO;
    free(w->buf);
    free(w);
    return e;
}

const char *tb_path(const TbWriter *w) { return w->path; }
