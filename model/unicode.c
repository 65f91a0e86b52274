/* unicode.c - the UTF-8 helpers the tokenizer needs, and the GPT-2
 * byte-level alphabet (every byte maps to a printable code point so that
 * byte-level BPE vocabularies are plain UTF-8 strings). */
#include "model/tokenizer-impl.h"

int hr_utf8_len(unsigned char lead) {
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[lead >> 4];
}

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t hr_utf8_next(const char *str, size_t n, size_t *pos) {
    const unsigned char *s = (const unsigned char *)str + *pos;
    size_t left = n - *pos;
    uint32_t cpt;
    size_t k;

    /* Lenient like llama.cpp: overlong forms decode to their value. */
    if (s[0] < 0x80) {
        *pos += 1;
        return s[0];
    }
    if ((s[0] & 0xE0) == 0xC0) {
        k = 2;
        cpt = s[0] & 0x1Fu;
    } else if ((s[0] & 0xF0) == 0xE0) {
        k = 3;
        cpt = s[0] & 0x0Fu;
    } else if ((s[0] & 0xF8) == 0xF0) {
        k = 4;
        cpt = s[0] & 0x07u;
    } else {
        *pos += 1;
        return 0xFFFD;
    }
    if (left < k) {
        *pos += 1;
        return 0xFFFD;
    }
    for (size_t i = 1; i < k; i++) {
        if (!is_cont(s[i])) {
            *pos += 1;
            return 0xFFFD;
        }
        cpt = (cpt << 6) | (s[i] & 0x3Fu);
    }
    *pos += k;
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF)
        return 0xFFFD;
    return cpt;
}

int hr_utf8_put(uint32_t cpt, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cpt < 0x80) {
        o[0] = (unsigned char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cpt >> 6));
        o[1] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cpt >> 12));
        o[1] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cpt >> 18));
    o[1] = (unsigned char)(0x80 | ((cpt >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cpt & 0x3F));
    return 4;
}

int hr_utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int k;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        k = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        k = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        k = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < k; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i)
            return -1;
    }
    return k;
}

bool hr_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        int k = hr_utf8_seq(s + i, n - i);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

/* Bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The
 * other 68 bytes map, in order, to U+0100.. U+0143. */
uint32_t hr_bytelevel_cpt(unsigned char b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
        return b;
    if (b <= 0x20)
        return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100u + 33u + (uint32_t)(b - 0x7F);
    return 0x100u + 67u; /* 0xAD */
}

int hr_bytelevel_byte(uint32_t cpt) {
    if ((cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) ||
        (cpt >= 0xAE && cpt <= 0xFF))
        return (int)cpt;
    if (cpt < 0x100 || cpt > 0x143)
        return -1;
    uint32_t k = cpt - 0x100;
    if (k <= 32)
        return (int)k;
    if (k <= 66)
        return (int)(0x7F + (k - 33));
    return 0xAD;
}
