/* file.c - whole-file reads. */
#include "common/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

char *hr_file_read(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            if (cap > max_bytes) {
                free(buf);
                buf = NULL;
                errno = EFBIG;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                free(buf);
                buf = NULL;
                errno = EIO;
            }
            break;
        }
    }
    fclose(f);
    if (buf && n > max_bytes) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = n;
    }
    return buf;
}
