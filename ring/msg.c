/* msg.c - the control-plane message table and the typed encode / decode of
 * every control payload (JSON through jansson, TOKEN's binary layout). */
#include "ring/msg.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HR_MSG_SMALL 1024u
#define HR_MSG_MID 4096u

/* clang-format off */
static const hr_msg_info hr_msg_table[HR_RING_TYPE_END] = {
    /*                     name          direction                 payload        max bytes         flags */
    [HR_RING_JOIN]       = {"JOIN",       HR_MSG_W2H,              HR_MSG_JSON,   HR_RING_MAX_CTRL, 0},
    [HR_RING_WELCOME]    = {"WELCOME",    HR_MSG_H2W,              HR_MSG_NONE,   0,                0},
    [HR_RING_REJECT]     = {"REJECT",     HR_MSG_H2W | HR_MSG_H2C, HR_MSG_JSON,   2048,             0},
    [HR_RING_PLAN]       = {"PLAN",       HR_MSG_H2W,              HR_MSG_JSON,   HR_MSG_MID,       0},
    [HR_RING_READY]      = {"READY",      HR_MSG_W2H,              HR_MSG_JSON,   2048,             HR_MSG_F_KNOWN},
    [HR_RING_START]      = {"START",      HR_MSG_H2W,              HR_MSG_NONE,   0,                0},
    [HR_RING_CANCEL]     = {"CANCEL",     HR_MSG_H2W | HR_MSG_C2H, HR_MSG_NONE,   0,                0},
    [HR_RING_HEARTBEAT]  = {"HEARTBEAT",  HR_MSG_W2H | HR_MSG_H2W, HR_MSG_JSON,   HR_MSG_SMALL,     HR_MSG_F_KNOWN | HR_MSG_F_EMPTY_OK},
    [HR_RING_LEAVE]      = {"LEAVE",      HR_MSG_W2H | HR_MSG_H2W, HR_MSG_NONE,   0,                HR_MSG_F_KNOWN},
    [HR_RING_INVITE]     = {"INVITE",     HR_MSG_H2W,              HR_MSG_JSON,   HR_MSG_SMALL,     0},
    [HR_RING_PROMPT]     = {"PROMPT",     HR_MSG_C2H,              HR_MSG_JSON,   HR_RING_MAX_CTRL, 0},
    [HR_RING_TOKEN]      = {"TOKEN",      HR_MSG_H2C,              HR_MSG_BINARY, 4 + HR_MSG_MAX_PIECE, 0},
    [HR_RING_DONE]       = {"DONE",       HR_MSG_H2C,              HR_MSG_JSON,   HR_MSG_SMALL,     0},
    [HR_RING_ERROR]      = {"ERROR",      HR_MSG_H2C,              HR_MSG_TEXT,   HR_MSG_MID,       0},
    [HR_RING_STATUS_REQ] = {"STATUS_REQ", HR_MSG_C2H,              HR_MSG_NONE,   0,                0},
    [HR_RING_STATUS]     = {"STATUS",     HR_MSG_H2C,              HR_MSG_JSON,   HR_RING_MAX_CTRL, 0},
    [HR_RING_PAIR]       = {"PAIR",       HR_MSG_W2H | HR_MSG_H2W, HR_MSG_JSON,   HR_MSG_SMALL,     HR_MSG_F_PAIRING | HR_MSG_F_EMPTY_OK},
    [HR_RING_PROBE]      = {"PROBE",      HR_MSG_H2W,              HR_MSG_JSON,   HR_MSG_SMALL,     0},
    [HR_RING_LINK]       = {"LINK",       HR_MSG_W2H,              HR_MSG_JSON,   HR_MSG_SMALL,     HR_MSG_F_KNOWN},
    [HR_RING_BATCH]      = {"BATCH",      HR_MSG_PEER,             HR_MSG_BINARY, HR_RING_MAX_FRAME - HR_RING_HDR_SIZE, 0},
    [HR_RING_FETCH]      = {"FETCH",      HR_MSG_W2H,              HR_MSG_BINARY, HR_MSG_FETCH_SIZE, 0},
    [HR_RING_CHUNK]      = {"CHUNK",      HR_MSG_H2W,              HR_MSG_BINARY, HR_MSG_CHUNK_HDR + HR_MSG_CHUNK_MAX, 0},
};
/* clang-format on */

const hr_msg_info *hr_msg_info_of(int type) {
    if (type <= 0 || type >= HR_RING_TYPE_END || !hr_msg_table[type].name)
        return NULL;
    return &hr_msg_table[type];
}

/* ---- encoded messages ---- */

hr_msg hr_msg_empty(int type, uint64_t req_id, uint32_t plan_id) {
    return (hr_msg){.h = {.type = (uint8_t)type, .pos = -1, .req_id = req_id, .plan_id = plan_id}};
}

void hr_msg_clear(hr_msg *m) {
    if (!m)
        return;
    free(m->data);
    m->data = NULL;
    m->h.len = 0;
}

int hr_msg_send(void *sock, const void *id, size_t id_len, hr_msg *m, char err[HR_ERR_LEN]) {
    int rc = hr_ring_send_msg(sock, id, id_len, &m->h, m->data, err);
    hr_msg_clear(m);
    return rc;
}

/* Takes a payload of len bytes for type into out, checked against the row. */
static int hr_msg_take(hr_msg *out, int type, char *data, size_t len, char err[HR_ERR_LEN]) {
    *out = hr_msg_empty(type, 0, 0);
    if (!data)
        return hr_seterr(err, HR_ENOMEM, "out of memory encoding %s", hr_ring_type_name(type));
    if (len > hr_msg_table[type].max_len) {
        free(data);
        return hr_seterr(err, HR_ERANGE, "%s payload of %zu bytes exceeds the %u-byte limit",
                         hr_ring_type_name(type), len, hr_msg_table[type].max_len);
    }
    out->data = data;
    out->h.len = (uint32_t)len;
    return 0;
}

/* Dumps j (consumed) as the payload of type. */
static int hr_msg_take_json(hr_msg *out, int type, json_t *j, char err[HR_ERR_LEN]) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return hr_msg_take(out, type, s, s ? strlen(s) : 0, err);
}

/* Checks h is a `type` frame within its row's limit. */
static int hr_msg_check(const hr_ring_hdr *h, int type, char err[HR_ERR_LEN]) {
    if (h->type != type)
        return hr_seterr(err, HR_EFORMAT, "%s frame where %s was expected",
                         hr_ring_type_name(h->type), hr_ring_type_name(type));
    if (h->len > hr_msg_table[type].max_len)
        return hr_seterr(err, HR_EFORMAT, "%s payload of %u bytes exceeds the %u-byte limit",
                         hr_ring_type_name(type), h->len, hr_msg_table[type].max_len);
    return 0;
}

/* Parses a JSON object payload of a `type` frame. */
static json_t *hr_msg_load(const hr_ring_hdr *h, const void *pl, int type, char err[HR_ERR_LEN]) {
    if (hr_msg_check(h, type, err))
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(pl, h->len, 0, &je);
    if (!j) {
        hr_seterr(err, HR_EFORMAT, "malformed %s: not JSON: %s", hr_ring_type_name(type), je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        hr_seterr(err, HR_EFORMAT, "malformed %s: not a JSON object", hr_ring_type_name(type));
        return NULL;
    }
    return j;
}

/* Copies the string member key of o into out[cap]; required or "" when
 * absent; refuses non-strings and strings that do not fit. */
static int hr_msg_str(const json_t *o, const char *key, bool required, char *out, size_t cap,
                      int type, char err[HR_ERR_LEN]) {
    json_t *v = json_object_get(o, key);
    out[0] = 0;
    if (!v && !required)
        return 0;
    if (!json_is_string(v))
        return hr_seterr(err, HR_EFORMAT, "%s: '%s' %s", hr_ring_type_name(type), key,
                         v ? "is not a string" : "is missing");
    size_t n = json_string_length(v);
    if (n >= cap || memchr(json_string_value(v), 0, n))
        return hr_seterr(err, HR_EFORMAT, "%s: '%s' of %zu bytes (at most %zu, no NUL)",
                         hr_ring_type_name(type), key, n, cap - 1);
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

/* Copies text into out[cap], truncating. */
static void hr_msg_copy(char *out, size_t cap, const char *text) {
    snprintf(out, cap, "%s", text ? text : "");
}

static int hr_msg_unpack_err(json_t *j, const json_error_t *je, int type, char err[HR_ERR_LEN]) {
    json_decref(j);
    return hr_seterr(err, HR_EFORMAT, "malformed %s: %s", hr_ring_type_name(type), je->text);
}

/* ---- JOIN ---- */

json_t *hr_msg_join_info_json(const hr_msg_join *m) {
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)m->model_hash);
    json_t *j = json_pack(
        "{s:i,s:s,s:s,s:s,s:I,s:s,s:i,s:i,s:s,s:s,s:i,s:i,s:I,s:I,s:I,s:f,s:f}", "version",
        m->version, "name", m->name, "ctrl", m->ctrl, "data", m->data, "model_size",
        (json_int_t)m->model_size, "model_hash", hash, "n_layer", m->n_layer, "threads", m->threads,
        "os", m->os, "kernel", m->kernel, "cores", m->cores, "numa", m->numa, "mem_total",
        (json_int_t)m->mem_total, "mem_avail", (json_int_t)m->mem_avail, "cg_limit",
        (json_int_t)m->cg_limit, "disk_mbs", m->disk_mbs, "disk_mmap_mbs", m->disk_mmap_mbs);
    if (j && m->pubkey[0])
        json_object_set_new(j, "pubkey", json_string(m->pubkey));
    if (j && m->echo[0])
        json_object_set_new(j, "echo", json_string(m->echo));
    return j;
}

int hr_msg_join_encode(hr_msg *out, const hr_msg_join *m, char err[HR_ERR_LEN]) {
    json_t *j = hr_msg_join_info_json(m);
    if (j && m->profile) {
        json_t *pd = json_loads(m->profile, 0, NULL);
        if (pd)
            json_object_set_new(j, "profile", pd);
    }
    return hr_msg_take_json(out, HR_RING_JOIN, j, err);
}

void hr_msg_join_clear(hr_msg_join *m) {
    if (!m)
        return;
    free(m->profile);
    m->profile = NULL;
}

int hr_msg_join_decode(const hr_ring_hdr *h, const void *pl, hr_msg_join *m, char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    m->mem_total = m->mem_avail = m->cg_limit = -1;
    json_t *j = hr_msg_load(h, pl, HR_RING_JOIN, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    json_int_t size = 0, mt = -1, ma = -1, cg = -1;
    if (json_unpack_ex(j, &je, 0, "{s:i,s:I,s?i,s?i,s?i,s?i,s?I,s?I,s?I,s?F,s?F}", "version",
                       &m->version, "model_size", &size, "n_layer", &m->n_layer, "threads",
                       &m->threads, "cores", &m->cores, "numa", &m->numa, "mem_total", &mt,
                       "mem_avail", &ma, "cg_limit", &cg, "disk_mbs", &m->disk_mbs, "disk_mmap_mbs",
                       &m->disk_mmap_mbs) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_JOIN, err);
    char hash[24];
    int rc;
    if ((rc = hr_msg_str(j, "name", true, m->name, sizeof m->name, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "ctrl", true, m->ctrl, sizeof m->ctrl, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "data", true, m->data, sizeof m->data, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "model_hash", true, hash, sizeof hash, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "pubkey", false, m->pubkey, sizeof m->pubkey, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "os", false, m->os, sizeof m->os, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "kernel", false, m->kernel, sizeof m->kernel, HR_RING_JOIN, err)) ||
        (rc = hr_msg_str(j, "echo", false, m->echo, sizeof m->echo, HR_RING_JOIN, err))) {
        json_decref(j);
        return rc;
    }
    char *end = NULL;
    m->model_hash = strtoull(hash, &end, 16);
    if (strlen(hash) != 16 || !end || *end || size < 0) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "JOIN: model_hash '%s' is not 16 hex digits or size %lld",
                         hash, (long long)size);
    }
    if (m->pubkey[0] && !hr_ring_key_valid(m->pubkey))
        m->pubkey[0] = 0; /* not a key: the device runs without one */
    m->model_size = (uint64_t)size;
    m->mem_total = mt;
    m->mem_avail = ma;
    m->cg_limit = cg;
    json_t *pj = json_object_get(j, "profile");
    if (json_is_object(pj))
        m->profile = json_dumps(pj, JSON_COMPACT);
    json_decref(j);
    return 0;
}

/* ---- PLAN ---- */

/* Reads the optional number member key of o into *out (-1 when absent);
 * refuses a non-number or one outside [lo, hi]. */
static int hr_msg_opt_num(const json_t *o, const char *key, double lo, double hi, double *out,
                          int type, char err[HR_ERR_LEN]) {
    json_t *v = json_object_get(o, key);
    *out = -1;
    if (!v)
        return 0;
    double x = json_is_number(v) ? json_number_value(v) : -1.0;
    if (!json_is_number(v) || !(x >= lo && x <= hi))
        return hr_seterr(err, HR_EFORMAT, "%s: %s must be a number in [%g, %g]",
                         hr_ring_type_name(type), key, lo, hi);
    *out = x;
    return 0;
}

int hr_msg_plan_window(const hr_msg_plan *m, int pos, int r, int *first, int *count) {
    if (!m || m->k < 1 || m->k > HR_MSG_MAX_ROUNDS || m->n_active < 1 ||
        m->n_active > HR_MSG_MAX_RING || pos < 0 || pos >= m->n_active || r < 0 || r >= m->k)
        return HR_EINVAL;
    int at = 0;
    for (int q = 0; q < r; q++)
        for (int j = 0; j < m->n_active; j++)
            at += m->win[q][j];
    for (int j = 0; j < pos; j++)
        at += m->win[r][j];
    *first = at;
    *count = m->win[r][pos];
    return 0;
}

int hr_msg_plan_encode(hr_msg *out, const hr_msg_plan *m, char err[HR_ERR_LEN]) {
    *out = (hr_msg){0};
    if (m->k < 1 || m->k > HR_MSG_MAX_ROUNDS || m->n_active < 1 || m->n_active > HR_MSG_MAX_RING)
        return hr_seterr(err, HR_EINVAL, "PLAN: k %d or %d ring members out of range", m->k,
                         m->n_active);
    json_t *keys = json_array(), *rounds = json_array();
    for (int i = 0; keys && i < m->n_keys && i < HR_MSG_MAX_KEYS; i++)
        json_array_append_new(keys, json_string(m->keys[i]));
    for (int r = 0; rounds && r < m->k; r++) {
        json_t *row = json_array();
        for (int j = 0; row && j < m->n_active; j++)
            json_array_append_new(row, json_integer(m->win[r][j]));
        json_array_append_new(rounds, row);
    }
    json_t *j =
        json_pack("{s:I,s:i,s:i,s:i,s:i,s:o,s:i,s:i,s:i,s:s,s:s,s:b,s:b,s:o}", "plan_id",
                  (json_int_t)m->plan_id, "k", m->k, "n_layer", m->n_layer, "n_active", m->n_active,
                  "index", m->index, "rounds", rounds, "n_ctx", m->n_ctx, "n_batch", m->n_batch,
                  "dtype", m->dtype, "next", m->next, "next_key", m->next_key, "prefetch",
                  (int)m->prefetch, "release", (int)m->release, "keys", keys);
    if (j && m->mem_budget > 0)
        json_object_set_new(j, "mem_budget", json_real(m->mem_budget));
    if (j && m->n_seq > 1)
        json_object_set_new(j, "n_seq", json_integer(m->n_seq));
    if (j && m->n_gpu > 0)
        json_object_set_new(j, "n_gpu", json_integer(m->n_gpu));
    int rc = hr_msg_take_json(out, HR_RING_PLAN, j, err);
    out->h.plan_id = m->plan_id;
    return rc;
}

/* PLAN's "rounds": k rows of n_active counts covering n_layer layers once. */
static int hr_msg_plan_rounds(const json_t *rows, hr_msg_plan *m, char err[HR_ERR_LEN]) {
    if (m->k < 1 || m->k > HR_MSG_MAX_ROUNDS || m->n_active < 1 || m->n_active > HR_MSG_MAX_RING ||
        m->n_layer < 1 || m->n_layer > HR_MSG_MAX_LAYER || m->index < -1 || m->index >= m->n_active)
        return hr_seterr(err, HR_EFORMAT,
                         "PLAN: k %d (1..%d), %d ring members (1..%d), %d layers or position %d "
                         "out of range",
                         m->k, HR_MSG_MAX_ROUNDS, m->n_active, HR_MSG_MAX_RING, m->n_layer,
                         m->index);
    if (!json_is_array(rows) || json_array_size(rows) != (size_t)m->k)
        return hr_seterr(err, HR_EFORMAT, "PLAN: rounds must be an array of k = %d rows", m->k);
    long sum = 0;
    for (int r = 0; r < m->k; r++) {
        const json_t *row = json_array_get(rows, (size_t)r);
        if (!json_is_array(row) || json_array_size(row) != (size_t)m->n_active)
            return hr_seterr(err, HR_EFORMAT, "PLAN: round %d must list %d windows", r,
                             m->n_active);
        for (int j = 0; j < m->n_active; j++) {
            const json_t *v = json_array_get(row, (size_t)j);
            json_int_t c = json_is_integer(v) ? json_integer_value(v) : -1;
            if (c < 0 || c > m->n_layer)
                return hr_seterr(err, HR_EFORMAT,
                                 "PLAN: round %d, position %d: window of %lld layers is not in "
                                 "0..%d",
                                 r, j, (long long)c, m->n_layer);
            m->win[r][j] = (int)c;
            sum += c;
        }
    }
    if (sum != m->n_layer) /* windows follow each other: a short sum leaves layers out, a
                              long one computes some twice or past the last */
        return hr_seterr(err, HR_EFORMAT,
                         "PLAN: the windows cover %ld layers, the model has %d: each must be "
                         "computed once",
                         sum, m->n_layer);
    return 0;
}

int hr_msg_plan_decode(const hr_ring_hdr *h, const void *pl, hr_msg_plan *m, char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_PLAN, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    json_int_t plan_id = 0;
    int prefetch = 1, release = 0;
    if (json_unpack_ex(j, &je, 0, "{s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:b}", "plan_id", &plan_id,
                       "k", &m->k, "n_layer", &m->n_layer, "n_active", &m->n_active, "index",
                       &m->index, "n_ctx", &m->n_ctx, "n_batch", &m->n_batch, "dtype", &m->dtype,
                       "prefetch", &prefetch, "release", &release) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_PLAN, err);
    int rc;
    if ((rc = hr_msg_plan_rounds(json_object_get(j, "rounds"), m, err)) ||
        (rc = hr_msg_str(j, "next", true, m->next, sizeof m->next, HR_RING_PLAN, err)) ||
        (rc = hr_msg_str(j, "next_key", false, m->next_key, sizeof m->next_key, HR_RING_PLAN,
                         err))) {
        json_decref(j);
        return rc;
    }
    if (plan_id < 0 || plan_id > UINT32_MAX) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "PLAN: plan_id %lld out of range", (long long)plan_id);
    }
    m->plan_id = (uint32_t)plan_id;
    int wmax = 0;
    for (int r = 0; m->index >= 0 && r < m->k; r++)
        wmax = m->win[r][m->index] > wmax ? m->win[r][m->index] : wmax;
    double n_seq = 1, n_gpu = 0;
    if ((rc = hr_msg_opt_num(j, "mem_budget", 0, 1e18, &m->mem_budget, HR_RING_PLAN, err)) ||
        (rc = hr_msg_opt_num(j, "n_seq", 1, HR_MSG_MAX_SEQ, &n_seq, HR_RING_PLAN, err)) ||
        (rc = hr_msg_opt_num(j, "n_gpu", 0, wmax, &n_gpu, HR_RING_PLAN, err))) {
        json_decref(j);
        return rc;
    }
    if (n_gpu != (int)n_gpu && n_gpu >= 0) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "PLAN: n_gpu %g is not an integer", n_gpu);
    }
    m->n_gpu = n_gpu > 0 ? (int)n_gpu : 0;
    if (n_seq < 0) /* absent: one slot */
        n_seq = 1;
    if (n_seq != (int)n_seq) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "PLAN: n_seq %g is not an integer", n_seq);
    }
    m->n_seq = (int)n_seq;
    m->prefetch = prefetch;
    m->release = release;
    json_t *arr = json_object_get(j, "keys"), *v;
    size_t i;
    json_array_foreach(arr, i, v) {
        const char *ks = json_string_value(v);
        if (ks && m->n_keys < HR_MSG_MAX_KEYS && hr_ring_key_valid(ks))
            snprintf(m->keys[m->n_keys++], HR_RING_KEY_LEN, "%s", ks);
    }
    json_decref(j);
    return 0;
}

/* ---- READY / REJECT: a flag and a text ---- */

static int hr_msg_flag_encode(hr_msg *out, int type, const char *flag, bool v, const char *tkey,
                              const char *text, char err[HR_ERR_LEN]) {
    char t[HR_MSG_TEXT_LEN];
    hr_msg_copy(t, sizeof t, text);
    json_t *j = json_pack("{s:b,s:s}", flag, (int)v, tkey, t);
    return hr_msg_take_json(out, type, j, err);
}

static int hr_msg_flag_decode(const hr_ring_hdr *h, const void *pl, int type, const char *flag,
                              bool *v, const char *tkey, bool text_required, char *text,
                              char err[HR_ERR_LEN]) {
    json_t *j = hr_msg_load(h, pl, type, err);
    if (!j)
        return HR_EFORMAT;
    json_t *f = json_object_get(j, flag);
    if (!json_is_boolean(f)) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "%s: '%s' %s", hr_ring_type_name(type), flag,
                         f ? "is not a boolean" : "is missing");
    }
    *v = json_is_true(f);
    const char *s = json_string_value(json_object_get(j, tkey));
    if (!s && json_object_get(j, tkey)) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "%s: '%s' is not a string", hr_ring_type_name(type),
                         tkey);
    }
    if (!s && text_required) {
        json_decref(j);
        return hr_seterr(err, HR_EFORMAT, "%s: '%s' is missing", hr_ring_type_name(type), tkey);
    }
    hr_msg_copy(text, HR_MSG_TEXT_LEN, s);
    json_decref(j);
    return 0;
}

int hr_msg_ready_encode(hr_msg *out, const hr_msg_ready *m, char err[HR_ERR_LEN]) {
    return hr_msg_flag_encode(out, HR_RING_READY, "ok", m->ok, "error", m->ok ? "" : m->error, err);
}

int hr_msg_ready_decode(const hr_ring_hdr *h, const void *pl, hr_msg_ready *m,
                        char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    int rc = hr_msg_flag_decode(h, pl, HR_RING_READY, "ok", &m->ok, "error", false, m->error, err);
    if (rc == 0 && !m->ok && !m->error[0])
        hr_msg_copy(m->error, sizeof m->error, "no reason given");
    return rc;
}

int hr_msg_reject_encode(hr_msg *out, const hr_msg_reject *m, char err[HR_ERR_LEN]) {
    return hr_msg_flag_encode(out, HR_RING_REJECT, "fatal", m->fatal, "reason", m->reason, err);
}

int hr_msg_reject_decode(const hr_ring_hdr *h, const void *pl, hr_msg_reject *m,
                         char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    return hr_msg_flag_decode(h, pl, HR_RING_REJECT, "fatal", &m->fatal, "reason", true, m->reason,
                              err);
}

/* ---- HEARTBEAT ---- */

int hr_msg_heartbeat_encode(hr_msg *out, const hr_msg_heartbeat *m, char err[HR_ERR_LEN]) {
    json_t *j =
        json_pack("{s:f,s:f,s:I,s:I,s:I,s:f}", "ms_round", m->ms_round, "resident", m->resident,
                  "tokens", (json_int_t)m->tokens, "rejected", (json_int_t)m->rejected, "mem_avail",
                  (json_int_t)m->mem_avail, "t", m->t);
    if (j && m->read_round >= 0)
        json_object_set_new(j, "read_round", json_real(m->read_round));
    if (j && m->cpu_round >= 0)
        json_object_set_new(j, "cpu_round", json_real(m->cpu_round));
    if (j && m->stream_round >= 0)
        json_object_set_new(j, "stream_round", json_real(m->stream_round));
    if (j && m->pinned >= 0)
        json_object_set_new(j, "pinned", json_real(m->pinned));
    if (j && m->locked >= 0)
        json_object_set_new(j, "locked", json_boolean(m->locked > 0));
    if (j)
        json_object_set_new(j, "rounds", json_integer((json_int_t)m->rounds));
    if (j)
        json_object_set_new(j, "ms_total", json_real(m->ms_total));
    if (j && m->ex_keep >= 0)
        json_object_set_new(j, "experts",
                            json_pack("{s:i,s:I,s:I,s:I,s:I}", "keep", m->ex_keep, "routed",
                                      (json_int_t)m->ex_routed, "hits", (json_int_t)m->ex_hits,
                                      "fetched", (json_int_t)m->ex_fetched, "moved",
                                      (json_int_t)m->ex_moved));
    if (j && m->pump_bytes > 0 && m->pump_s > 0) {
        json_object_set_new(j, "pump_bytes", json_real(m->pump_bytes));
        json_object_set_new(j, "pump_s", json_real(m->pump_s));
    }
    if (j && m->fetch_total > 0) {
        json_object_set_new(j, "fetch_done", json_real(m->fetch_done));
        json_object_set_new(j, "fetch_total", json_real(m->fetch_total));
        json_object_set_new(j, "fetch_wire", json_real(m->fetch_wire));
    }
    return hr_msg_take_json(out, HR_RING_HEARTBEAT, j, err);
}

int hr_msg_heartbeat_decode(const hr_ring_hdr *h, const void *pl, hr_msg_heartbeat *m,
                            char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_HEARTBEAT, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    json_int_t tok = 0, rej = 0, avail = -1, rounds = 0;
    if (json_unpack_ex(j, &je, 0, "{s:F,s:F,s:I,s:I,s:I,s?F}", "ms_round", &m->ms_round, "resident",
                       &m->resident, "tokens", &tok, "rejected", &rej, "mem_avail", &avail, "t",
                       &m->t) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_HEARTBEAT, err);
    int rc;
    json_t *lk = json_object_get(j, "locked");
    if ((rc = hr_msg_opt_num(j, "read_round", 0, 1e15, &m->read_round, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "cpu_round", 0, 1e9, &m->cpu_round, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "stream_round", 0, 1e15, &m->stream_round, HR_RING_HEARTBEAT,
                             err)) ||
        (rc = hr_msg_opt_num(j, "pinned", 0, 1e15, &m->pinned, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "fetch_done", 0, 1e15, &m->fetch_done, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "fetch_total", 0, 1e15, &m->fetch_total, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "fetch_wire", 0, 1e15, &m->fetch_wire, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "pump_bytes", 0, 1e18, &m->pump_bytes, HR_RING_HEARTBEAT, err)) ||
        (rc = hr_msg_opt_num(j, "pump_s", 0, 1e12, &m->pump_s, HR_RING_HEARTBEAT, err)) ||
        (lk && !json_is_boolean(lk) &&
         (rc = hr_seterr(err, HR_EFORMAT, "HEARTBEAT: locked must be true or false")))) {
        json_decref(j);
        return rc;
    }
    m->locked = lk ? json_is_true(lk) : -1;
    m->ex_keep = -1;
    json_t *ex = json_object_get(j, "experts");
    if (ex) {
        json_int_t keep = -1, routed = -1, hits = -1, fetched = 0, moved = 0;
        if (json_unpack_ex(ex, &je, JSON_STRICT, "{s:I,s:I,s:I,s?I,s?I}", "keep", &keep, "routed",
                           &routed, "hits", &hits, "fetched", &fetched, "moved", &moved) != 0 ||
            keep < 0 || keep > 1 << 20 || routed < 0 || hits < 0 || hits > routed || fetched < 0 ||
            moved < 0) {
            json_decref(j);
            return hr_seterr(err, HR_EFORMAT,
                             "HEARTBEAT: experts must be {keep, routed, hits[, fetched, moved]}");
        }
        m->ex_keep = (int)keep;
        m->ex_routed = (uint64_t)routed;
        m->ex_hits = (uint64_t)hits;
        m->ex_fetched = (uint64_t)fetched;
        m->ex_moved = (uint64_t)moved;
    }
    if (json_unpack_ex(j, &je, 0, "{s?I,s?F}", "rounds", &rounds, "ms_total", &m->ms_total) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_HEARTBEAT, err);
    json_decref(j);
    if (tok < 0 || rej < 0 || rounds < 0 || !(m->ms_total >= 0))
        return hr_seterr(err, HR_EFORMAT, "HEARTBEAT: negative counters");
    m->rounds = (uint64_t)rounds;
    m->tokens = (uint64_t)tok;
    m->rejected = (uint64_t)rej;
    m->mem_avail = avail;
    return 0;
}

/* ---- INVITE / PAIR ---- */

int hr_msg_invite_encode(hr_msg *out, const hr_msg_invite *m, char err[HR_ERR_LEN]) {
    return hr_msg_take_json(out, HR_RING_INVITE, json_pack("{s:s}", "head", m->head), err);
}

int hr_msg_invite_decode(const hr_ring_hdr *h, const void *pl, hr_msg_invite *m,
                         char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_INVITE, err);
    if (!j)
        return HR_EFORMAT;
    int rc = hr_msg_str(j, "head", true, m->head, sizeof m->head, HR_RING_INVITE, err);
    json_decref(j);
    return rc;
}

int hr_msg_pair_encode(hr_msg *out, const hr_msg_pair *m, char err[HR_ERR_LEN]) {
    json_t *j = json_pack("{s:s,s:s}", "name", m->name, "pubkey", m->pubkey);
    return hr_msg_take_json(out, HR_RING_PAIR, j, err);
}

int hr_msg_pair_decode(const hr_ring_hdr *h, const void *pl, hr_msg_pair *m, char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_PAIR, err);
    if (!j)
        return HR_EFORMAT;
    int rc = hr_msg_str(j, "name", true, m->name, sizeof m->name, HR_RING_PAIR, err);
    if (rc == 0)
        rc = hr_msg_str(j, "pubkey", true, m->pubkey, sizeof m->pubkey, HR_RING_PAIR, err);
    json_decref(j);
    if (rc == 0 && !hr_ring_key_valid(m->pubkey))
        rc = hr_seterr(err, HR_EFORMAT, "PAIR: '%s' is not a public key", m->pubkey);
    return rc;
}

/* ---- STATUS ---- */

int hr_msg_status_encode(hr_msg *out, const char *json, char err[HR_ERR_LEN]) {
    size_t n = json ? strlen(json) : 0;
    char *s = json ? malloc(n + 1) : NULL;
    if (s)
        memcpy(s, json, n + 1);
    return hr_msg_take(out, HR_RING_STATUS, s, n, err);
}

int hr_msg_status_decode(const hr_ring_hdr *h, const void *pl, char **json, char err[HR_ERR_LEN]) {
    *json = NULL;
    json_t *j = hr_msg_load(h, pl, HR_RING_STATUS, err);
    if (!j)
        return HR_EFORMAT;
    json_decref(j);
    if (!(*json = malloc((size_t)h->len + 1)))
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    memcpy(*json, pl, h->len);
    (*json)[h->len] = 0;
    return 0;
}

/* ---- PROMPT ---- */

int hr_msg_prompt_encode(hr_msg *out, const hr_msg_prompt *m, char err[HR_ERR_LEN]) {
    json_t *j = json_pack("{s:s,s:i,s:f,s:i,s:f,s:f,s:f,s:I,s:i}", "text", m->text ? m->text : "",
                          "n_predict", m->n_predict, "temp", m->temp, "top_k", m->top_k, "top_p",
                          m->top_p, "min_p", m->min_p, "repeat_penalty", m->repeat_penalty, "seed",
                          (json_int_t)m->seed, "wait_ms", m->wait_ms);
    return hr_msg_take_json(out, HR_RING_PROMPT, j, err);
}

int hr_msg_prompt_decode(const hr_ring_hdr *h, const void *pl, hr_msg_prompt *m,
                         char err[HR_ERR_LEN]) {
    m->text = NULL;
    json_t *j = hr_msg_load(h, pl, HR_RING_PROMPT, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    const char *text = NULL;
    json_int_t seed = m->seed;
    if (json_unpack_ex(j, &je, 0, "{s:s,s?i,s?F,s?i,s?F,s?F,s?F,s?I,s?i}", "text", &text,
                       "n_predict", &m->n_predict, "temp", &m->temp, "top_k", &m->top_k, "top_p",
                       &m->top_p, "min_p", &m->min_p, "repeat_penalty", &m->repeat_penalty, "seed",
                       &seed, "wait_ms", &m->wait_ms) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_PROMPT, err);
    m->seed = seed;
    m->text = strdup(text);
    json_decref(j);
    return m->text ? 0 : hr_seterr(err, HR_ENOMEM, "out of memory");
}

void hr_msg_prompt_clear(hr_msg_prompt *m) {
    if (!m)
        return;
    free(m->text);
    m->text = NULL;
}

/* ---- TOKEN ---- */

int hr_msg_token_encode(hr_msg *out, int32_t id, const char *piece, int len, char err[HR_ERR_LEN]) {
    if (len < 0 || len > (int)HR_MSG_MAX_PIECE)
        return hr_seterr(err, HR_ERANGE, "TOKEN piece of %d bytes", len);
    char *s = malloc(4 + (size_t)len);
    if (s) {
        for (int i = 0; i < 4; i++)
            s[i] = (char)(uint8_t)((uint32_t)id >> (8 * i));
        if (len)
            memcpy(s + 4, piece, (size_t)len);
    }
    return hr_msg_take(out, HR_RING_TOKEN, s, 4 + (size_t)len, err);
}

int hr_msg_token_decode(const hr_ring_hdr *h, const void *pl, hr_msg_token *m,
                        char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    int rc = hr_msg_check(h, HR_RING_TOKEN, err);
    if (rc)
        return rc;
    if (h->len < 4)
        return hr_seterr(err, HR_EFORMAT, "TOKEN of %u bytes (at least 4)", h->len);
    const uint8_t *p = pl;
    m->id = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                      (uint32_t)p[3] << 24);
    m->len = (int)h->len - 4;
    memcpy(m->piece, p + 4, (size_t)m->len);
    m->piece[m->len] = 0;
    return 0;
}

/* ---- DONE ---- */

int hr_msg_done_encode(hr_msg *out, const hr_msg_done *m, char err[HR_ERR_LEN]) {
    json_t *j = json_pack("{s:i,s:i,s:f,s:f,s:f,s:f}", "n_prompt", m->n_prompt, "n_gen", m->n_gen,
                          "prompt_s", m->prompt_s, "gen_s", m->gen_s, "prompt_tps", m->prompt_tps,
                          "gen_tps", m->gen_tps);
    return hr_msg_take_json(out, HR_RING_DONE, j, err);
}

int hr_msg_done_decode(const hr_ring_hdr *h, const void *pl, hr_msg_done *m, char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_DONE, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    if (json_unpack_ex(j, &je, 0, "{s:i,s:i,s:F,s:F,s?F,s?F}", "n_prompt", &m->n_prompt, "n_gen",
                       &m->n_gen, "prompt_s", &m->prompt_s, "gen_s", &m->gen_s, "prompt_tps",
                       &m->prompt_tps, "gen_tps", &m->gen_tps) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_DONE, err);
    json_decref(j);
    return 0;
}

/* ---- ERROR ---- */

int hr_msg_error_encode(hr_msg *out, const char *text, char err[HR_ERR_LEN]) {
    size_t n = text ? strlen(text) : 0;
    if (n > hr_msg_table[HR_RING_ERROR].max_len)
        n = hr_msg_table[HR_RING_ERROR].max_len;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, text ? text : "", n);
        s[n] = 0;
    }
    return hr_msg_take(out, HR_RING_ERROR, s, n, err);
}

int hr_msg_error_decode(const hr_ring_hdr *h, const void *pl, char *text, size_t cap,
                        char err[HR_ERR_LEN]) {
    if (cap)
        text[0] = 0;
    int rc = hr_msg_check(h, HR_RING_ERROR, err);
    if (rc)
        return rc;
    if (memchr(pl, 0, h->len))
        return hr_seterr(err, HR_EFORMAT, "ERROR text contains a NUL byte");
    if (cap)
        snprintf(text, cap, "%.*s", (int)h->len, (const char *)pl);
    return 0;
}

/* ---- PROBE / LINK: measured links ---- */

/* An endpoint a probe may go to: tcp:// and at least host:port. */
static bool hr_msg_tcp_ep(const char *ep) {
    return strncmp(ep, "tcp://", 6) == 0 && strchr(ep + 6, ':') != NULL;
}

int hr_msg_probe_encode(hr_msg *out, const hr_msg_probe *m, char err[HR_ERR_LEN]) {
    json_t *j = json_pack("{s:s,s:s,s:s,s:I}", "to", m->to, "key", m->key, "name", m->name,
                          "plan_id", (json_int_t)m->plan_id);
    int rc = hr_msg_take_json(out, HR_RING_PROBE, j, err);
    out->h.plan_id = m->plan_id;
    return rc;
}

int hr_msg_probe_decode(const hr_ring_hdr *h, const void *pl, hr_msg_probe *m,
                        char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_PROBE, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    json_int_t plan_id = -1;
    const char *to = NULL, *key = NULL, *name = NULL; /* copied, sizes checked, below */
    if (json_unpack_ex(j, &je, JSON_STRICT, "{s:s,s?s,s?s,s:I}", "to", &to, "key", &key, "name",
                       &name, "plan_id", &plan_id) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_PROBE, err);
    int rc;
    if ((rc = hr_msg_str(j, "to", true, m->to, sizeof m->to, HR_RING_PROBE, err)) ||
        (rc = hr_msg_str(j, "key", false, m->key, sizeof m->key, HR_RING_PROBE, err)) ||
        (rc = hr_msg_str(j, "name", false, m->name, sizeof m->name, HR_RING_PROBE, err))) {
        json_decref(j);
        return rc;
    }
    json_decref(j);
    if (plan_id < 0 || plan_id > UINT32_MAX)
        return hr_seterr(err, HR_EFORMAT, "PROBE: plan_id %lld out of range", (long long)plan_id);
    if (!hr_msg_tcp_ep(m->to))
        return hr_seterr(err, HR_EFORMAT, "PROBE: '%s' is not a tcp:// endpoint", m->to);
    if (m->key[0] && !hr_ring_key_valid(m->key))
        return hr_seterr(err, HR_EFORMAT, "PROBE: key '%s' is not a public key", m->key);
    m->plan_id = (uint32_t)plan_id;
    return 0;
}

int hr_msg_link_encode(hr_msg *out, const hr_msg_link *m, char err[HR_ERR_LEN]) {
    json_t *j = json_pack("{s:s,s:I,s:f,s:f,s:f,s:i,s:i,s:i}", "to", m->to, "plan_id",
                          (json_int_t)m->plan_id, "rtt_us", m->rtt_us, "rtt_min_us", m->rtt_min_us,
                          "bw_mbs", m->bw_mbs, "msg_bytes", m->msg_bytes, "burst_bytes",
                          m->burst_bytes, "samples", m->samples);
    int rc = hr_msg_take_json(out, HR_RING_LINK, j, err);
    out->h.plan_id = m->plan_id;
    return rc;
}

/* A finite figure in (0, max]. */
static bool hr_msg_pos(double v, double max) { return v > 0 && v <= max; }

int hr_msg_link_decode(const hr_ring_hdr *h, const void *pl, hr_msg_link *m, char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    json_t *j = hr_msg_load(h, pl, HR_RING_LINK, err);
    if (!j)
        return HR_EFORMAT;
    json_error_t je;
    json_int_t plan_id = -1;
    const char *to = NULL; /* copied, with its size checked, below */
    if (json_unpack_ex(j, &je, JSON_STRICT, "{s:s,s:I,s:F,s:F,s:F,s:i,s:i,s:i}", "to", &to,
                       "plan_id", &plan_id, "rtt_us", &m->rtt_us, "rtt_min_us", &m->rtt_min_us,
                       "bw_mbs", &m->bw_mbs, "msg_bytes", &m->msg_bytes, "burst_bytes",
                       &m->burst_bytes, "samples", &m->samples) != 0)
        return hr_msg_unpack_err(j, &je, HR_RING_LINK, err);
    int rc = hr_msg_str(j, "to", true, m->to, sizeof m->to, HR_RING_LINK, err);
    json_decref(j);
    if (rc)
        return rc;
    /* figures a real link can give: a round trip up to 60 s, up to 1 TB/s */
    if (plan_id < 0 || plan_id > UINT32_MAX || !hr_msg_tcp_ep(m->to) ||
        !hr_msg_pos(m->rtt_us, 60e6) || !hr_msg_pos(m->rtt_min_us, m->rtt_us) ||
        !hr_msg_pos(m->bw_mbs, 1e6) || m->msg_bytes < 0 ||
        m->msg_bytes > (int)HR_RING_ECHO_MAX_PAYLOAD || m->burst_bytes <= 0 ||
        m->burst_bytes > (int)HR_RING_ECHO_MAX_PAYLOAD || m->samples < 1 || m->samples > 1000)
        return hr_seterr(err, HR_EFORMAT,
                         "LINK: implausible figures (to '%.60s', plan %lld, rtt %g us, min %g us, "
                         "%g MB/s, %d/%d bytes, %d samples)",
                         m->to, (long long)plan_id, m->rtt_us, m->rtt_min_us, m->bw_mbs,
                         m->msg_bytes, m->burst_bytes, m->samples);
    m->plan_id = (uint32_t)plan_id;
    return 0;
}

/* ---- FETCH / CHUNK ---- */

static void hr_le_put(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t hr_le_get(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int hr_msg_fetch_encode(hr_msg *out, const hr_msg_fetch *m, char err[HR_ERR_LEN]) {
    if (m->len > HR_MSG_CHUNK_MAX)
        return hr_seterr(err, HR_ERANGE, "FETCH of %u bytes (at most %u)", m->len,
                         HR_MSG_CHUNK_MAX);
    uint8_t *p = calloc(1, HR_MSG_FETCH_SIZE);
    if (p) {
        hr_le_put(p, m->off, 8);
        hr_le_put(p + 8, m->len, 4);
    }
    return hr_msg_take(out, HR_RING_FETCH, (char *)p, HR_MSG_FETCH_SIZE, err);
}

int hr_msg_fetch_decode(const hr_ring_hdr *h, const void *pl, hr_msg_fetch *m,
                        char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    int rc = hr_msg_check(h, HR_RING_FETCH, err);
    if (rc)
        return rc;
    if (h->len != HR_MSG_FETCH_SIZE)
        return hr_seterr(err, HR_EFORMAT, "FETCH of %u bytes (want %d)", h->len, HR_MSG_FETCH_SIZE);
    const uint8_t *p = pl;
    m->off = hr_le_get(p, 8);
    m->len = (uint32_t)hr_le_get(p + 8, 4);
    if (hr_le_get(p + 12, 4) != 0)
        return hr_seterr(err, HR_EFORMAT, "FETCH with non-zero reserved field");
    if (m->len > HR_MSG_CHUNK_MAX || m->off > UINT64_MAX - m->len)
        return hr_seterr(err, HR_EFORMAT, "FETCH of %u bytes at %llu out of range", m->len,
                         (unsigned long long)m->off);
    return 0;
}

int hr_msg_chunk_encode(hr_msg *out, const hr_msg_chunk *m, char err[HR_ERR_LEN]) {
    if (m->len > HR_MSG_CHUNK_MAX || (m->len && !m->data))
        return hr_seterr(err, HR_ERANGE, "CHUNK of %u bytes (at most %u)", m->len,
                         HR_MSG_CHUNK_MAX);
    size_t n = HR_MSG_CHUNK_HDR + (size_t)m->len;
    uint8_t *p = malloc(n);
    if (p) {
        hr_le_put(p, m->model_size, 8);
        hr_le_put(p + 8, m->model_hash, 8);
        hr_le_put(p + 16, m->off, 8);
        hr_le_put(p + 24, m->len, 4);
        hr_le_put(p + 28, m->data_offset, 4);
        memcpy(p + 32, m->hash, HR_MSG_HASH_LEN);
        if (m->len)
            memcpy(p + HR_MSG_CHUNK_HDR, m->data, m->len);
    }
    return hr_msg_take(out, HR_RING_CHUNK, (char *)p, n, err);
}

int hr_msg_chunk_decode(const hr_ring_hdr *h, const void *pl, hr_msg_chunk *m,
                        char err[HR_ERR_LEN]) {
    memset(m, 0, sizeof *m);
    int rc = hr_msg_check(h, HR_RING_CHUNK, err);
    if (rc)
        return rc;
    if (h->len < HR_MSG_CHUNK_HDR)
        return hr_seterr(err, HR_EFORMAT, "CHUNK of %u bytes (at least %d)", h->len,
                         HR_MSG_CHUNK_HDR);
    const uint8_t *p = pl;
    m->model_size = hr_le_get(p, 8);
    m->model_hash = hr_le_get(p + 8, 8);
    m->off = hr_le_get(p + 16, 8);
    m->len = (uint32_t)hr_le_get(p + 24, 4);
    m->data_offset = (uint32_t)hr_le_get(p + 28, 4);
    memcpy(m->hash, p + 32, HR_MSG_HASH_LEN);
    if (m->len > HR_MSG_CHUNK_MAX || (size_t)h->len != HR_MSG_CHUNK_HDR + (size_t)m->len)
        return hr_seterr(err, HR_EFORMAT, "CHUNK of %u bytes does not hold its %u data bytes",
                         h->len, m->len);
    if (m->off > m->model_size || m->len > m->model_size - m->off || m->data_offset > m->model_size)
        return hr_seterr(
            err, HR_EFORMAT, "CHUNK of %u bytes at %llu (data at %u) outside a model of %llu bytes",
            m->len, (unsigned long long)m->off, m->data_offset, (unsigned long long)m->model_size);
    m->data = p + HR_MSG_CHUNK_HDR;
    return 0;
}
