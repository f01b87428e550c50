// data/protobuf.c: the protocol-buffers wire-format reader (see protobuf.h).
#include "protobuf.h"

#include <string.h>

PbReader pb_reader(const uint8_t *buf, size_t n) { return (PbReader){buf, buf + n}; }

// A base-128 varint at r->p (least significant group first); 0, or -1 when malformed.
static int varint(PbReader *r, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

int pb_next(PbReader *r, PbField *f) {
    if (r->p >= r->end) return 0;
    uint64_t key;
    if (varint(r, &key) || key >> 3 == 0 || key >> 3 > UINT32_MAX) return -1;
    memset(f, 0, sizeof *f);
    f->field = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    size_t left;
    switch (f->wire) {
    case 0:
        return varint(r, &f->v) ? -1 : 1;
    case 1:
    case 5: {
        size_t w = f->wire == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < w) return -1;
        for (size_t i = 0; i < w; i++) f->v |= (uint64_t)r->p[i] << (8 * i);
        r->p += w;
        return 1;
    }
    case 2:
        if (varint(r, &f->v)) return -1;
        left = (size_t)(r->end - r->p);
        if (f->v > left) return -1;
        f->s = r->p;
        f->n = (size_t)f->v;
        r->p += f->n;
        return 1;
    default:  // 3, 4: groups (deprecated, not in SentencePiece's files); 6, 7: invalid
        return -1;
    }
}

float pb_float(const PbField *f) {
    uint32_t bits = (uint32_t)f->v;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}
