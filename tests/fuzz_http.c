/* fuzz_http.c - libFuzzer target for the HTTP API's request parsing: the
 * body parser for /v1/completions and /v1/chat/completions (first byte
 * picks the kind and the max_tokens limit), the UTF-8 cleaner and the
 * Authorization header check. Built with -DHR_FUZZ=ON (clang). */
#include "api/http.h"
#include "common/error.h"
#include "common/log.h"

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
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    hr_api_req r;
    hr_api_err e;
    memset(&r, 0, sizeof r);
    memset(&e, 0, sizeof e);
    int limit = 1 + data[0] / 2;
    if (hr_api_parse(&r, (hr_api_kind)(data[0] & 1), body, n, limit, &e) == 0) {
        if (r.max_tokens < 1 || r.max_tokens > limit)
            abort();
        char *ej = hr_api_error_json(&e);
        free(ej);
    } else {
        char *ej = hr_api_error_json(&e);
        free(ej);
    }
    hr_api_req_free(&r);
    char out[256];
    size_t w = hr_api_utf8_clean(body, n, out, sizeof out);
    if (w >= sizeof out)
        abort();
    char *hdr = malloc(n + 1);
    if (hdr) {
        memcpy(hdr, body, n);
        hdr[n] = 0;
        (void)hr_api_auth_ok(hdr, "sk-test-key");
        free(hdr);
    }
    return 0;
}
