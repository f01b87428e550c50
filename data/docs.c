// data/docs.c: text and JSON Lines document readers (see docs.h).
#include "docs.h"
#include "data/tokenizer.h"  // defines: TokBytes, tok_bytes_append
#include "data/utf8.h"       // defines: data_utf8_invalid_at

#include <errno.h>
#include <json-c/json.h>     // defines: json_tokener_parse_ex
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROGRESS_EVERY (1u << 20)  // report progress every MiB read

DataInputFormat data_docs_format(const char *path, DataInputFormat f) {
    if (f != DATA_FMT_AUTO) return f;
    const char *dot = strrchr(path, '.');
    if (dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".json") || !strcmp(dot, ".ndjson")))
        return DATA_FMT_JSONL;
    return DATA_FMT_TEXT;
}

// One line being read: the file, its name, the line number, bytes read so far.
typedef struct {
    FILE *f;
    const char *path;
    char *line;
    size_t cap;
    long long lineno;
    uint64_t bytes, reported;
    const DataDocSink *sink;
} Reader;

static ssize_t next_line(Reader *r) {
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n <= 0) return n;
    r->lineno++;
    r->bytes += (uint64_t)n;
    if (r->sink->progress && r->bytes - r->reported >= PROGRESS_EVERY) {
        r->reported = r->bytes;
        r->sink->progress(r->sink->ctx, r->bytes);
    }
    return n;
}

static int utf8_error(const Reader *r, const uint8_t *s, size_t n, const char *what, char *err, size_t errlen) {
    long long at = data_utf8_invalid_at(s, n);
    if (at < 0) return 0;
    snprintf(err, errlen, "%s:%lld: invalid UTF-8 (byte 0x%02x at offset %lld of the %s); fix the "
             "input or pass --allow-invalid-utf8 to tokenize raw bytes", r->path, r->lineno, s[at], at, what);
    return -1;
}

static int is_graph(uint8_t c) { return c > ' ' && c < 0x7f; }

// "%" or "%\r" (with or without the newline) equals separator "%".
static int is_separator(const char *line, size_t n, const char *sep) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    return strlen(sep) == n && memcmp(line, sep, n) == 0;
}

static int read_text(Reader *r, const DataDocsOptions *o, char *err, size_t errlen) {
    TokBytes doc = {0};
    int has_doc = 0, rc = 0;
    ssize_t n;
    while ((n = next_line(r)) > 0) {
        if (o->doc_separator && is_separator(r->line, (size_t)n, o->doc_separator)) {
            if (doc.n) r->sink->text(r->sink->ctx, doc.v, doc.n);
            if (has_doc) r->sink->end_doc(r->sink->ctx);
            doc.n = 0;
            has_doc = 0;
            continue;
        }
        if (!o->allow_invalid_utf8 && (rc = utf8_error(r, (uint8_t *)r->line, (size_t)n, "line", err, errlen)))
            break;
        if (o->chunk_bytes && doc.n >= o->chunk_bytes && doc.n >= 2 && is_graph(doc.v[doc.n - 2]) &&
            is_graph((uint8_t)r->line[0])) {
            r->sink->text(r->sink->ctx, doc.v, doc.n);  // a safe cut: "x\n" | "y"
            doc.n = 0;
        }
        tok_bytes_append(&doc, (uint8_t *)r->line, (size_t)n);
        has_doc = 1;
    }
    if (!rc && ferror(r->f)) {
        snprintf(err, errlen, "%s:%lld: read error: %s", r->path, r->lineno, strerror(errno));
        rc = -1;
    }
    if (!rc && doc.n) r->sink->text(r->sink->ctx, doc.v, doc.n);
    if (!rc && has_doc) r->sink->end_doc(r->sink->ctx);
    free(doc.v);
    return rc;
}

// Parses one JSON Lines record and hands on its text. -1 with a message on a bad record.
static int jsonl_record(Reader *r, json_tokener *tk, size_t n, const DataDocsOptions *o, char *err, size_t errlen) {
    json_tokener_reset(tk);
    json_object *obj = json_tokener_parse_ex(tk, r->line, (int)n);
    enum json_tokener_error e = json_tokener_get_error(tk);
    size_t end = json_tokener_get_parse_end(tk);
    while (obj && end < n && strchr(" \t\r\n", r->line[end])) end++;
    int rc = -1;
    json_object *v = NULL;
    if (!obj || e != json_tokener_success || end != n) {
        if (e == json_tokener_continue) e = json_tokener_error_parse_eof;
        snprintf(err, errlen, "%s:%lld: invalid JSON: %s", r->path, r->lineno,
                 obj && e == json_tokener_success ? "text after the object" : json_tokener_error_desc(e));
    } else if (!json_object_is_type(obj, json_type_object)) {
        snprintf(err, errlen, "%s:%lld: expected a JSON object, got %s", r->path, r->lineno,
                 json_type_to_name(json_object_get_type(obj)));
    } else if (!json_object_object_get_ex(obj, o->json_key, &v)) {
        snprintf(err, errlen, "%s:%lld: no \"%s\" key (see --json-keys)", r->path, r->lineno, o->json_key);
    } else if (!json_object_is_type(v, json_type_string)) {
        snprintf(err, errlen, "%s:%lld: \"%s\" is %s, not a string", r->path, r->lineno, o->json_key,
                 json_type_to_name(json_object_get_type(v)));
    } else {
        const uint8_t *s = (const uint8_t *)json_object_get_string(v);
        size_t len = (size_t)json_object_get_string_len(v);
        rc = o->allow_invalid_utf8 ? 0 : utf8_error(r, s, len, "decoded text", err, errlen);
        if (rc == 0 && len) {
            r->sink->text(r->sink->ctx, s, len);
            r->sink->end_doc(r->sink->ctx);
        }
    }
    json_object_put(obj);
    return rc;
}

static int read_jsonl(Reader *r, const DataDocsOptions *o, char *err, size_t errlen) {
    json_tokener *tk = json_tokener_new();
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT | (o->allow_invalid_utf8 ? 0 : JSON_TOKENER_VALIDATE_UTF8));
    int rc = 0;
    ssize_t n;
    while (rc == 0 && (n = next_line(r)) > 0) {
        size_t i = 0;
        while (i < (size_t)n && strchr(" \t\r\n", r->line[i]) && r->line[i]) i++;
        if (i == (size_t)n) continue;  // blank line
        if (n > INT32_MAX) {
            snprintf(err, errlen, "%s:%lld: line longer than 2 GiB", r->path, r->lineno);
            rc = -1;
        } else {
            rc = jsonl_record(r, tk, (size_t)n, o, err, errlen);
        }
    }
    if (!rc && ferror(r->f)) {
        snprintf(err, errlen, "%s:%lld: read error: %s", r->path, r->lineno, strerror(errno));
        rc = -1;
    }
    json_tokener_free(tk);
    return rc;
}

int data_docs_read(const char *path, const DataDocsOptions *o, const DataDocSink *sink, char *err,
                   size_t errlen) {
    Reader r = {.path = path, .sink = sink};
    if (!(r.f = fopen(path, "rb"))) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    int rc = data_docs_format(path, o->format) == DATA_FMT_JSONL ? read_jsonl(&r, o, err, errlen)
                                                                 : read_text(&r, o, err, errlen);
    if (sink->progress) sink->progress(sink->ctx, r.bytes);
    free(r.line);
    fclose(r.f);
    return rc;
}
