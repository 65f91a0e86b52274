/* generate.h - the text side of a generation: sampled ids in, printable
 * text out, with stop strings, a token budget and the finish reason.
 *
 * A hr_gen turns each sampled id into bytes (a streaming detokenizer that
 * never splits a UTF-8 character), watches for stop strings even when one
 * spans several tokens, and holds back text that could still turn out to
 * be the start of a stop string until the following tokens decide. What it
 * releases is final: the caller streams it (stdout, an HTTP chunk) and
 * hr_gen_text() is the whole reply, the stop string excluded.
 *
 *   hr_gen_begin(g);
 *   for (;;) {
 *       id = sample(...);
 *       hr_gen_push(g, id, &fin);
 *       emit(hr_gen_delta(g, &n), n);
 *       if (fin != HR_FINISH_NONE) break;
 *       evaluate id ...
 *   }
 *
 * It does no I/O and knows nothing of the model, so the CLI and an HTTP
 * server share it. Finish reasons map to OpenAI's finish_reason as
 * "stop" (HR_FINISH_STOP and HR_FINISH_EOS) and "length".
 *
 * A hr_gen is used by one thread at a time; it borrows the tokenizer
 * (which must outlive it). The text buffer is reserved at create and only
 * grows geometrically for replies longer than that. */
#ifndef HR_MODEL_GENERATE_H
#define HR_MODEL_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/tokenizer.h"

typedef enum {
    HR_FINISH_NONE = 0, /* still going */
    HR_FINISH_STOP,     /* a stop string matched */
    HR_FINISH_LENGTH,   /* max_tokens reached (or the caller's context ran out) */
    HR_FINISH_EOS,      /* the model ended the turn (EOS / EOT / other EOG token) */
} hr_finish;

/* "stop", "length", "eos", or "" for HR_FINISH_NONE. */
const char *hr_finish_name(hr_finish f);

#define HR_GEN_MAX_STOP 16

typedef struct {
    const char *const *stop;  /* stop strings (copied at create); empty ones are ignored */
    int n_stop;               /* at most HR_GEN_MAX_STOP */
    int max_tokens;           /* <= 0 = no limit */
    bool strip_leading_space; /* drop SPM's space before the first word (see hr_detok) */
    /* harmony vocabularies (gpt-oss: <|channel|>, <|message|>, <|start|>,
     * <|end|>): the reply is the text of the "final" channel (and of a
     * message that names none); the analysis and commentary channels and
     * the message headers are dropped unless all_channels is set */
    bool all_channels;
} hr_gen_params;

hr_gen_params hr_gen_params_default(void);

typedef struct hr_gen hr_gen;

/* tok may be NULL for a text-only tracker (hr_gen_push_text). Returns 0,
 * HR_EINVAL (too many stop strings) or HR_ENOMEM. */
int hr_gen_create(hr_gen **out, const hr_tokenizer *tok, const hr_gen_params *p,
                  char err[HR_ERR_LEN]);
void hr_gen_destroy(hr_gen *g); /* NULL is a no-op */

/* Starts a new reply: clears the text, token count and finish reason. */
void hr_gen_begin(hr_gen *g);

/* Feeds one sampled id. An EOG id finishes with HR_FINISH_EOS (its text is
 * not part of the reply); otherwise its text goes through the stop-string
 * check, and reaching max_tokens finishes with HR_FINISH_LENGTH (a stop
 * string matched by the same token wins). On any finish, held-back text
 * that matched no stop string is released. *finish (may be NULL) gets the
 * state. After a finish, further pushes are ignored. Returns 0 or
 * HR_EINVAL (bad id) / HR_ENOMEM. */
int hr_gen_push(hr_gen *g, int32_t id, hr_finish *finish);

/* Same for raw text (counts as one token toward max_tokens). */
int hr_gen_push_text(hr_gen *g, const char *text, size_t len, hr_finish *finish);

/* Ends the reply from outside (e.g. the context is full): releases
 * held-back text and sets the finish reason if none is set yet. */
void hr_gen_finish(hr_gen *g, hr_finish reason);

/* Text released by the last push / finish (not NUL-terminated; valid until
 * the next call on g). Calling it consumes the delta. */
const char *hr_gen_delta(hr_gen *g, size_t *len);

/* The reply released so far (NUL-terminated), without the stop string. */
const char *hr_gen_text(const hr_gen *g, size_t *len);

hr_finish hr_gen_finish_reason(const hr_gen *g);
int hr_gen_n_tokens(const hr_gen *g); /* ids pushed since hr_gen_begin, EOG included */
/* Index of the stop string that matched, -1 if none. */
int hr_gen_stop_index(const hr_gen *g);

#endif
