/* fuzz_frame.c - libFuzzer target for the wire-frame decoder: every input
 * is a received frame; the header is parsed and checked, a BATCH payload's
 * row table read back and its hidden states unpacked as the receivers do
 * (against a plan of n_embd 64, 8 rows), the retired data type refused, and
 * a frame that parses is re-encoded and must parse to the same header.
 * Built with -DHR_FUZZ=ON (clang) or deploy/fuzz.sh. */
#include "common/error.h"
#include "common/log.h"
#include "ring/ring.h"

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

static float g_hid[8 * 64];
static uint8_t g_out[HR_RING_HDR_SIZE + 8 * (HR_RING_ROW_SIZE + 64 * 4)];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[HR_ERR_LEN];
    hr_ring_hdr h;
    if (hr_ring_hdr_read(data, size, &h, err) != 0)
        return 0;
    if (hr_ring_type_name(h.type)[0] == '?')
        abort(); /* accepted an unknown type */
    if (h.type == HR_RING_RETIRED)
        abort(); /* the retired data frame is an unknown type */
    if (h.type == HR_RING_BATCH) {
        size_t es = hr_ring_dtype_size(h.dtype);
        if (es == 0 || h.n_tok == 0 || h.len % h.n_tok != 0)
            abort();
        /* the receivers' plan check: n_embd 64, 8 rows; rows round-trip */
        size_t rt = (size_t)h.n_tok * HR_RING_ROW_SIZE;
        if (h.n_tok <= 8 && (size_t)h.len == rt + (size_t)h.n_tok * 64 * es) {
            int32_t slot[8], pos[8];
            hr_ring_rows_read(data + HR_RING_HDR_SIZE, slot, pos, h.n_tok);
            hr_ring_rows_write(g_out + HR_RING_HDR_SIZE, slot, pos, h.n_tok);
            if (memcmp(g_out + HR_RING_HDR_SIZE, data + HR_RING_HDR_SIZE, rt) != 0)
                abort();
            if (hr_ring_unpack(g_hid, (size_t)h.n_tok * 64, data + HR_RING_HDR_SIZE + rt,
                               h.len - rt, h.dtype) != 0)
                abort();
        }
    }
    if (h.len <= sizeof g_out - HR_RING_HDR_SIZE) {
        memcpy(g_out + HR_RING_HDR_SIZE, data + HR_RING_HDR_SIZE, h.len);
        hr_ring_hdr_write(g_out, &h);
        hr_ring_hdr h2;
        if (hr_ring_hdr_read(g_out, HR_RING_HDR_SIZE + h.len, &h2, err) != 0 ||
            memcmp(&h, &h2, sizeof h) != 0)
            abort();
    }
    return 0;
}
