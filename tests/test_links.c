/* test_links.c - links measured on the live path, with CURVE on and a key
 * folder per agent (each trusts only the keys it was given; ring members
 * admit each other because the head's plan vouches for them):
 *  - after join and the first plan every active device reports a measured
 *    link (round trip > 0, throughput > 0, link_assumed false) to its next
 *    ring device, in `hearth status --json` and in the text status;
 *  - the first plan already ran on measured figures (the worker's link to
 *    the head, measured at join);
 *  - a third device joining re-plans the ring, and the device whose next
 *    changed measures again (to the new next), while a device whose next
 *    did not change keeps its figures; no handshake was refused. */
#include "common/log.h"
#include "ring/ring.h"

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];
static const char *g_bin;

/* The public key of the key folder dir (created on first use). */
static int key_of(const char *dir, char pub[HR_RING_KEY_LEN]) {
    hr_ring_keys *k = NULL;
    char err[HR_ERR_LEN];
    if (hr_ring_keys_open(&k, dir, err)) {
        fprintf(stderr, "%s: %s\n", dir, err);
        return -1;
    }
    snprintf(pub, HR_RING_KEY_LEN, "%s", hr_ring_keys_public(k));
    hr_ring_keys_close(k);
    return 0;
}

static int start(agent_th *t, const char *model, const char *name, const char *head_ep,
                 int expect) {
    hr_agent_params p = agent_params(model, name, head_ep, 128, expect);
    p.n_threads = 1;
    p.key_dir = t->keys;
    return agent_begin(t, &p);
}

/* `hearth status --json` against the head (the CLI with the head's keys). */
static json_t *cli_status(const agent_th *head, bool json, char *text, size_t cap) {
    char cmd[768];
    snprintf(cmd, sizeof cmd, "'%s' status --head '%s' --key-dir '%s' %s 2>&1", g_bin,
             hr_agent_endpoint(head->a) + 6, head->keys, json ? "--json" : "");
    FILE *f = popen(cmd, "r");
    if (!f)
        return NULL;
    size_t n = fread(text, 1, cap - 1, f);
    text[n] = 0;
    pclose(f);
    return json ? json_loads(text, 0, NULL) : NULL;
}

/* The name of the device after d in the ring of st. */
static const char *next_of(json_t *st, json_t *d) {
    json_t *devs = json_object_get(st, "devices"), *o;
    int n_active = 0, pos = (int)json_integer_value(json_object_get(d, "ring_pos"));
    size_t i;
    json_array_foreach(devs, i, o) n_active +=
        json_integer_value(json_object_get(o, "ring_pos")) >= 0;
    json_array_foreach(devs, i, o) {
        if (n_active > 1 &&
            json_integer_value(json_object_get(o, "ring_pos")) == (pos + 1) % n_active)
            return json_string_value(json_object_get(o, "name"));
    }
    return NULL;
}

/* True when every active device of st has a measured link to its next. */
static bool all_measured(json_t *st) {
    json_t *devs = json_object_get(st, "devices"), *d;
    size_t i;
    int n = 0;
    json_array_foreach(devs, i, d) {
        if (json_integer_value(json_object_get(d, "ring_pos")) < 0)
            continue;
        const char *to = json_string_value(json_object_get(d, "link_to"));
        const char *nx = next_of(st, d);
        if (!json_is_false(json_object_get(d, "link_assumed")) || !to || !nx ||
            strcmp(to, nx) != 0 || json_object_get(d, "link_reverse"))
            return false;
        n++;
    }
    return n > 1 && json_is_true(json_object_get(st, "ready"));
}

/* Polls `hearth status --json` until every active device measured its link
 * to its next one, with n_devs devices (NULL after timeout_s). */
static json_t *wait_measured(const agent_th *head, int n_devs, double timeout_s) {
    static char buf[1 << 16];
    double t0 = now_s();
    json_t *st = NULL;
    while (now_s() - t0 < timeout_s) {
        json_decref(st);
        st = cli_status(head, true, buf, sizeof buf);
        if (st && (int)json_array_size(json_object_get(st, "devices")) == n_devs &&
            all_measured(st))
            return st;
        sleep_ms(200);
    }
    fprintf(stderr, "links not measured within %.0f s; last status:\n%s\n", timeout_s, buf);
    json_decref(st);
    return NULL;
}

static void check_link(json_t *d, const char *name) {
    double rtt = json_real_value(json_object_get(d, "link_rtt_ms"));
    double bps = json_real_value(json_object_get(d, "link_bps"));
    printf("  %-5s -> %-5s rtt %.3f ms, %.1f MB/s, plan %lld, %lld measurement(s), %.1f s ago\n",
           name, json_string_value(json_object_get(d, "link_to")), rtt, bps * 1e-6,
           (long long)json_integer_value(json_object_get(d, "link_plan")),
           (long long)json_integer_value(json_object_get(d, "link_measurements")),
           json_real_value(json_object_get(d, "link_age_s")));
    CHECK(json_is_false(json_object_get(d, "link_assumed")));
    CHECK(rtt > 0 && rtt < 1000);
    CHECK(bps > 1e6);
    CHECK(json_real_value(json_object_get(d, "link_age_s")) >= 0);
    CHECK(json_integer_value(json_object_get(d, "link_measurements")) >= 1);
}

static void test_links(const char *model) {
    const char *names[3] = {"head", "w1", "w2"};
    agent_th ag[3];
    memset(ag, 0, sizeof ag);
    char pub[3][HR_RING_KEY_LEN], err[HR_ERR_LEN];
    for (int i = 0; i < 3; i++) {
        snprintf(ag[i].keys, sizeof ag[i].keys, "%s/keys-%s", g_dir, names[i]);
        CHECK_EQ(key_of(ag[i].keys, pub[i]), 0);
    }
    /* the head trusts the workers; each worker trusts the head, not the other worker */
    for (int i = 1; i < 3; i++) {
        CHECK_EQ(hr_ring_trust_add(ag[0].keys, names[i], pub[i], err), 0);
        CHECK_EQ(hr_ring_trust_add(ag[i].keys, "head", pub[0], err), 0);
    }
    int ok = start(&ag[0], model, "head", NULL, 1);
    if (ok == 0)
        ok = start(&ag[1], model, "w1", hr_agent_endpoint(ag[0].a), 0);
    CHECK_EQ(ok, 0);
    if (ok == 0 && head_ready(ag[0].a, 1, 30000)) {
        CHECK(0);
        ok = -1;
    }
    json_t *st = ok == 0 ? wait_measured(&ag[0], 2, 20) : NULL;
    CHECK(st != NULL);
    int plan1 = 0;
    if (st) {
        plan1 = (int)json_integer_value(json_object_get(st, "plan_id"));
        printf("plan %d, 2 devices:\n", plan1);
        json_t *h = dev_named(st, "head"), *w1 = dev_named(st, "w1");
        check_link(h, "head");
        check_link(w1, "w1");
        CHECK_STR(json_string_value(json_object_get(h, "link_to")), "w1");
        CHECK_STR(json_string_value(json_object_get(w1, "link_to")), "head");
        /* w1 measured its link to the head when it joined (plan 0), before
         * the first plan, which ran on it; the head measured its own next */
        CHECK_EQ(json_integer_value(json_object_get(w1, "link_plan")), 0);
        CHECK(json_is_false(json_object_get(w1, "plan_link_assumed")));
        /* ... under the first plan, or a later one (its own figure may
         * re-plan: under load w1's reverse figure can be far from it) */
        int h_plan = (int)json_integer_value(json_object_get(h, "link_plan"));
        CHECK_INT(h_plan, >=, 1);
        CHECK_INT(h_plan, <=, plan1);
        CHECK_EQ(json_integer_value(json_object_get(st, "auth_refused")), 0);
        json_decref(st);
        /* the text status says measured, to whom */
        static char text[1 << 16];
        cli_status(&ag[0], false, text, sizeof text);
        CHECK(strstr(text, "link to w1:") != NULL);
        CHECK(strstr(text, "link to head:") != NULL);
        CHECK(strstr(text, "measured") != NULL);
        CHECK(strstr(text, "assumed") == NULL);
        if (!strstr(text, "measured"))
            fprintf(stderr, "status text:\n%s\n", text);
    }

    /* a third device: a new ring head -> w1 -> w2 -> head; w1's next changed */
    if (ok == 0)
        ok = start(&ag[2], model, "w2", hr_agent_endpoint(ag[0].a), 0);
    CHECK_EQ(ok, 0);
    if (ok == 0 && head_ready(ag[0].a, 2, 30000)) {
        CHECK(0);
        ok = -1;
    }
    st = ok == 0 ? wait_measured(&ag[0], 3, 20) : NULL;
    CHECK(st != NULL);
    if (st) {
        int plan2 = (int)json_integer_value(json_object_get(st, "plan_id"));
        printf("plan %d, 3 devices:\n", plan2);
        CHECK(plan2 > plan1);
        json_t *h = dev_named(st, "head"), *w1 = dev_named(st, "w1"), *w2 = dev_named(st, "w2");
        check_link(h, "head");
        check_link(w1, "w1");
        check_link(w2, "w2");
        const char *n1 = next_of(st, w1);
        CHECK(n1 && strcmp(n1, "w2") == 0);
        /* w1 measured again, on the new plan, to its new next */
        CHECK_STR(json_string_value(json_object_get(w1, "link_to")), "w2");
        CHECK(json_integer_value(json_object_get(w1, "link_plan")) > plan1);
        CHECK_EQ(json_integer_value(json_object_get(w1, "link_measurements")), 2);
        /* w2's next is the head, which it measured when it joined */
        CHECK_STR(json_string_value(json_object_get(w2, "link_to")), "head");
        CHECK_EQ(json_integer_value(json_object_get(w2, "link_measurements")), 1);
        /* the head's next is still w1: not measured again */
        CHECK_STR(json_string_value(json_object_get(h, "link_to")), "w1");
        CHECK_EQ(json_integer_value(json_object_get(h, "link_measurements")), 1);
        CHECK_EQ(json_integer_value(json_object_get(st, "auth_refused")), 0);
        json_decref(st);
    }
    agents_end(ag, 3);
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    char model[128];
    g_bin = generated_model("links", 6, 3, "m6.gguf", g_dir, sizeof g_dir, model, sizeof model);
    if (g_bin)
        test_links(model);
    tmp_dir_remove(g_dir);
    return hr_check_finish("links");
}
