/* tokenizer-impl.h - internals shared by the tokenizer's .c files
 * (tokenizer.c: vocabulary loading, special tokens, decoding;
 * tokenizer_spm.c: SentencePiece-style merging; tokenizer_bpe.c: regex
 * pre-tokenizer and byte-level BPE; unicode.c: UTF-8 and the GPT-2 byte
 * alphabet). Only those files and tests/test_tokenizer.c include this. */
#ifndef HR_MODEL_TOKENIZER_IMPL_H
#define HR_MODEL_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Per-token flags. */
enum {
    HR_TOKF_LSTRIP = 1, /* special token eats whitespace on its left */
    HR_TOKF_RSTRIP = 2, /* ... and on its right */
    HR_TOKF_EOG = 4,    /* ends generation */
};

typedef enum { HR_TOK_SPM, HR_TOK_BPE } hr_tok_kind;

/* BPE pre-tokenizers (tokenizer.ggml.pre). */
typedef enum {
    HR_PRE_DEFAULT,
    HR_PRE_GPT2,
    HR_PRE_LLAMA3,
    HR_PRE_QWEN2,
    HR_PRE_DEEPSEEK_LLM,
    HR_PRE_FALCON,
    HR_PRE_GPT4O, /* o200k (gpt-oss, GPT-4o) */
} hr_tok_pre;

#define HR_TOK_MAX_REGEX 8

typedef struct {
    uint32_t off;  /* token text at hr_tokenizer.text + off, NUL-terminated */
    uint32_t len;  /* bytes, without the NUL */
    float score;   /* SPM merge priority (higher merges first) */
    uint8_t type;  /* hr_token_type */
    uint8_t flags; /* HR_TOKF_* */
    uint8_t byte;  /* SPM byte tokens: the byte <0xNN> stands for */
} hr_tok_entry;

/* One merge rule "left right" of a BPE vocabulary, keyed by token ids. */
typedef struct {
    int32_t left, right; /* -1 marks an empty slot */
    int32_t rank;        /* position in tokenizer.ggml.merges */
    int32_t result;      /* id of the merged text, -1 if not in the vocab */
} hr_tok_merge;

struct hr_tokenizer {
    hr_tok_kind kind;
    hr_tok_pre pre;
    int32_t n_vocab;
    hr_tok_entry *tok; /* [n_vocab] */
    char *text;        /* all token strings, NUL-terminated, back to back */

    int32_t *tok_hash; /* open addressing: token id or -1; [tok_hash_mask + 1] */
    uint32_t tok_hash_mask;

    hr_tok_merge *merges; /* open addressing on (left, right); [merge_mask + 1] */
    uint32_t merge_mask;
    int32_t n_merges;

    /* SPM: id of "<0xNN>"; BPE: id of the byte-level character for byte b.
     * -1 where the vocabulary lacks it. */
    int32_t byte_tok[256];

    /* Special tokens (control, user-defined, unknown) are found in text by
     * trying, at each byte c, the token lengths in special_lens[k][c] (bit
     * L set: some special token of length L < 64 starts with c; bit 0: one
     * longer than 63 does, see long_lens) and looking the candidate up in
     * tok_hash. k = 0: user-defined tokens only; k = 1: all of them. */
    uint64_t special_lens[2][256];
    uint32_t *long_lens; /* distinct lengths > 63 of special tokens */
    int32_t n_long_lens;
    int32_t n_special;

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;

    pcre2_code *re[HR_TOK_MAX_REGEX];
    int n_re;
};

/* ---- growable id list used while encoding ---- */
typedef struct {
    int32_t *v;
    size_t n, cap;
} hr_tok_ids;

/* Appends id; returns 0 or HR_ENOMEM. */
int hr_tok_ids_push(hr_tok_ids *ids, int32_t id);

/* Token id for the exact byte string s[0..len), -1 if absent. */
int32_t hr_tok_lookup(const hr_tokenizer *t, const char *s, size_t len);

/* ---- SPM (tokenizer_spm.c) ---- */
/* Encodes one raw-text fragment: optional leading space, ' ' -> U+2581,
 * then highest-score bigram merging with byte fallback. */
int hr_tok_spm_encode(const hr_tokenizer *t, const char *text, size_t len, bool space_prefix,
                      hr_tok_ids *out);

/* ---- BPE (tokenizer_bpe.c) ---- */
/* Maps a tokenizer.ggml.pre name to a pre-tokenizer; HR_EUNSUPPORTED if unknown. */
int hr_tok_bpe_pre_from_name(const char *name, hr_tok_pre *out);
/* Compiles the pre-tokenizer regexes for t->pre into t->re. */
int hr_tok_bpe_compile(hr_tokenizer *t, char err[HR_ERR_LEN]);
void hr_tok_bpe_free(hr_tokenizer *t);
/* Parses tokenizer.ggml.merges strings into t->merges. */
int hr_tok_bpe_load_merges(hr_tokenizer *t, const hr_gguf *g, char err[HR_ERR_LEN]);
/* Encodes one raw-text fragment: regex pre-tokenization, byte-level
 * alphabet, merges by rank. */
int hr_tok_bpe_encode(const hr_tokenizer *t, const char *text, size_t len, hr_tok_ids *out);

/* ---- UTF-8 and the byte-level alphabet (unicode.c) ---- */
/* Byte length implied by a UTF-8 lead byte (1 for stray continuation
 * bytes, 4 for 0xF0..0xFF), as llama.cpp's SPM splitter uses it. */
int hr_utf8_len(unsigned char lead);
/* Decodes the code point at s[*pos] (n bytes in all) and advances *pos.
 * Malformed or truncated sequences give U+FFFD and advance one byte;
 * surrogates and values past U+10FFFF give U+FFFD. */
uint32_t hr_utf8_next(const char *s, size_t n, size_t *pos);
/* Writes cpt (<= U+10FFFF) as UTF-8 to out[4]; returns the byte count. */
int hr_utf8_put(uint32_t cpt, char *out);
/* Strict check: shortest forms, no surrogates, <= U+10FFFF. */
bool hr_utf8_valid(const char *s, size_t n);
/* Length of the valid UTF-8 sequence at s[0..n): 1..4; 0 when the bytes
 * are a valid but incomplete prefix; -1 when invalid. */
int hr_utf8_seq(const unsigned char *s, size_t n);
/* GPT-2 byte-level alphabet: byte -> code point, and back (-1 if cpt is
 * not in the alphabet). */
uint32_t hr_bytelevel_cpt(unsigned char b);
int hr_bytelevel_byte(uint32_t cpt);

#endif
