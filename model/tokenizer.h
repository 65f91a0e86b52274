/* tokenizer.h - text <-> token ids, driven entirely by GGUF metadata.
 *
 * Supports tokenizer.ggml.model "llama" (SentencePiece-style with byte
 * fallback <0xNN>) and "gpt2" (byte-level BPE with merges and a
 * pre-tokenizer chosen by tokenizer.ggml.pre, implemented with PCRE2).
 * Unknown models or pre-tokenizers are refused with a clear error.
 *
 * A hr_tokenizer copies what it needs from the hr_gguf at create time; the
 * hr_gguf may be closed afterwards. After create, the tokenizer is
 * immutable: encode/decode are thread-safe. hr_detok (streaming decoder) is
 * per-stream state, not thread-safe. */
#ifndef HR_MODEL_TOKENIZER_H
#define HR_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "mmap/gguf.h"

typedef struct hr_tokenizer hr_tokenizer;

/* tokenizer.ggml.token_type values. */
typedef enum {
    HR_TOKEN_UNDEFINED = 0,
    HR_TOKEN_NORMAL = 1,
    HR_TOKEN_UNKNOWN = 2,
    HR_TOKEN_CONTROL = 3,
    HR_TOKEN_USER_DEFINED = 4,
    HR_TOKEN_UNUSED = 5,
    HR_TOKEN_BYTE = 6,
} hr_token_type;

int hr_tokenizer_create(hr_tokenizer **out, const hr_gguf *g, char err[HR_ERR_LEN]);
void hr_tokenizer_destroy(hr_tokenizer *t);

int32_t hr_tokenizer_n_vocab(const hr_tokenizer *t);
int32_t hr_tokenizer_bos(const hr_tokenizer *t);  /* -1 if none */
int32_t hr_tokenizer_eos(const hr_tokenizer *t);  /* -1 if none */
int32_t hr_tokenizer_eot(const hr_tokenizer *t);  /* -1 if none */
bool hr_tokenizer_add_bos(const hr_tokenizer *t); /* tokenizer.ggml.add_bos_token */
int32_t hr_tokenizer_unk(const hr_tokenizer *t);  /* -1 if none */
/* True for SPM vocabularies that prepend a space (tokenizer.ggml.add_space_prefix). */
bool hr_tokenizer_add_space_prefix(const hr_tokenizer *t);
/* hr_token_type of id (control tokens detected by text, e.g. <|im_end|>,
 * report HR_TOKEN_CONTROL), or HR_EINVAL for a bad id. */
int hr_tokenizer_token_type(const hr_tokenizer *t, int32_t id);
/* True for tokens that end generation (EOS, EOT, and other end-of-generation
 * control tokens such as <|im_end|>, <|eot_id|>). */
bool hr_tokenizer_is_eog(const hr_tokenizer *t, int32_t id);

/* Encodes len bytes of text. add_bos prepends BOS (if the vocab has one);
 * parse_special recognises control tokens written in the text (e.g.
 * "<|im_start|>"); otherwise they are tokenized as plain text. Writes up to
 * cap ids to ids and the full count to *n (which may exceed cap: call again
 * with a larger buffer). Returns 0 or a negative HR_E* code. */
int hr_tokenizer_encode(const hr_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t *ids, int cap, int *n);

/* Bytes a token stands for when detokenized (SPM: '▁' -> ' ', <0xNN> ->
 * that byte; BPE: byte-level unicode mapped back to bytes). Control tokens
 * give "" unless show_special. Returns the byte count (may exceed cap; the
 * output is truncated then, and NUL-terminated only when it fits) or a
 * negative code for an invalid id. */
int hr_tokenizer_piece(const hr_tokenizer *t, int32_t id, bool show_special, char *buf, size_t cap);
/* Concatenates the pieces of n ids into buf (cap bytes; NUL-terminated
 * when it fits). strip_leading_space drops the space SPM put in front of
 * the text (only on vocabularies with add_space_prefix). Invalid UTF-8 is
 * passed through as is. Returns the full byte count (may exceed cap) or a
 * negative code (bad id, HR_ERANGE past INT_MAX). */
int hr_tokenizer_decode(const hr_tokenizer *t, const int32_t *ids, int n, bool show_special,
                        bool strip_leading_space, char *buf, size_t cap);
/* The token's raw vocabulary string (NUL-terminated), NULL for bad ids. */
const char *hr_tokenizer_token_text(const hr_tokenizer *t, int32_t id);
/* Token id for an exact vocabulary string, -1 if absent. */
int32_t hr_tokenizer_find(const hr_tokenizer *t, const char *text);

/* Streaming detokenizer: feed ids one at a time; it emits only complete
 * UTF-8 sequences, holding back a multi-byte character split across
 * tokens. SPM's leading space of the first token is stripped when
 * strip_leading_space is set (as llama.cpp does after BOS). */
typedef struct {
    char pending[8];
    int n_pending;
    bool first;
    bool strip_leading_space;
} hr_detok;
void hr_detok_init(hr_detok *d, bool strip_leading_space);
/* Appends the printable bytes for id to out (cap bytes, not
 * NUL-terminated); invalid bytes become U+FFFD. Returns bytes written
 * (>= 0) or a negative code: HR_EINVAL for a bad id, HR_ERANGE when the
 * output does not fit (nothing is consumed then; 3 * (piece length + 3)
 * bytes always suffice). */
int hr_detok_push(hr_detok *d, const hr_tokenizer *t, int32_t id, char *out, size_t cap);
/* Flushes held bytes: an incomplete character becomes one U+FFFD (3
 * bytes; HR_ERANGE if cap < 3). Returns bytes written. */
int hr_detok_flush(hr_detok *d, char *out, size_t cap);

#endif
