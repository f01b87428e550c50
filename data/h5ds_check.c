// data/h5ds_check.c: validating an open megac token file (data/FORMAT.md): its attributes,
// the /tokens and /doc_offsets datasets' types, shapes and storage, and the offsets
// themselves. Used by h5ds_read.c's open (rank 0, serially).
#include "h5ds_check.h"
#include "core/check.h"  // defines: core_hdf5_last_error, core_calloc

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *h5ds_h5_message(char buf[256]) {
    core_hdf5_last_error(buf, 256);
    return buf;
}

// Reads a scalar integer attribute of the root group; -1 with a message when absent or wrong.
static int attr_int(hid_t file, const char *name, int64_t *out, const char *path, char *err) {
    hid_t a = H5Aexists(file, name) > 0 ? H5Aopen(file, name, H5P_DEFAULT) : -1;
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    int ok = t >= 0 && s >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(s) == 1 &&
             H5Aread(a, H5T_NATIVE_INT64, out) >= 0;
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!ok) snprintf(err, H5DS_ERRLEN, "%s: attribute '%s' is missing or not an integer", path, name);
    return ok ? 0 : -1;
}

// Reads a scalar string attribute (fixed or variable length, ASCII or UTF-8 as h5py writes
// a str) into a malloc'ed string. A fixed length larger than the file is damage, not a string.
static char *attr_str(hid_t file, const char *name, const char *path, char *err) {
    hsize_t file_size = 0;
    H5Fget_filesize(file, &file_size);
    char *out = NULL;
    hid_t a = H5Aexists(file, name) > 0 ? H5Aopen(file, name, H5P_DEFAULT) : -1;
    hid_t t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    if (t >= 0 && s >= 0 && H5Tget_class(t) == H5T_STRING && H5Sget_simple_extent_npoints(s) == 1) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5T_cset_t cs = H5Tget_cset(t);  // HDF5 converts no strings between ASCII and UTF-8:
        if (cs == H5T_CSET_UTF8) H5Tset_cset(mt, cs);  // read h5py's UTF-8 strings as they are
        if (H5Tis_variable_str(t) > 0) {
            char *v = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            if (H5Aread(a, mt, &v) >= 0 && v) out = strdup(v);
            if (v) H5free_memory(v);
        } else {
            size_t n = H5Tget_size(t);
            if (n > 0 && n <= file_size) {
                out = core_calloc(n + 1, 1);
                H5Tset_size(mt, n);
                H5Tset_strpad(mt, H5T_STR_NULLPAD);  // all n bytes, whatever the padding
                if (H5Aread(a, mt, out) < 0) { free(out); out = NULL; }
            }
        }
        H5Tclose(mt);
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    if (!out) snprintf(err, H5DS_ERRLEN, "%s: attribute '%s' is missing or not a string", path, name);
    return out;
}

// Length of a 1-D integer dataset of element size in sizes[]; -1 with a message otherwise.
static int64_t dset_len(hid_t d, const char *name, int want_unsigned, const int *sizes, int n_sizes,
                        int *elem, const char *path, char *err) {
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    hsize_t dims[2] = {0, 0};
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (rank == 1) H5Sget_simple_extent_dims(s, dims, NULL);
    int ok = t >= 0 && rank == 1 && H5Tget_class(t) == H5T_INTEGER &&
             (!want_unsigned || H5Tget_sign(t) == H5T_SGN_NONE);
    *elem = t >= 0 ? (int)H5Tget_size(t) : 0;
    int size_ok = 0;
    for (int i = 0; i < n_sizes; i++) size_ok |= (*elem == sizes[i]);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (!ok || !size_ok) {
        snprintf(err, H5DS_ERRLEN, "%s: dataset '%s' must be 1-D %s (got %d-D, %d-byte elements)", path, name,
                 want_unsigned ? "uint16 or uint32" : "64-bit integers", rank, *elem);
        return -1;
    }
    return (int64_t)dims[0];
}

// Damaged metadata can claim more bytes than the file holds, and HDF5 would then allocate
// them: the dataset's storage must fit in the file, and (unfiltered or only checksummed,
// as the writer makes them) hold all n elements.
static int check_storage(hid_t file, hid_t d, const char *name, int64_t n, int elem, const char *path,
                         char *err) {
    hsize_t file_size = 0, stored = H5Dget_storage_size(d);
    H5Fget_filesize(file, &file_size);
    hid_t dcpl = H5Dget_create_plist(d);
    int filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0, compressing = 0;
    for (int i = 0; i < filters; i++) {  // Fletcher-32 only adds 4 bytes per chunk
        unsigned flags = 0;
        size_t nv = 0;
        compressing |= H5Pget_filter2(dcpl, (unsigned)i, &flags, &nv, NULL, 0, NULL, NULL) !=
                       H5Z_FILTER_FLETCHER32;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (stored > file_size || (!compressing && (hsize_t)n * (hsize_t)elem > stored)) {
        snprintf(err, H5DS_ERRLEN, "%s: damaged file: dataset '%s' has %lld elements, %llu bytes stored, in a "
                 "%llu-byte file", path, name, (long long)n, (unsigned long long)stored,
                 (unsigned long long)file_size);
        return -1;
    }
    return 0;
}

// Checks doc_offsets: starts at 0, strictly increasing (every document has its EOD), ends at
// n_tokens.
static int check_offsets(const H5Dataset *ds, const char *path, char *err) {
    const uint64_t *o = ds->doc_offsets;
    if (o[0] != 0) {
        snprintf(err, H5DS_ERRLEN, "%s: doc_offsets[0] = %llu, expected 0", path, (unsigned long long)o[0]);
        return -1;
    }
    for (int64_t d = 0; d < ds->n_docs; d++)
        if (o[d + 1] <= o[d]) {
            snprintf(err, H5DS_ERRLEN, "%s: doc_offsets not increasing at document %lld (%llu then %llu)",
                     path, (long long)d, (unsigned long long)o[d], (unsigned long long)o[d + 1]);
            return -1;
        }
    if (o[ds->n_docs] != (uint64_t)ds->n_tokens) {
        snprintf(err, H5DS_ERRLEN, "%s: doc_offsets ends at %llu but there are %lld tokens", path,
                 (unsigned long long)o[ds->n_docs], (long long)ds->n_tokens);
        return -1;
    }
    return 0;
}

// Checks /tokens and /doc_offsets (types, shapes, storage) and reads + checks the offsets.
static int validate_datasets(hid_t file, H5Dataset *ds, const char *path, char *err) {
    if (H5Lexists(file, "tokens", H5P_DEFAULT) <= 0 || H5Lexists(file, "doc_offsets", H5P_DEFAULT) <= 0) {
        snprintf(err, H5DS_ERRLEN, "%s: dataset 'tokens' or 'doc_offsets' is missing", path);
        return -1;
    }
    hid_t tok = H5Dopen2(file, "tokens", H5P_DEFAULT), off = H5Dopen2(file, "doc_offsets", H5P_DEFAULT);
    const int tok_sizes[2] = {2, 4}, off_sizes[1] = {8};
    int elem = 0, rc = -1;
    int64_t n_off = -1;
    char m[256];
    if (tok < 0 || off < 0) {
        snprintf(err, H5DS_ERRLEN, "%s: cannot open 'tokens' / 'doc_offsets': %s", path, h5ds_h5_message(m));
    } else if ((ds->n_tokens = dset_len(tok, "tokens", 1, tok_sizes, 2, &ds->token_bytes, path, err)) >= 0 &&
               (n_off = dset_len(off, "doc_offsets", 0, off_sizes, 1, &elem, path, err)) >= 0) {
        ds->n_docs = n_off - 1;
        if (ds->n_docs < 1 || ds->n_tokens < 1) {
            snprintf(err, H5DS_ERRLEN, "%s: empty dataset (%lld documents, %lld tokens)", path,
                     (long long)(ds->n_docs > 0 ? ds->n_docs : 0), (long long)ds->n_tokens);
        } else if (check_storage(file, tok, "tokens", ds->n_tokens, ds->token_bytes, path, err) == 0 &&
                   check_storage(file, off, "doc_offsets", n_off, elem, path, err) == 0) {
            ds->doc_offsets = core_calloc((size_t)n_off, sizeof(uint64_t));
            if (H5Dread(off, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->doc_offsets) >= 0)
                rc = check_offsets(ds, path, err);
            else if (strstr(h5ds_h5_message(m), "Fletcher32"))  // a chunk's checksum did not match
                snprintf(err, H5DS_ERRLEN, "%s: dataset /doc_offsets: checksum mismatch (Fletcher-32): "
                         "the file is damaged", path);
            else
                snprintf(err, H5DS_ERRLEN, "%s: cannot read doc_offsets: %s", path, m);
        }
    }
    if (tok >= 0) H5Dclose(tok);
    if (off >= 0) H5Dclose(off);
    return rc;
}

int h5ds_validate(hid_t file, H5Dataset *ds, const char *path, char *err) {
    char *format = attr_str(file, "format", path, err);
    if (!format || strcmp(format, H5DS_FORMAT)) {
        snprintf(err, H5DS_ERRLEN, "%s: not a megac token dataset (attribute 'format' %s%s%s)", path,
                 format ? "is '" : "is missing", format ? format : "", format ? "'" : "");
        free(format);
        return -1;
    }
    free(format);
    int64_t version;
    if (attr_int(file, "version", &version, path, err)) return -1;
    if (version != H5DS_VERSION) {
        snprintf(err, H5DS_ERRLEN, "%s: format version %lld is not supported (this megac reads version %d)",
                 path, (long long)version, H5DS_VERSION);
        return -1;
    }
    if (attr_int(file, "vocab_size", &ds->vocab_size, path, err) ||
        attr_int(file, "eod_id", &ds->eod_id, path, err))
        return -1;
    if (ds->vocab_size < 1 || ds->vocab_size > ((int64_t)1 << 32) || ds->eod_id < 0 ||
        ds->eod_id >= ds->vocab_size) {
        snprintf(err, H5DS_ERRLEN, "%s: vocab_size %lld / eod_id %lld out of range", path,
                 (long long)ds->vocab_size, (long long)ds->eod_id);
        return -1;
    }
    if (!(ds->tokenizer = attr_str(file, "tokenizer", path, err))) return -1;
    return validate_datasets(file, ds, path, err);
}
