// core/philox.h: counter-based random numbers (Philox-4x32-10, Salmon et al. 2011).
//
// A value depends only on (seed, stream, index): no state, no order. The model uses
// stream = tensor id and index = the element's index in the full, unsharded tensor, so
// any shard of any (TP, PP, DP) layout generates exactly its slice of the same model.
#pragma once
#include <stdint.h>

// Four 32-bit random words for counter (index, stream) under key seed. Pure.
void core_philox4x32(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

// Standard normal N(0, 1) for element `index` of stream `stream` (Box-Muller). Pure.
double core_philox_normal(uint64_t seed, uint64_t stream, uint64_t index);
