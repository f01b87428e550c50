// hf/hf_safetensors.c: writing and reading safetensors files (see hf_safetensors.h).
#include "hf_safetensors.h"
#include "core/check.h"  // defines: core_calloc
#include "core/half.h"   // defines: core_f16_to_f32, core_bf16_to_f32

#include <errno.h>
#include <math.h>  // defines: isfinite, isnan
#include <json-c/json.h>  // defines: json_tokener_*, json_object_*
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>  // defines: access

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian: this file assumes a little-endian host"
#endif

// ---- writer --------------------------------------------------------------------------------

// Appends printf-style text to the growable string (*s, *len, *cap).
static void append(char **s, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **s, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(*s + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < *cap - *len) {
            *len += (size_t)k;
            return;
        }
        *cap *= 2;
        *s = realloc(*s, *cap);
        if (!*s) core_fatal("out of memory building a safetensors header");
    }
}

static uint64_t out_numel(const HfStOut *t) {
    return (uint64_t)t->shape[0] * (uint64_t)(t->ndim == 2 ? t->shape[1] : 1);
}

// The header JSON, padded with spaces to a multiple of 8 bytes; *len gets its length.
static char *build_header(const HfStOut *t, int n, const char *const *meta, int n_meta, size_t *len) {
    size_t cap = 4096, k = 0;
    char *s = core_calloc(cap, 1);
    append(&s, &k, &cap, "{\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++)
        append(&s, &k, &cap, "%s\"%s\":\"%s\"", i ? "," : "", meta[2 * i], meta[2 * i + 1]);
    append(&s, &k, &cap, "}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = out_numel(&t[i]) * 4;
        append(&s, &k, &cap, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", t[i].name,
               (long long)t[i].shape[0]);
        if (t[i].ndim == 2) append(&s, &k, &cap, ",%lld", (long long)t[i].shape[1]);
        append(&s, &k, &cap, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
               (unsigned long long)(off + bytes));
        off += bytes;
    }
    append(&s, &k, &cap, "}");
    while (k % 8) append(&s, &k, &cap, " ");  // the data section starts 8-byte aligned
    *len = k;
    return s;
}

int hf_st_write(const char *path, const HfStOut *t, int n, const char *const *meta, int n_meta,
                char *err, size_t errlen) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    size_t hlen;
    char *h = build_header(t, n, meta, n_meta, &hlen);
    uint64_t n64 = hlen;
    int ok = fwrite(&n64, 8, 1, f) == 1 && fwrite(h, 1, hlen, f) == hlen;
    for (int i = 0; ok && i < n; i++) ok = fwrite(t[i].data, 4, out_numel(&t[i]), f) == out_numel(&t[i]);
    free(h);
    int saved = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno ? errno : saved));
        remove(tmp);
        return -1;
    }
    return 0;
}

// ---- reader --------------------------------------------------------------------------------

static size_t dtype_size(HfDType d) { return d == HF_DT_F32 ? 4 : d == HF_DT_OTHER ? 0 : 2; }

// Element size of the safetensors dtype names megac does not convert (for the range check).
static size_t other_dtype_size(const char *name) {
    static const struct { const char *name; size_t size; } T[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
        {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(name, T[i].name)) return T[i].size;
    return 0;
}

uint64_t hf_st_numel(const HfStTensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

// Fills e from the header entry v. Returns 0, or -1 with the problem in why.
static int parse_entry(const char *name, json_object *v, HfStTensor *e, char *why, size_t n) {
    json_object *dt, *sh, *off;
    if (!json_object_is_type(v, json_type_object) || !json_object_object_get_ex(v, "dtype", &dt) ||
        !json_object_object_get_ex(v, "shape", &sh) || !json_object_object_get_ex(v, "data_offsets", &off) ||
        !json_object_is_type(dt, json_type_string) || !json_object_is_type(sh, json_type_array) ||
        !json_object_is_type(off, json_type_array) || json_object_array_length(off) != 2) {
        snprintf(why, n, "tensor '%.200s' needs dtype, shape and data_offsets [begin, end]", name);
        return -1;
    }
    e->name = strdup(name);
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", json_object_get_string(dt));
    e->dtype = !strcmp(e->dtype_name, "F32") ? HF_DT_F32 : !strcmp(e->dtype_name, "F16") ? HF_DT_F16
             : !strcmp(e->dtype_name, "BF16") ? HF_DT_BF16 : HF_DT_OTHER;
    size_t es = e->dtype == HF_DT_OTHER ? other_dtype_size(e->dtype_name) : dtype_size(e->dtype);
    e->ndim = (int)json_object_array_length(sh);
    if (es == 0 || e->ndim > HF_ST_MAX_DIMS) {
        snprintf(why, n, "tensor '%.200s': unknown dtype '%s' or more than %d dimensions", name,
                 e->dtype_name, HF_ST_MAX_DIMS);
        return -1;
    }
    uint64_t bytes = es;
    for (int d = 0; d < e->ndim; d++) {
        json_object *x = json_object_array_get_idx(sh, (size_t)d);
        e->shape[d] = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
        if (e->shape[d] < 0 || e->shape[d] > ((int64_t)1 << 40) || bytes > ((uint64_t)1 << 52)) {
            snprintf(why, n, "tensor '%.200s': bad shape", name);
            return -1;
        }
        bytes *= (uint64_t)e->shape[d];
    }
    for (int k = 0; k < 2; k++) {
        json_object *x = json_object_array_get_idx(off, (size_t)k);
        int64_t o = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : -1;
        if (o < 0) {
            snprintf(why, n, "tensor '%.200s': data_offsets are not non-negative integers", name);
            return -1;
        }
        if (k == 0) e->begin = (uint64_t)o; else e->end = (uint64_t)o;
    }
    if (e->end < e->begin || e->end - e->begin != bytes) {
        snprintf(why, n, "tensor '%.200s': data_offsets [%llu, %llu] hold %llu bytes, its dtype and "
                 "shape need %llu", name, (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin), (unsigned long long)bytes);
        return -1;
    }
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const HfStTensor *x = *(const HfStTensor *const *)a, *y = *(const HfStTensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

// The ranges, sorted, must not overlap nor run past data_len. Unused bytes between or after
// them are left alone: a tensor missing from the header leaves such a gap, and the model's
// reader then names it ("tensor X is missing") instead of an offset of its neighbour.
static int check_tiling(HfStFile *f, uint64_t data_len, char *why, size_t n) {
    HfStTensor **s = core_calloc((size_t)f->n + 1, sizeof *s);
    for (int i = 0; i < f->n; i++) s[i] = &f->t[i];
    qsort(s, (size_t)f->n, sizeof *s, by_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; i < f->n && rc == 0; i++) {
        if (s[i]->begin < at) {
            snprintf(why, n, "tensor '%.200s' starts at byte %llu of the data, inside the tensor "
                     "before it (which ends at %llu): overlap", s[i]->name,
                     (unsigned long long)s[i]->begin, (unsigned long long)at);
            rc = -1;
        } else if (s[i]->end > data_len) {
            snprintf(why, n, "tensor '%.200s' ends at byte %llu of the data but the file holds %llu "
                     "bytes of data (truncated)", s[i]->name, (unsigned long long)s[i]->end,
                     (unsigned long long)data_len);
            rc = -1;
        }
        at = s[i]->end;
    }
    free(s);
    return rc;
}

// Parses the header text into f->t. Returns 0, or -1 with the problem in why.
static int parse_header(HfStFile *f, const char *h, size_t len, char *why, size_t n) {
    size_t i = 0;
    if (len == 0 || h[0] != '{') {
        snprintf(why, n, "malformed header: does not start with '{' (not a safetensors file?)");
        return -1;
    }
    json_tokener *tk = json_tokener_new();
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tk, h, (int)len);
    enum json_tokener_error e = json_tokener_get_error(tk);
    i = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    while (o && i < len && h[i] == ' ') i++;
    if (!o || e != json_tokener_success || i != len || !json_object_is_type(o, json_type_object)) {
        snprintf(why, n, "malformed header: invalid JSON near byte %zu", i);
        json_object_put(o);
        return -1;
    }
    f->t = core_calloc((size_t)json_object_object_length(o) + 1, sizeof *f->t);
    int rc = 0;
    json_object_object_foreach(o, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        if (rc == 0) rc = parse_entry(key, val, &f->t[f->n], why, n);
        if (f->t[f->n].name) f->n++;
    }
    json_object_put(o);
    return rc;
}

HfStFile *hf_st_open(const char *path, char *err, size_t errlen) {
    char why[600] = "";
    struct stat st;
    errno = 0;
    FILE *fp = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
    if (!fp) {
        snprintf(err, errlen, "%s: %s", path, errno ? strerror(errno) : "not a regular file");
        return NULL;
    }
    HfStFile *f = core_calloc(1, sizeof *f);
    f->path = strdup(path);
    f->f = fp;
    uint64_t size = (uint64_t)st.st_size, hlen = 0;
    int rc = -1;
    if (size < 8 || fread(&hlen, 8, 1, fp) != 1)
        snprintf(why, sizeof why, "truncated: %llu bytes, shorter than the 8-byte header length",
                 (unsigned long long)size);
    else if (hlen < 2 || hlen > HF_ST_MAX_HEADER || hlen > size - 8)
        snprintf(why, sizeof why, "malformed or truncated header: header length %llu, file size %llu",
                 (unsigned long long)hlen, (unsigned long long)size);
    else {
        char *h = core_calloc((size_t)hlen + 1, 1);
        if (fread(h, 1, (size_t)hlen, fp) != hlen) snprintf(why, sizeof why, "read error in the header");
        else rc = parse_header(f, h, (size_t)hlen, why, sizeof why);
        free(h);
        f->data_start = 8 + hlen;
        if (rc == 0) rc = check_tiling(f, size - 8 - hlen, why, sizeof why);
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", path, why);
        hf_st_close(f);
        return NULL;
    }
    return f;
}

const HfStTensor *hf_st_find(const HfStFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

int hf_st_read_f32(HfStFile *f, const HfStTensor *t, float *out, char *err, size_t errlen) {
    if (t->dtype == HF_DT_OTHER) {
        snprintf(err, errlen, "%s: tensor %s has dtype %s; megac reads F32, F16 and BF16", f->path,
                 t->name, t->dtype_name);
        return -1;
    }
    uint64_t n = hf_st_numel(t);
    size_t es = dtype_size(t->dtype);
    void *buf = t->dtype == HF_DT_F32 ? (void *)out : core_calloc((size_t)n + 1, es);
    int ok = fseeko(f->f, (off_t)(f->data_start + t->begin), SEEK_SET) == 0 &&
             fread(buf, es, (size_t)n, f->f) == n;
    if (ok && t->dtype != HF_DT_F32) {
        const uint16_t *h = buf;
        for (uint64_t i = 0; i < n; i++)
            out[i] = t->dtype == HF_DT_F16 ? core_f16_to_f32(h[i]) : core_bf16_to_f32(h[i]);
    }
    if (buf != out) free(buf);
    if (!ok) {
        snprintf(err, errlen, "%s: read error in tensor %s", f->path, t->name);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(out[i])) {  // a NaN weight would turn every output into NaN (NUL tokens)
            snprintf(err, errlen, "%s: tensor %s holds %s at element %llu: refusing non-finite "
                     "weights", f->path, t->name, isnan(out[i]) ? "NaN" : "Inf", (unsigned long long)i);
            return -1;
        }
    return 0;
}

void hf_st_close(HfStFile *f) {
    if (!f) return;
    if (f->f) fclose(f->f);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    free(f->path);
    free(f);
}

HfStFile *hf_st_open_model(const char *dir, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int sharded = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
    int pickle = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) != 0 && (sharded || pickle)) {
        snprintf(err, errlen, "%s: missing; %s is not read (save the model with "
                 "save_pretrained(safe_serialization=True%s))", path,
                 sharded ? "a sharded model.safetensors.index.json" : "pytorch_model.bin (a pickle)",
                 sharded ? ", max_shard_size larger than the model" : "");
        return NULL;
    }
    return hf_st_open(path, err, errlen);
}
