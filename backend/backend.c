// backend/backend.c: backend-independent helpers.
#include "backend.h"
#include <stdlib.h>

void backend_destroy(Backend *be) {
    if (!be) return;
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    free(be);
}

size_t backend_dtype_size(BackendDType t) { return t == BACKEND_F32 ? 4 : 2; }

const char *backend_dtype_name(BackendDType t) {
    return t == BACKEND_BF16 ? "bf16" : t == BACKEND_F16 ? "fp16" : "fp32";
}
