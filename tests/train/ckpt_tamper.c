// tests/train/ckpt_tamper.c: damages a checkpoint file in one precise way, for the
// damaged-checkpoint tests (checkpoint_test.py):
//     ckpt_tamper FILE delete  DATASET       remove a dataset
//     ckpt_tamper FILE reshape DATASET       replace it by a float32 (rows + 1) vector
//     ckpt_tamper FILE attr    NAME VALUE    set an integer attribute of the root group
//     ckpt_tamper FILE flip    DATASET       flip one bit in the middle of the dataset's
//                                            first chunk (or contiguous data), outside HDF5
//     ckpt_tamper FILE nan     DATASET       write NaN into its first element, through HDF5
//                                            (the checksum stays valid: a NaN that was saved)
//     ckpt_tamper FILE neg     DATASET       write -1 into its first element, the same way
// Exit 0 when done, 1 on an HDF5 failure, 2 on bad usage.
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reshape(hid_t f, const char *path) {
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    hid_t sp = H5Dget_space(ds);
    hsize_t dims[2] = {0, 0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    H5Dclose(ds);
    if (H5Ldelete(f, path, H5P_DEFAULT) < 0) return -1;
    hsize_t n = dims[0] + 1;
    sp = H5Screate_simple(1, &n, NULL);
    ds = H5Dcreate2(f, path, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sp);
    return ds < 0 ? -1 : H5Dclose(ds);
}

static int set_attr(hid_t f, const char *name, long long value) {
    if (H5Aexists(f, name) > 0 && H5Adelete(f, name) < 0) return -1;
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_LLONG, &value);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

// The file offset of a byte in the middle of the dataset's stored data, or -1.
static long long data_offset(hid_t f, const char *path) {
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    hid_t dcpl = H5Dget_create_plist(ds);
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hid_t sp = H5Dget_space(ds);
        unsigned mask = 0;
        hsize_t off[2];
        if (H5Dget_chunk_info(ds, sp, 0, off, &mask, &addr, &size) < 0) addr = HADDR_UNDEF;
        H5Sclose(sp);
    } else {
        addr = H5Dget_offset(ds);
        size = H5Dget_storage_size(ds);
    }
    H5Pclose(dcpl);
    H5Dclose(ds);
    return addr == HADDR_UNDEF || size == 0 ? -1 : (long long)(addr + size / 2);
}

static int flip(const char *file, const char *path) {
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    long long at = data_offset(f, path);
    H5Fclose(f);
    FILE *fp = at < 0 ? NULL : fopen(file, "r+b");
    if (!fp) return -1;
    int c = fseek(fp, at, SEEK_SET) == 0 ? fgetc(fp) : EOF;
    int rc = c == EOF || fseek(fp, at, SEEK_SET) != 0 || fputc(c ^ 0x10, fp) == EOF ? -1 : 0;
    if (fclose(fp) != 0) rc = -1;
    if (rc == 0) printf("flipped bit 4 of byte %lld of %s (%s)\n", at, file, path);
    return rc;
}

// Writes NaN into element 0 (or [0, 0]) of the dataset.
static int put_value(hid_t f, const char *path, float value) {
    hid_t ds = H5Dopen2(f, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    hid_t fs = H5Dget_space(ds);
    hsize_t start[2] = {0, 0}, count[2] = {1, 1}, one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    int rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
             H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &value) < 0 ? -1 : 0;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4 || (!strcmp(argv[2], "attr") && argc < 5)) {
        fprintf(stderr, "usage: ckpt_tamper FILE delete|reshape|flip|nan DATASET | FILE attr NAME VALUE\n");
        return 2;
    }
    if (!strcmp(argv[2], "flip")) return flip(argv[1], argv[3]) < 0 ? 1 : 0;
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return 1;
    int rc = -1;
    if (!strcmp(argv[2], "delete")) rc = H5Ldelete(f, argv[3], H5P_DEFAULT);
    else if (!strcmp(argv[2], "reshape")) rc = reshape(f, argv[3]);
    else if (!strcmp(argv[2], "nan")) rc = put_value(f, argv[3], __builtin_nanf(""));
    else if (!strcmp(argv[2], "neg")) rc = put_value(f, argv[3], -1.0f);
    else if (!strcmp(argv[2], "attr")) rc = set_attr(f, argv[3], atoll(argv[4]));
    if (H5Fclose(f) < 0) rc = -1;
    return rc < 0 ? 1 : 0;
}
