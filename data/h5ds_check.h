// data/h5ds_check.h: validation of an open megac token file, shared by h5ds_read.c (see
// h5ds_check.c).
#pragma once
#include "h5ds.h"  // defines: H5Dataset, hid_t

#define H5DS_ERRLEN 1024  // bytes of the err buffers below

// The innermost message of HDF5's error stack ("truncated file ..."), in buf. Returns buf.
const char *h5ds_h5_message(char buf[256]);

// Validates the attributes and datasets of the open file and fills ds (except its handles).
// Returns 0, or -1 with one line naming path and the problem in err (H5DS_ERRLEN bytes).
int h5ds_validate(hid_t file, H5Dataset *ds, const char *path, char *err);
