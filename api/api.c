/* api.c - the OpenAI-compatible request side of the head's HTTP API:
 * parsing and validating /v1/completions and /v1/chat/completions bodies,
 * OpenAI-style error bodies, API key checks and UTF-8 cleaning. Pure code,
 * no I/O, so it is unit-tested in isolation (tests/test_api.c). */
#include "api/http.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define HR_API_MAX_STOP_LEN 1024

int hr_api_fail(hr_api_err *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return HR_EINVAL;
}

#define BAD(e, param, ...) hr_api_fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

const char *hr_api_finish_reason(hr_finish f) { return f == HR_FINISH_LENGTH ? "length" : "stop"; }

/* ---- UTF-8 ---- */

/* Length of the valid UTF-8 character at s[0..n), 0 if invalid. */
static size_t hr_utf8_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

size_t hr_api_utf8_clean(const char *s, size_t n, char *out, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    if (cap == 0)
        return 0;
    for (size_t i = 0; i < n;) {
        size_t l = hr_utf8_char(u + i, n - i);
        const char *src = l ? s + i : "\xEF\xBF\xBD";
        size_t sl = l ? l : 3;
        if (u[i] == 0) { /* keep C strings whole */
            src = "\xEF\xBF\xBD";
            sl = 3;
        }
        if (o + sl >= cap)
            break;
        memcpy(out + o, src, sl);
        o += sl;
        i += l ? l : 1;
    }
    out[o] = 0;
    return o;
}

/* ---- auth ---- */

bool hr_api_auth_ok(const char *authorization, const char *key) {
    if (!key || !*key)
        return true;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    size_t kl = strlen(key), gl = strlen(given);
    unsigned diff = (unsigned)(kl != gl);
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* ---- errors ---- */

char *hr_api_error_json(const hr_api_err *e) {
    char msg[HR_ERR_LEN * 3 + 4];
    hr_api_utf8_clean(e->msg, strlen(e->msg), msg, sizeof msg);
    json_t *j = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type",
                          e->type ? e->type : "server_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* ---- parsing ---- */

static const char *hr_json_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* A number field in [lo, hi]; absent or null leaves *out. */
static int hr_get_num(json_t *o, const char *key, double lo, double hi, float *out, hr_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return BAD(e, key, "'%s' must be a number, not %s", key, hr_json_type(v));
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return BAD(e, key, "'%s' must be between %g and %g, not %g", key, lo, hi, d);
    *out = (float)d;
    return 0;
}

static int hr_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                      bool *given, hr_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && fabs(json_real_value(v)) < 9e15 &&
               json_real_value(v) == floor(json_real_value(v))) {
        x = (long long)json_real_value(v); /* 5.0 is an integer too */
    } else {
        return BAD(e, key, "'%s' must be an integer, not %s", key, hr_json_type(v));
    }
    if (x < lo || x > hi)
        return BAD(e, key, "'%s' must be between %lld and %lld, not %lld", key, lo, hi, x);
    *out = x;
    if (given)
        *given = true;
    return 0;
}

static int hr_get_bool(json_t *o, const char *key, bool *out, hr_api_err *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return BAD(e, key, "'%s' must be a boolean, not %s", key, hr_json_type(v));
    *out = json_is_true(v);
    return 0;
}

static int hr_parse_stop(hr_api_req *r, json_t *v, hr_api_err *e) {
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) > HR_API_MAX_STOP_LEN)
            return BAD(e, "stop", "a stop string is limited to %d bytes", HR_API_MAX_STOP_LEN);
        r->stop[r->n_stop++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return BAD(e, "stop", "'stop' must be a string or an array of strings, not %s",
                   hr_json_type(v));
    if (json_array_size(v) > HR_GEN_MAX_STOP)
        return BAD(e, "stop", "at most %d stop strings", HR_GEN_MAX_STOP);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s))
            return BAD(e, "stop", "'stop' must hold strings, not %s", hr_json_type(s));
        if (json_string_length(s) > HR_API_MAX_STOP_LEN)
            return BAD(e, "stop", "a stop string is limited to %d bytes", HR_API_MAX_STOP_LEN);
        r->stop[r->n_stop++] = json_string_value(s);
    }
    return 0;
}

/* content: a string, null (assistant), or an array of {"type":"text","text":..} parts,
 * which are joined into a new string stored back in the message. */
static int hr_parse_content(json_t *m, int i, const char **out, hr_api_err *e) {
    json_t *c = json_object_get(m, "content");
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!c || json_is_null(c)) {
        *out = "";
        return 0;
    }
    if (json_is_string(c)) {
        *out = json_string_value(c);
        return 0;
    }
    if (!json_is_array(c))
        return BAD(e, param, "'%s' must be a string or an array of text parts, not %s", param,
                   hr_json_type(c));
    size_t total = 0, k;
    json_t *p;
    json_array_foreach(c, k, p) {
        const char *type = NULL;
        json_t *t = json_object_get(p, "text");
        if (!json_is_object(p) || json_unpack(p, "{s:s}", "type", &type) != 0 ||
            strcmp(type, "text") != 0 || !json_is_string(t))
            return BAD(e, param,
                       "only text content parts are supported ({\"type\":\"text\","
                       "\"text\":\"...\"})");
        total += json_string_length(t);
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return hr_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t off = 0;
    json_array_foreach(c, k, p) {
        json_t *t = json_object_get(p, "text");
        memcpy(buf + off, json_string_value(t), json_string_length(t));
        off += json_string_length(t);
    }
    buf[off] = 0;
    json_t *s = json_stringn(buf, off);
    free(buf);
    if (!s)
        return BAD(e, param, "content is not valid text");
    json_object_set_new(m, "content", s);
    *out = json_string_value(s);
    return 0;
}

static int hr_parse_messages(hr_api_req *r, json_t *v, hr_api_err *e) {
    if (!v)
        return BAD(e, "messages", "'messages' is required");
    if (!json_is_array(v))
        return BAD(e, "messages", "'messages' must be an array, not %s", hr_json_type(v));
    if (json_array_size(v) == 0)
        return BAD(e, "messages", "'messages' must not be empty");
    if (json_array_size(v) > HR_API_MAX_MSGS)
        return BAD(e, "messages", "at most %d messages", HR_API_MAX_MSGS);
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", (int)i);
        if (!json_is_object(m))
            return BAD(e, param, "'%s' must be an object, not %s", param, hr_json_type(m));
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", (int)i);
        if (!json_is_string(role))
            return BAD(e, param, "'%s' must be a string", param);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") != 0 && strcmp(rs, "user") != 0 && strcmp(rs, "assistant") != 0 &&
            strcmp(rs, "developer") != 0)
            return BAD(e, param, "'%s' must be system, user or assistant", param);
        r->msgs[i].role = strcmp(rs, "developer") == 0 ? "system" : rs;
        int rc = hr_parse_content(m, (int)i, &r->msgs[i].content, e);
        if (rc)
            return rc;
        r->n_msgs = (int)i + 1;
    }
    return 0;
}

static int hr_parse_prompt(hr_api_req *r, json_t *v, hr_api_err *e) {
    if (!v)
        return BAD(e, "prompt", "'prompt' is required");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    else if (json_is_array(v))
        return BAD(e, "prompt", "'prompt' must be one string (batches are not supported)");
    if (!json_is_string(v))
        return BAD(e, "prompt", "'prompt' must be a string, not %s", hr_json_type(v));
    r->prompt = json_string_value(v);
    return 0;
}

/* v is absent, null, or an empty string / array / object. */
static bool hr_json_empty(const json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

/* The rest of OpenAI's parameters that would change the answer: refused
 * (400 naming the parameter) unless they ask for what we do anyway. */
static int hr_parse_unsupported(json_t *j, hr_api_err *e) {
    json_t *rf = json_object_get(j, "response_format");
    if (!hr_json_empty(rf)) {
        json_t *t = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return BAD(e, "response_format",
                       "'response_format' other than {\"type\":\"text\"} is not supported");
    }
    json_t *tc = json_object_get(j, "tool_choice");
    if (!hr_json_empty(tc) && !(json_is_string(tc) && (strcmp(json_string_value(tc), "none") == 0 ||
                                                       strcmp(json_string_value(tc), "auto") == 0)))
        return BAD(e, "tool_choice", "'tool_choice' is not supported (there are no tools)");
    json_t *fc = json_object_get(j, "function_call");
    if (!hr_json_empty(fc) && !(json_is_string(fc) && (strcmp(json_string_value(fc), "none") == 0 ||
                                                       strcmp(json_string_value(fc), "auto") == 0)))
        return BAD(e, "function_call", "'function_call' is not supported");
    json_t *tl = json_object_get(j, "top_logprobs");
    if (tl && !json_is_null(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
        return BAD(e, "top_logprobs", "'top_logprobs' is not supported");
    json_t *bo = json_object_get(j, "best_of");
    if (bo && !json_is_null(bo) && !(json_is_integer(bo) && json_integer_value(bo) == 1))
        return BAD(e, "best_of", "'best_of' other than 1 is not supported");
    json_t *mod = json_object_get(j, "modalities");
    if (!hr_json_empty(mod) && !(json_is_array(mod) && json_array_size(mod) == 1 &&
                                 json_is_string(json_array_get(mod, 0)) &&
                                 strcmp(json_string_value(json_array_get(mod, 0)), "text") == 0))
        return BAD(e, "modalities", "only the \"text\" modality is supported");
    /* present and not empty: refused */
    static const char *const unsupported[] = {"functions", "logit_bias", "suffix", "audio",
                                              "prediction"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!hr_json_empty(json_object_get(j, unsupported[i])))
            return BAD(e, unsupported[i], "'%s' is not supported", unsupported[i]);
    return 0;
}

int hr_api_parse(hr_api_req *r, hr_api_kind kind, const char *body, size_t len,
                 int max_tokens_limit, hr_api_err *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->sp = hr_sampler_params_default();
    r->max_tokens = max_tokens_limit;
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return BAD(e, NULL, "malformed JSON at line %d, column %d: %s", je.line, je.column,
                   je.text);
    r->json_ = j;
    if (!json_is_object(j))
        return BAD(e, NULL, "the request body must be a JSON object, not %s", hr_json_type(j));
    int rc;
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return BAD(e, "model", "'model' must be a string, not %s", hr_json_type(model));
    r->model = json_is_string(model) ? json_string_value(model) : NULL;
    if (kind == HR_API_CHAT)
        rc = hr_parse_messages(r, json_object_get(j, "messages"), e);
    else
        rc = hr_parse_prompt(r, json_object_get(j, "prompt"), e);
    if (rc)
        return rc;
    long long x = 0;
    bool given = false;
    if ((rc = hr_get_bool(j, "stream", &r->stream, e)))
        return rc;
    json_t *so = json_object_get(j, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return BAD(e, "stream_options", "'stream_options' must be an object");
        if ((rc = hr_get_bool(so, "include_usage", &r->include_usage, e)))
            return rc;
    }
    const char *mt_key =
        json_object_get(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    /* more than fits is no error: the reply stops at the limit (the
     * context) and finishes with "length", as llama.cpp's server does */
    if ((rc = hr_get_int(j, mt_key, 1, INT64_MAX, &x, &given, e)))
        return rc;
    if (given && x < max_tokens_limit)
        r->max_tokens = (int)x;
    given = false;
    if ((rc = hr_get_num(j, "temperature", 0, 10, &r->sp.temperature, e)) ||
        (rc = hr_get_num(j, "top_p", 0, 1, &r->sp.top_p, e)) ||
        (rc = hr_get_num(j, "min_p", 0, 1, &r->sp.min_p, e)) ||
        (rc = hr_get_num(j, "presence_penalty", -2, 2, &r->sp.presence_penalty, e)) ||
        (rc = hr_get_num(j, "frequency_penalty", -2, 2, &r->sp.frequency_penalty, e)) ||
        (rc = hr_get_num(j, "repeat_penalty", 0.01, 10, &r->sp.repeat_penalty, e)))
        return rc;
    if ((rc = hr_get_int(j, "top_k", 0, 1000000, &x, &given, e)))
        return rc;
    if (given)
        r->sp.top_k = (int)x;
    given = false;
    if ((rc = hr_get_int(j, "repeat_last_n", 0, 1 << 20, &x, &given, e)))
        return rc;
    if (given)
        r->sp.penalty_last_n = (int)x;
    if ((rc = hr_get_int(j, "seed", INT64_MIN, INT64_MAX, &x, &r->seed_given, e)))
        return rc;
    r->sp.seed = r->seed_given ? (uint64_t)x : (uint64_t)time(NULL);
    given = false;
    if ((rc = hr_get_int(j, "n", 1, 1, &x, &given, e)))
        return rc;
    if ((rc = hr_parse_stop(r, json_object_get(j, "stop"), e)))
        return rc;
    /* features we do not have: refuse rather than silently ignore */
    json_t *lp = json_object_get(j, "logprobs");
    if (lp && !json_is_null(lp) && !json_is_false(lp))
        return BAD(e, "logprobs", "'logprobs' is not supported");
    bool echo = false;
    if ((rc = hr_get_bool(j, "echo", &echo, e)))
        return rc;
    if (echo)
        return BAD(e, "echo", "'echo' is not supported");
    json_t *tools = json_object_get(j, "tools");
    if (tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0))
        return BAD(e, "tools", "'tools' is not supported");
    return hr_parse_unsupported(j, e);
}

void hr_api_req_free(hr_api_req *r) {
    if (!r)
        return;
    json_decref((json_t *)r->json_);
    r->json_ = NULL;
}
