// train/tb_events.h: TensorBoard event files (--tensorboard-dir): TFRecord framing (length,
// masked CRC32C of the length, the record, masked CRC32C of the record) around Event
// protocol buffers holding scalar summaries, encoded by hand (no protobuf library). What
// TensorBoard's event reader and PyTorch's SummaryWriter agree on: an event file starts with
// a file-version event ("brain.Event:2"); each scalar is a Summary.Value with a tag and a
// float simple_value.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct TbWriter TbWriter;

typedef struct {
    const char *tag;  // TensorBoard's tag ("lm loss", "learning-rate", ...)
    double value;     // stored as a float (simple_value), as SummaryWriter.add_scalar does
} TbScalar;

// Opens a new event file DIR/events.out.tfevents.<seconds>.<host>.<pid> (DIR and its parents
// created; the file must not exist) and writes its file-version event. Returns the writer,
// or NULL with one line naming --tensorboard-dir and the reason in err.
TbWriter *tb_open(const char *dir, char *err, size_t n);

// Appends one event at `step` (wall time now) holding the n scalars (tags < 1 KiB), buffered.
// Returns 0, or the errno of the first failed write; after a failure nothing more is written
// and every call returns that errno.
int tb_write(TbWriter *w, int64_t step, const TbScalar *v, int n);

// Hands the buffered events to the file system (TensorBoard sees them). Returns as tb_write.
int tb_flush(TbWriter *w);

// Flushes and closes the file; NULL is a no-op. Returns 0 or the errno of a failed write.
int tb_close(TbWriter *w);

// The event file's path (for messages).
const char *tb_path(const TbWriter *w);

// CRC32C (Castagnoli, reflected 0x82F63B78) of p[0..n) continuing from crc (0 to start). Pure.
uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n);

// TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8. Pure.
uint32_t tb_masked_crc(uint32_t crc);

// The TFRecord of one Event {wall_time, step, summary {value {tag, simple_value}...}} (or,
// with file_version non-NULL and n 0, the file-version event) into buf. Returns its length,
// or 0 when it does not fit in cap bytes. Pure.
size_t tb_record_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                        const char *file_version, const TbScalar *v, int n);
