// pipeline/pp_p2p.c: the six point-to-point calls of the pipeline schedules, each one
// comm_send_recv over the pipeline group (a negative peer skips that half).
#include "pp_p2p.h"

static void exchange(PPLink *l, PPEventKind kind, int micro, const void *sbuf, int dst,
                     void *rbuf, int src) {
    if (dst < 0 && src < 0) return;  // nothing to move: no span either
    double t0 = pp_trace_begin(l->trace);
    comm_send_recv(l->comm, sbuf, l->count, dst, rbuf, l->count, src, l->dtype);
    pp_trace_end(l->trace, kind, micro, t0);
}

void pp_recv_forward(PPLink *l, void *x, int micro) {
    exchange(l, PP_EV_RECV_FORWARD, micro, NULL, -1, x, l->prev);
}

void pp_send_forward(PPLink *l, const void *y, int micro) {
    exchange(l, PP_EV_SEND_FORWARD, micro, y, l->next, NULL, -1);
}

void pp_recv_backward(PPLink *l, void *dy, int micro) {
    exchange(l, PP_EV_RECV_BACKWARD, micro, NULL, -1, dy, l->next);
}

void pp_send_backward(PPLink *l, const void *dx, int micro) {
    exchange(l, PP_EV_SEND_BACKWARD, micro, dx, l->prev, NULL, -1);
}

void pp_send_forward_recv_backward(PPLink *l, const void *y, void *dy, int micro) {
    exchange(l, PP_EV_SEND_FORWARD_RECV_BACKWARD, micro, y, l->next, dy, l->next);
}

void pp_send_backward_recv_forward(PPLink *l, const void *dx, void *x, int micro) {
    exchange(l, PP_EV_SEND_BACKWARD_RECV_FORWARD, micro, dx, l->prev, x, l->prev);
}
