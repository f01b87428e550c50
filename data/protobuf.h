// data/protobuf.h: a reader of the protocol-buffers wire format (enough for SentencePiece's
// tokenizer.model): a message is a run of (field number, wire type, value) records; values
// are varints (type 0), 64-bit (1), length-delimited bytes / sub-messages (2) or 32-bit (5).
// Every read is bounds-checked: a truncated or malformed buffer makes pb_next fail, never
// read past the end.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p, *end;  // the unread part of the message
} PbReader;

// One record: its field number and wire type, and the value (varint / fixed: v; bytes: s, n).
typedef struct {
    uint32_t field;
    int wire;
    uint64_t v;
    const uint8_t *s;
    size_t n;
} PbField;

// A reader over buf[0..n). Pure.
PbReader pb_reader(const uint8_t *buf, size_t n);
// Reads the next record into f. Returns 1, 0 at the end of the message, or -1 on a
// malformed record (a varint over 10 bytes, a length past the end, wire types 3/4/6/7).
int pb_next(PbReader *r, PbField *f);
// The 32-bit float of a wire-type-5 value (little-endian IEEE bits). Pure.
float pb_float(const PbField *f);
