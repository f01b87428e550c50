// backend/backend.c: backend-independent helpers.
#include "backend.h"
#include <stdlib.h>

#include "core/check.h"  // defines: core_fatal

void backend_destroy(Backend *be) {
    if (!be) return;
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    free(be);
}

void backend_check_grouped_pre(const void *pre, const void *dinp, BackendAct act) {
    if (pre && (!dinp || backend_act_gated(act)))
        core_fatal("matmul_grouped_backward: pre needs dinp and a pointwise act");
}

size_t backend_dtype_size(BackendDType t) { return t == BACKEND_F32 ? 4 : 2; }

const char *backend_dtype_name(BackendDType t) {
    return t == BACKEND_BF16 ? "bf16" : t == BACKEND_F16 ? "fp16" : "fp32";
}

int backend_attn_cudnn_case(BackendDType act, int hs, const BackendDropout *d,
                            const BackendAttnWindow *w, const char **why) {
    const char *r = act != BACKEND_BF16 && act != BACKEND_F16 ? "fp32 activations (cuDNN: --bf16 or --fp16)"
                    : hs != 64 && hs != 128 ? "a head size other than 64 or 128"
                    : d && d->threshold ? "attention dropout (cuDNN's masks are not megac's)"
                    : w ? "a window of the sequence (cache, documents or context-parallel block)"
                    : NULL;
    if (why) *why = r;
    return r == NULL;
}
