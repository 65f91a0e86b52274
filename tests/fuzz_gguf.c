/* fuzz_gguf.c - libFuzzer target for the GGUF reader (not run by ctest).
 *
 * Opens each input with hr_gguf_open_memory; when it opens, touches every
 * kv, value, tensor and layer range, re-encodes every value through the
 * writer, and asks mmap/stream.h for the byte range of layer windows
 * (which must lie inside the file). Build by hand from the repository
 * root, e.g.:
 *
 *   F="-std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined"
 *   clang $F tests/fuzz_gguf.c mmap/gguf.c mmap/gguf_value.c mmap/gguf_write.c \
 *         mmap/stream.c kernels/types.c common/error.c common/log.c \
 *         -lm -lpthread -o fuzz_gguf
 *   ./fuzz_gguf -max_total_time=180 corpus/
 */
#include "common/error.h"
#include "mmap/gguf.h"
#include "mmap/stream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void touch(const hr_gguf *g) {
    char buf[128];
    uint64_t s = 0;
    hr_gguf_writer *w = hr_gguf_writer_create();
    for (int64_t i = 0; i < hr_gguf_n_kv(g); i++) {
        const char *key = hr_gguf_key(g, i);
        if (hr_gguf_find_key(g, key) != i)
            abort(); /* keys are unique after open */
        const hr_gguf_value *v = hr_gguf_kv_value(g, i);
        hr_gguf_value_format(v, buf, sizeof buf, 3);
        s += strlen(buf);
        uint64_t n = hr_gguf_arr_len(g, i);
        if (n) {
            const char *str;
            size_t len;
            double d;
            int64_t x;
            if (hr_gguf_arr_str(g, i, n - 1, &str, &len) == 0 && str[len] != '\0')
                abort();
            if (hr_gguf_arr_f64(g, i, n - 1, &d) == 0)
                s += d != d;
            if (hr_gguf_arr_i64(g, i, n - 1, &x) == 0)
                s += (uint64_t)x;
            const hr_gguf_value *e = hr_gguf_value_arr_at(v, n - 1);
            if (e)
                s += hr_gguf_value_arr_len(e);
        }
        if (w && hr_gguf_writer_set_value(w, key, v) != 0 && strcmp(key, "general.alignment"))
            abort(); /* every value that opened must re-encode */
    }
    hr_gguf_writer_destroy(w);
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        if (hr_gguf_find_tensor(g, t->name) != t)
            abort();
        const uint8_t *p = t->data;
        s += p[0] + p[t->size - 1];
    }
    for (int l = 0; l < hr_gguf_n_layers_seen(g); l++) {
        uint64_t b = 0, e = 0, off = 0, len = 0, size = hr_gguf_file_size(g);
        int has = hr_gguf_layer_range(g, l, &b, &e) == 0;
        if (has)
            s += e - b;
        int rc = hr_stream_window_range(g, l, l + 2, &off, &len);
        if (rc == 0 && (len == 0 || off > size || len > size - off || (has && off > b)))
            abort(); /* a window lies in the file and covers its first layer */
        if (rc != 0 && rc != HR_ENOENT)
            abort();
    }
    sink += s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_gguf *g = NULL;
    char err[HR_ERR_LEN];
    int rc = hr_gguf_open_memory(&g, data, size, err);
    if (rc == 0) {
        touch(g);
        hr_gguf_close(g);
    } else if (rc > 0 || g != NULL || err[0] == '\0') {
        abort();
    }
    return 0;
}
