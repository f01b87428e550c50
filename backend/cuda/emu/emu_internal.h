// backend/cuda/emu/emu_internal.h: what the emulator's own files share (the CUDA backend
// never includes this). C11 and C++20.
#pragma once
#include <cuda_runtime.h>  // defines: cudaError_t

#ifdef __cplusplus
extern "C" {
#endif

// Fills fresh device memory and each launch's dynamic shared memory (real memory is not
// zeroed): every float and double reads as NaN, every int as -1.
#define EMU_GARBAGE_BYTE 0xFF

// Records e as this host thread's last error (cudaGetLastError returns it and resets it to
// cudaSuccess; cudaPeekAtLastError only returns it). cudaSuccess is ignored. Never fails.
void emu_set_last_error(cudaError_t e);

// Returns e after recording it as the last error (every failing runtime call does, as
// CUDA). Never fails.
cudaError_t emu_fail(cudaError_t e);

// With env MEGAC_EMU_TRACE set, appends one line "SEQ s<stream> kind detail" to its file
// (emu_trace.c describes the format); stream -1: none. Else nothing. Thread-safe; never fails
// (an unwritable file ends the process at the first call).
void emu_trace(int stream, const char *kind, const char *fmt, ...);
// The trace's number of stream s (0: the default stream, else by creation, from 1). Pure.
int emu_stream_id(cudaStream_t s);

#ifdef __cplusplus
}
#endif
