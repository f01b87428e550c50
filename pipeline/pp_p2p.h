// pipeline/pp_p2p.h: the point-to-point calls between neighbouring pipeline stages, with
// Megatron-LM's names.
//
// "forward" traffic is a stage's output activation going to the next stage; "backward"
// traffic is the gradient of that activation coming back. Every call moves one message of
// `count` elements of `dtype` (micro-batch x sequence x hidden, in the activation type) over the pipeline Comm with
// comm_send_recv, which posts both halves before waiting: the paired calls
//     stage s:   send_forward_recv_backward   <->   stage s+1: send_backward_recv_forward
// can never deadlock, whatever order the two ranks reach them in. A missing neighbour
// (prev = -1 on the first stage, next = -1 on the last) makes that half a no-op, so the
// schedule has no special case for the ends. Each call's wait is a span in the trace.
#pragma once
#include <stddef.h>
#include "comm/comm.h"
#include "pp_trace.h"

typedef struct {
    Comm *comm;        // the pipeline group; rank = stage index
    int prev, next;    // group-local neighbours, -1 at the ends
    size_t count;      // elements per message
    CommDtype dtype;   // their type: the activations' (fp32, bf16 or fp16)
    PPTrace *trace;    // NULL: no recording
} PPLink;

// x (count) <- activation of micro-batch `micro` from the previous stage.
void pp_recv_forward(PPLink *l, void *x, int micro);
// y (count) -> next stage.
void pp_send_forward(PPLink *l, const void *y, int micro);
// dy (count) <- gradient of this stage's output from the next stage.
void pp_recv_backward(PPLink *l, void *dy, int micro);
// dx (count) -> previous stage.
void pp_send_backward(PPLink *l, const void *dx, int micro);
// y -> next stage and dy <- next stage, at once. `micro`: the micro-batch of y (for the trace).
void pp_send_forward_recv_backward(PPLink *l, const void *y, void *dy, int micro);
// dx -> previous stage and x <- previous stage, at once. `micro`: that of dx.
void pp_send_backward_recv_forward(PPLink *l, const void *dx, void *x, int micro);
