// hf/hf_sample.h: choosing the next token from logits: greedy, or sampled with temperature,
// top-k and top-p (nucleus), from a counter-based random number so that a seed fixes the text.
#pragma once
#include <stdint.h>

typedef struct {
    double temperature;  // 0: greedy (argmax, the lowest id on ties)
    int top_k;           // keep the k most likely ids (0: all)
    double top_p;        // then the fewest most likely ids whose probability reaches p (1: all)
    uint64_t seed;
} HfSampler;

// The next token from logits (V) for generation step `step`: argmax when temperature == 0,
// else a draw from softmax(logits / temperature) cut by top_k and top_p, using the uniform
// number (seed, step) (Philox). Pure given its arguments.
int hf_sample(const HfSampler *s, const float *logits, int V, uint64_t step);
