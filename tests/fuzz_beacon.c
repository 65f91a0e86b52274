/* fuzz_beacon.c - libFuzzer target for what discovery, pairing and model
 * fetching parse from the network: every input is a UDP datagram for the
 * beacon parser (a parsed beacon must encode back to the same bytes) and
 * for the knock parser (a parsed knock holds a valid key and a clean name,
 * and encodes to a datagram of the same size that parses to the same), and
 * the payload of a FETCH and of a CHUNK frame for their decoders (a decoded
 * CHUNK's data must lie inside the payload and the model it names).
 * Built with -DHR_FUZZ=ON (clang) or deploy/fuzz.sh. */
#include "common/error.h"
#include "common/log.h"
#include "ring/beacon.h"
#include "ring/knock.h"
#include "ring/msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    hr_log_set_level(HR_LOG_LEVEL_NONE);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[HR_ERR_LEN];
    hr_beacon b;
    if (hr_beacon_parse(data, size, &b, err) == 0) {
        uint8_t out[HR_BEACON_MAX];
        int n = hr_beacon_encode(&b, out, sizeof out);
        if (n < 0 || (size_t)n != size || memcmp(out, data, size) != 0)
            abort(); /* accepted what it would not write */
    }
    hr_knock k, k2;
    if (hr_knock_parse(data, size, &k, err) == 0) {
        if (!hr_ring_key_valid(k.key) || k.name[0] == '-' ||
            strspn(k.name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
                strlen(k.name))
            abort(); /* a key or name that could not be logged as it is */
        uint8_t out[HR_KNOCK_MAX];
        int n = hr_knock_encode(&k, out, sizeof out);
        if (n < 0 || (size_t)n != size || hr_knock_parse(out, (size_t)n, &k2, err) != 0 ||
            memcmp(&k, &k2, sizeof k) != 0)
            abort();
    }
    if (size > UINT32_MAX)
        return 0;
    hr_ring_hdr h = {.type = HR_RING_FETCH, .pos = -1, .len = (uint32_t)size};
    hr_msg_fetch f;
    if (hr_msg_fetch_decode(&h, data, &f, err) == 0 &&
        (size != HR_MSG_FETCH_SIZE || f.len > HR_MSG_CHUNK_MAX))
        abort();
    h.type = HR_RING_CHUNK;
    hr_msg_chunk c;
    if (hr_msg_chunk_decode(&h, data, &c, err) == 0) {
        if (c.data != data + HR_MSG_CHUNK_HDR || HR_MSG_CHUNK_HDR + (size_t)c.len != size ||
            c.off + c.len > c.model_size || c.off + c.len < c.off)
            abort();
        volatile uint8_t sink = 0;
        for (uint32_t i = 0; i < c.len; i++)
            sink ^= c.data[i];
        (void)sink;
    }
    return 0;
}
