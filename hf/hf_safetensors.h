// hf/hf_safetensors.h: the safetensors file format (Hugging Face's tensor container).
//
//   bytes [0, 8)        N: length of the header, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    the header: a JSON object (UTF-8), padded with spaces
//                       {"__metadata__": {"key": "value", ...},          optional, strings only
//                        "NAME": {"dtype": "F32", "shape": [R, C], "data_offsets": [B, E]}, ...}
//   bytes [8 + N, end)  the data section: tensor NAME is bytes [B, E) of it, row-major,
//                       little-endian; the ranges do not overlap (the writer leaves no gaps)
//
// The writer stores fp32 tensors; the reader accepts F32, F16 and BF16 and converts to fp32.
// The reader treats the file as untrusted: every length and offset is checked before use.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HF_ST_MAX_DIMS 4
#define HF_ST_MAX_HEADER (100u << 20)  // larger headers are refused (as the reference reader does)

typedef enum { HF_DT_F32, HF_DT_F16, HF_DT_BF16, HF_DT_OTHER } HfDType;

// One tensor of the header. Offsets are into the data section.
typedef struct {
    char *name;
    HfDType dtype;
    char dtype_name[16];           // as written in the file ("I64", ...)
    int ndim;
    int64_t shape[HF_ST_MAX_DIMS];
    uint64_t begin, end;
} HfStTensor;

typedef struct {
    char *path;
    FILE *f;
    uint64_t data_start;           // 8 + N
    HfStTensor *t;                 // (n) in header order
    int n;
} HfStFile;

// One fp32 tensor to write: shape (shape[0]) when ndim == 1, (shape[0], shape[1]) when 2.
typedef struct {
    const char *name;              // ASCII, no '"' or '\\'
    int ndim;
    int64_t shape[2];
    const float *data;             // (shape[0] * shape[1]) or (shape[0])
} HfStOut;

// Writes path (through path.tmp, renamed at the end): the tensors in the given order and the
// metadata pairs meta[0..2*n_meta) = key, value, ... (ASCII strings). Returns 0, or -1 with
// "path: problem" in err (cannot create, disk full).
int hf_st_write(const char *path, const HfStOut *t, int n, const char *const *meta, int n_meta,
                char *err, size_t errlen);

// Opens and validates path: header length within the file, the header a JSON object of
// well-formed entries, each range as long as its dtype and shape say, no two overlapping,
// none past the data section (bytes no entry names are ignored: a tensor missing from the
// header is named by the model's reader). Returns NULL with "path: problem" (one line) in err.
HfStFile *hf_st_open(const char *path, char *err, size_t errlen);
// DIR/model.safetensors of a Hugging Face model folder, opened as hf_st_open does; a folder
// with only a sharded index or a pytorch_model.bin (a pickle) gets a message saying how to save
// it instead. NULL with err set on failure.
HfStFile *hf_st_open_model(const char *dir, char *err, size_t errlen);

// The entry named `name`, or NULL. Pure.
const HfStTensor *hf_st_find(const HfStFile *f, const char *name);

// Elements of t: the product of its shape. Pure.
uint64_t hf_st_numel(const HfStTensor *t);

// Reads t into out (hf_st_numel(t) floats), converting F16 / BF16 to fp32 exactly. Returns 0,
// or -1 with "path: problem" in err (unsupported dtype, read error, a NaN or Inf weight:
// "tensor NAME holds NaN at element I").
int hf_st_read_f32(HfStFile *f, const HfStTensor *t, float *out, char *err, size_t errlen);

// Closes the file and frees f (NULL is fine).
void hf_st_close(HfStFile *f);
