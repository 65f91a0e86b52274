/* le.h - little-endian field access for the wire formats (ring frames,
 * beacons): byte by byte, so alignment and host byte order never matter. */
#ifndef HR_RING_LE_H
#define HR_RING_LE_H

#include <stdint.h>

static inline void hr_put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void hr_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void hr_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t hr_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t hr_get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t hr_get64(const uint8_t *p) {
    return (uint64_t)hr_get32(p) | (uint64_t)hr_get32(p + 4) << 32;
}

#endif
