// backend/backend.c: backend-independent helpers.
#include "backend.h"
#include <stdlib.h>

void backend_destroy(Backend *be) {
    if (!be) return;
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    free(be);
}
