/* fuzz_json.c - libFuzzer target for the JSON parsers that take input from
 * other machines: the worker's PLAN decoder (ring/msg.h) and the device profile / profile
 * document parsers (JOIN payloads). The first byte picks the parser.
 * Built with -DHR_FUZZ=ON (clang) or deploy/fuzz.sh. */
#include "common/error.h"
#include "common/log.h"
#include "profiler/profiler.h"
#include "ring/msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    hr_log_set_level(HR_LOG_LEVEL_NONE); /* rejected input is logged: keep the fuzzer fast */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    char err[HR_ERR_LEN];
    const char *js = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        hr_ring_hdr h = {.type = HR_RING_PLAN, .len = (uint32_t)n};
        hr_msg_plan np;
        if (n <= UINT32_MAX && hr_msg_plan_decode(&h, js, &np, err) == 0) {
            if (np.n_keys < 0 || np.n_keys > HR_MSG_MAX_KEYS ||
                strnlen(np.next, sizeof np.next) >= sizeof np.next ||
                strnlen(np.next_key, sizeof np.next_key) >= sizeof np.next_key)
                abort();
            for (int i = 0; i < np.n_keys; i++)
                if (!hr_ring_key_valid(np.keys[i]))
                    abort();
            /* the windows cover the layers once, in ring order round after round */
            int at = 0;
            for (int r = 0; r < np.k; r++)
                for (int j = 0; j < np.n_active; j++) {
                    int first, count;
                    if (hr_msg_plan_window(&np, j, r, &first, &count) != 0 || first != at ||
                        count < 0)
                        abort();
                    at += count;
                }
            if (at != np.n_layer || np.index < -1 || np.index >= np.n_active)
                abort();
        }
        break;
    }
    case 1: {
        hr_prof_device *d = calloc(1, sizeof *d);
        if (d)
            hr_prof_device_parse(js, n, d, err);
        free(d);
        break;
    }
    default: {
        hr_prof_doc *doc = calloc(1, sizeof *doc);
        if (doc) {
            hr_prof_doc_parse(js, n, doc, err);
            hr_prof_doc_clear(doc); /* also after a failed parse */
        }
        free(doc);
        break;
    }
    }
    return 0;
}
