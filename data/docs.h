// data/docs.h: reading documents from input files, streaming.
//
//   text        one document per file, or documents separated by a line equal to
//               doc_separator (fortunes' "%"); the separator line is not part of any document
//   JSON Lines  one JSON object per line, the document under json_key (Megatron's convention);
//               blank lines are skipped
//
// Empty documents are skipped. Invalid UTF-8 is an error naming the file, line and byte
// (unless allow_invalid_utf8: byte-level tokenizers encode any bytes). JSON escapes of lone
// surrogates ("\udc00") are decoded by json-c as U+FFFD, so they count as valid text.
//
// Memory is bounded by chunk_bytes plus the longest line: a long text document is handed on
// in parts, cut only between "x\n" and "y" with x, y printable non-space ASCII, where
// pre-tokenisation pieces always end and start (pretok.h), so encoding the parts gives
// exactly the tokens of the whole document. (CRLF text is therefore never cut.)
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { DATA_FMT_AUTO, DATA_FMT_TEXT, DATA_FMT_JSONL } DataInputFormat;

typedef struct {
    DataInputFormat format;      // AUTO: by file name (.jsonl / .json / .ndjson: JSON Lines)
    const char *json_key;        // JSON Lines: the text field
    const char *doc_separator;   // text: separator line; NULL: one document per file
    int allow_invalid_utf8;
    size_t chunk_bytes;          // 0: hand on whole documents
} DataDocsOptions;

typedef struct {
    void (*text)(void *ctx, const uint8_t *s, size_t n);  // next part of the current document
    void (*end_doc)(void *ctx);                           // the current document is complete
    void (*progress)(void *ctx, uint64_t file_bytes);     // bytes of this file read so far (or NULL)
    void *ctx;
} DataDocSink;

// The format used for path: f, or guessed from the file name when f is DATA_FMT_AUTO. Pure.
DataInputFormat data_docs_format(const char *path, DataInputFormat f);
// Streams the documents of path into sink. Returns 0, or -1 with "path:line: problem" in err
// (documents before the problem have been handed on).
int data_docs_read(const char *path, const DataDocsOptions *o, const DataDocSink *sink, char *err,
                   size_t errlen);
