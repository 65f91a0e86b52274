/* test_planner.c - the head's live planning path with injected profiles
 * (agents send saved device profiles, --profile-file, instead of measuring):
 *  - a generated 12-layer model on three agents whose memory is short and
 *    disks slow: the plan the head runs is hr_sched_solve's for the same
 *    inputs (k and every window), not an even split, k > 1 with all three
 *    devices active, links measured (the plan's figures are the measured
 *    ones); greedy ids on the ring (F32
 *    wire) equal a single-process run;
 *  - one memory arithmetic: a head alone with exactly the memory the model
 *    needs (no disk) plans and accepts its own plan; 1 MiB less and the
 *    planner says which device is short, and no plan is served;
 *  - KV slots: a head left to choose --parallel plans fewer requests at
 *    once where the KV of four does not fit (and serves requests in
 *    them), an explicit --parallel 4 gets no plan there. */
#include "agent/agent.h"
#include "agent/service.h"
#include "common/log.h"
#include "kernels/types.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "ring/ring.h"
#include "sched/sched.h"

#include "harness.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_GEN 24
#define N_CTX 256
#define N_DEV 3

static char g_dir[64];

/* The scheduler inputs the head builds from a profile file. */
static int sched_dev_from_file(const char *path, const hr_prof_model *pm, bool is_head,
                               const char *name, double reserve, hr_sched_device *out) {
    char *js = NULL, err[HR_ERR_LEN];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    js = calloc(1, 1 << 20);
    size_t n = fread(js, 1, (1 << 20) - 1, f);
    fclose(f);
    hr_prof_device *d = calloc(1, sizeof *d);
    int rc = hr_prof_device_parse(js, n, d, err);
    free(js);
    if (rc == 0) {
        hr_prof_sched_params sp = hr_prof_sched_params_default();
        sp.is_head = is_head;
        sp.n_ctx = N_CTX;
        sp.reserve_bytes = (int64_t)reserve; /* what the head keeps out (hr_prof_mem_reserve) */
        rc = hr_prof_to_sched_device(d, pm, NULL, &sp, out, err);
        snprintf(out->name, sizeof out->name, "%s", name);
        hr_prof_assume_link(out);
    }
    if (rc)
        fprintf(stderr, "%s: %s\n", path, err);
    free(d);
    return rc;
}

static int on_tok(void *ud, int32_t id, const char *piece, int len) {
    (void)piece;
    (void)len;
    int32_t *ids = ud;
    if (id >= 0 && ids[0] < N_GEN)
        ids[1 + ids[0]++] = id;
    return 0;
}

/* ---- the scheduler's plan on three agents ---- */

static void test_live_plan(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, N_CTX, &pm, &sm)) {
        CHECK(0);
        return;
    }
    CHECK_EQ(sm.n_layer, 12);
    /* each device holds about 2.5 layers: short of memory, slow disks */
    double per = sm.layer_bytes + sm.kv_bytes_per_layer;
    const char *names[N_DEV] = {"head", "w1", "w2"};
    double gbs[N_DEV] = {4.0, 3.0, 2.0};
    char files[N_DEV][128];
    int64_t avail[N_DEV];
    for (int i = 0; i < N_DEV; i++) {
        double reserve = model_reserve(model, N_CTX, i == 0);
        avail[i] = (int64_t)(reserve + 2.5 * per + (i == 0 ? sm.output_bytes : 0));
        CHECK_EQ(save_profile(g_dir, names[i], gbs[i], 40.0, avail[i], files[i], sizeof files[i]),
                 0);
    }
    agent_th ag[N_DEV];
    memset(ag, 0, sizeof ag);
    char err[HR_ERR_LEN];
    json_t *st = profiled_agents_planned(ag, N_DEV, model, N_CTX, names, files, avail, 0);
    if (st) {
        /* the same inputs, in the head's device order */
        json_t *devs = json_object_get(st, "devices");
        CHECK_EQ((int)json_array_size(devs), N_DEV);
        hr_sched_device sd[N_DEV];
        int order[N_DEV];
        for (int i = 0; i < N_DEV && i < (int)json_array_size(devs); i++) {
            const char *nm = json_string_value(json_object_get(json_array_get(devs, i), "name"));
            order[i] = -1;
            for (int j = 0; j < N_DEV; j++)
                if (nm && strcmp(nm, names[j]) == 0)
                    order[i] = j;
            CHECK(order[i] >= 0);
            if (order[i] < 0)
                order[i] = i;
            CHECK_EQ(sched_dev_from_file(files[order[i]], &pm, i == 0, names[order[i]],
                                         model_reserve(model, N_CTX, i == 0), &sd[i]),
                     0);
            /* the links the plan ran on were measured (each device's link to
             * the head at join; the head's the other way): the same figures */
            json_t *dj = json_array_get(devs, i);
            CHECK(json_is_false(json_object_get(dj, "plan_link_assumed")));
            double prtt = json_real_value(json_object_get(dj, "plan_link_rtt_ms"));
            double pbps = json_real_value(json_object_get(dj, "plan_link_bps"));
            CHECK(prtt > 0 && pbps > 0);
            sd[i].rtt_ms = prtt;
            sd[i].link_bps = pbps;
            sd[i].link_assumed = false;
        }
        static hr_sched_plan want;
        CHECK_EQ(hr_sched_solve(&sm, sd, N_DEV, NULL, &want, err), 0);
        int k = (int)json_integer_value(json_object_get(st, "k"));
        printf("scheduler: %s\nhead: plan %s\n", want.explanation,
               json_string_value(json_object_get(st, "plan_source")));
        CHECK_EQ(k, want.k);
        CHECK(k > 1);
        CHECK_EQ(want.n_active, N_DEV);
        int active = 0, even = 1, W = sm.n_layer / (k > 0 ? k : 1);
        for (int i = 0; i < N_DEV && i < (int)json_array_size(devs); i++) {
            json_t *d = json_array_get(devs, i);
            int w = (int)json_integer_value(json_object_get(d, "w"));
            int pos = (int)json_integer_value(json_object_get(d, "ring_pos"));
            for (int r = 0; r < k && r < want.k; r++) /* every round's window */
                CHECK_EQ((int)json_integer_value(
                             json_array_get(json_object_get(d, "windows"), (size_t)r)),
                         want.dev[i].win[r]);
            CHECK_EQ(pos, want.dev[i].ring_pos);
            active += pos >= 0;
            even &= w == W / N_DEV + (i < W % N_DEV);
            CHECK(json_is_true(json_object_get(d, "has_profile")));
            CHECK(json_is_false(json_object_get(d, "link_assumed")));
            CHECK(json_real_value(json_object_get(d, "pred_ms_round")) > 0);
        }
        CHECK_EQ(active, N_DEV);
        /* memory is a cost: 12 layers on room for ~7.5, so devices stream, and the
         * head's status says which, as the scheduler planned; before the first
         * token none is overloaded on measured evidence */
        int streaming = 0;
        for (int i = 0; i < N_DEV && i < (int)json_array_size(devs); i++) {
            json_t *d = json_array_get(devs, i);
            bool ov = json_is_true(json_object_get(d, "pred_overloaded"));
            CHECK_EQ(ov, want.dev[i].overloaded);
            CHECK(json_is_false(json_object_get(d, "overloaded")));
            streaming += ov;
        }
        CHECK(streaming >= 1);
        CHECK(json_is_false(json_object_get(st, "pred_evaluated"))); /* the scheduler's choice */
        if (want.k * N_DEV != sm.n_layer) /* an even split would give every device W / 3 */
            CHECK(!even);
        CHECK(strncmp(json_string_value(json_object_get(st, "plan_source")), "scheduler", 9) == 0);
        CHECK_STR(json_string_value(json_object_get(st, "plan_error")), "");
        json_decref(st);

        /* greedy ids on the ring equal the single process */
        int32_t prompt[] = {1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278};
        int n_prompt = (int)(sizeof prompt / sizeof prompt[0]);
        int32_t ref[1 + N_GEN], got[1 + N_GEN];
        CHECK_EQ(ref_greedy(model, N_CTX, prompt, n_prompt, N_GEN, ref), 0);
        hr_sampler_params sp = hr_sampler_params_default();
        sp.temperature = 0;
        got[0] = 0;
        CHECK_EQ(
            hr_head_generate(ag[0].a, prompt, n_prompt, &sp, N_GEN, on_tok, got, NULL, NULL, err),
            0);
        CHECK_EQ(got[0], ref[0]);
        CHECK(counted_ids_equal(got, ref));
        printf("live plan: k %d, %d active devices (%d streaming), %d greedy ids equal the single "
               "process\n",
               k, active, streaming, ref[0]);
    }
    agents_end(ag, N_DEV);
    hr_prof_model_clear(&pm);
}

/* ---- memory just enough / just short on a head alone ---- */

static void test_memory_edge(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, N_CTX, &pm, &sm)) {
        CHECK(0);
        return;
    }
    hr_prof_model_clear(&pm);
    /* everything resident (no disk): weights + KV of every layer + output head */
    double need = sm.n_layer * (sm.layer_bytes + sm.kv_bytes_per_layer) + sm.output_bytes;
    CHECK(hr_prof_mem_need(&sm, sm.n_layer, true) < need); /* the admission check's least */
    int64_t enough = (int64_t)(model_reserve(model, N_CTX, true) + need) + 1;
    for (int short_of = 0; short_of <= 1; short_of++) {
        int64_t avail = enough - (short_of ? 1 << 20 : 0);
        hr_prof_device d;
        fake_device(&d, "edge", 4.0, 0.0, avail);
        char file[128];
        snprintf(file, sizeof file, "%s/edge%d.json", g_dir, short_of);
        CHECK_EQ(write_profile(&d, file), 0);
        agent_th ag;
        char err[HR_ERR_LEN] = "";
        CHECK_EQ(
            agent_begin_profiled(&ag, model, "edge", NULL, N_CTX, 0, file, avail / 1073741824.0, 0),
            0);
        if (!ag.a)
            continue;
        int rc = hr_head_wait_ready(ag.a, 0, short_of ? 2000 : 20000, err);
        json_t *st = head_status(ag.a);
        const char *perr = st ? json_string_value(json_object_get(st, "plan_error")) : NULL;
        printf("memory %s: ready %d, plan_error '%s'\n", short_of ? "short" : "enough", rc == 0,
               perr ? perr : "?");
        if (!short_of) {
            CHECK_EQ(rc, 0); /* the head accepted its own plan */
            CHECK_STR(perr ? perr : "?", "");
            json_t *d0 = st ? json_array_get(json_object_get(st, "devices"), 0) : NULL;
            CHECK_EQ((int)json_integer_value(json_object_get(d0, "w")), sm.n_layer);
        } else {
            CHECK(rc != 0);
            CHECK(perr && strstr(perr, "no plan") != NULL);
            CHECK(perr && strstr(perr, "edge") != NULL); /* names the short device */
            CHECK(st && !json_is_true(json_object_get(st, "ready")));
        }
        json_decref(st);
        agents_end(&ag, 1);
    }
}

static atomic_int g_slots_left;

static void slots_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    (void)st;
    (void)err;
    *(int *)ud = rc;
    atomic_fetch_sub(&g_slots_left, 1);
}

static int rcs_left(void) { return atomic_load(&g_slots_left); }

/* --parallel left to the head: where the KV of 4 requests at once does not
 * fit beside the weights, it plans fewer slots rather than no plan; an
 * explicit --parallel 4 gets no plan on the same device. */
static void test_parallel_fits(const char *model) {
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, N_CTX, &pm, &sm)) {
        CHECK(0);
        return;
    }
    hr_prof_model_clear(&pm);
    /* every layer resident (no disk) with one KV slot each */
    double need = sm.n_layer * (sm.layer_bytes + sm.kv_bytes_per_layer) + sm.output_bytes;
    int64_t avail = (int64_t)(model_reserve(model, N_CTX, true) + need) + 1;
    hr_prof_device d;
    fake_device(&d, "slots", 4.0, 0.0, avail);
    char file[128];
    snprintf(file, sizeof file, "%s/slots.json", g_dir);
    CHECK_EQ(write_profile(&d, file), 0);
    for (int fixed = 0; fixed <= 1; fixed++) {
        hr_agent_params p = agent_params(model, "slots", NULL, N_CTX, 0);
        p.wire_dtype = HR_RING_F32;
        p.profile_file = file;
        p.mem_limit_gib = avail / 1073741824.0;
        p.n_parallel = fixed ? 4 : 0;
        agent_th ag;
        char err[HR_ERR_LEN] = "";
        CHECK_EQ(agent_begin(&ag, &p), 0);
        if (!ag.a)
            continue;
        int rc = hr_head_wait_ready(ag.a, 0, fixed ? 2000 : 20000, err);
        json_t *st = head_status(ag.a);
        int slots = (int)json_integer_value(json_object_get(st, "kv_slots"));
        printf("parallel %s: ready %d, %d KV slots\n", fixed ? "4" : "auto", rc == 0, slots);
        if (fixed) {
            CHECK(rc != 0);
        } else {
            CHECK_EQ(rc, 0);
            CHECK(slots >= 1 && slots < 4);
            /* and it serves: requests share the slots there are */
            static const int32_t ids[] = {1, 15, 27, 99};
            static int rcs[2] = {-1, -1};
            hr_service *svc = hr_head_service(ag.a);
            atomic_store(&g_slots_left, 2);
            for (int i = 0; i < 2; i++) {
                hr_service_req q = hr_service_req_default();
                q.ids = ids;
                q.n_ids = 4;
                q.max_tokens = 4;
                q.sp.temperature = 0;
                CHECK_EQ(hr_service_submit(svc, &q, NULL, slots_done, &rcs[i], NULL, err), 0);
            }
            double t0 = now_s();
            while ((rcs_left() > 0) && now_s() - t0 < 20)
                sleep_ms(10);
            CHECK_EQ(rcs_left(), 0);
            CHECK_EQ(rcs[0], 0);
            CHECK_EQ(rcs[1], 0);
        }
        json_decref(st);
        agents_end(&ag, 1);
    }
}

static char g_long_err[HR_ERR_LEN];

static void long_done(void *ud, int rc, const hr_head_stats *st, const char *err) {
    (void)st;
    *(int *)ud = rc;
    snprintf(g_long_err, sizeof g_long_err, "%s", err ? err : "");
    atomic_fetch_sub(&g_slots_left, 1);
}

/* --ctx and --parallel left to the head, memory for the whole model and the
 * KV of one slot of the full context (2048 positions): rather than one
 * request at a time, 4 slots of 512 positions each (the same KV bytes);
 * they serve, and a prompt longer than a slot is refused with its size. */
static void test_slot_ctx(const char *model) {
    const int ctx0 = 2048; /* the generated model's training context */
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, ctx0, &pm, &sm)) {
        CHECK(0);
        return;
    }
    hr_prof_model_clear(&pm);
    double need = sm.n_layer * (sm.layer_bytes + sm.kv_bytes_per_layer) + sm.output_bytes;
    int64_t avail = (int64_t)(model_reserve(model, ctx0, true) + need) + 1;
    hr_prof_device d;
    fake_device(&d, "slotctx", 4.0, 0.0, avail);
    char file[128];
    snprintf(file, sizeof file, "%s/slotctx.json", g_dir);
    CHECK_EQ(write_profile(&d, file), 0);
    hr_agent_params p = agent_params(model, "slotctx", NULL, 0, 0); /* no --ctx */
    p.wire_dtype = HR_RING_F32;
    p.profile_file = file;
    p.mem_limit_gib = avail / 1073741824.0;
    agent_th ag;
    char err[HR_ERR_LEN] = "";
    CHECK_EQ(agent_begin(&ag, &p), 0);
    if (!ag.a)
        return;
    int rc = hr_head_wait_ready(ag.a, 0, 20000, err);
    json_t *st = head_status(ag.a);
    int slots = (int)json_integer_value(json_object_get(st, "kv_slots"));
    int slot_ctx = (int)json_integer_value(json_object_get(st, "kv_slot_ctx"));
    printf("no --ctx, no --parallel: ready %d, %d KV slots of %d positions\n", rc == 0, slots,
           slot_ctx);
    CHECK_EQ(rc, 0);
    CHECK_EQ(slots, 4);
    CHECK_EQ(slot_ctx, 512);
    json_decref(st);
    if (rc == 0) {
        static int32_t ids[600];
        for (int i = 0; i < 600; i++)
            ids[i] = 1 + (i * 37) % 900;
        static int rcs[3] = {-1, -1, -1};
        hr_service *svc = hr_head_service(ag.a);
        atomic_store(&g_slots_left, 3);
        for (int i = 0; i < 3; i++) {
            hr_service_req q = hr_service_req_default();
            q.ids = ids;
            q.n_ids = i < 2 ? 8 : 600; /* the third is longer than a slot */
            q.max_tokens = 4;
            q.sp.temperature = 0;
            CHECK_EQ(hr_service_submit(svc, &q, NULL, i < 2 ? slots_done : long_done, &rcs[i], NULL,
                                       err),
                     0);
        }
        double t0 = now_s();
        while ((rcs_left() > 0) && now_s() - t0 < 20)
            sleep_ms(10);
        CHECK_EQ(rcs_left(), 0);
        CHECK_EQ(rcs[0], 0);
        CHECK_EQ(rcs[1], 0);
        CHECK(rcs[2] != 0);
        printf("600-token prompt: %s\n", g_long_err);
        CHECK(strstr(g_long_err, "512") != NULL);
    }
    agents_end(&ag, 1);
}

/* --ctx and --parallel left to the head, memory for the whole model and
 * the KV of 4 slots of the full context: the scheduler's plan holds 4
 * slots of 2048 positions, and so does the same window forced by
 * --windows (forced windows used to share one context, 4 x 512, so the
 * same windows ran with other KV, and other streaming, than the head's). */
static void test_forced_slots(const char *model) {
    const int ctx0 = 2048;
    hr_prof_model pm = {0};
    hr_sched_model sm;
    if (model_inputs(model, ctx0, &pm, &sm)) {
        CHECK(0);
        return;
    }
    hr_prof_model_clear(&pm);
    double need = sm.n_layer * (sm.layer_bytes + 4 * sm.kv_bytes_per_layer) + sm.output_bytes;
    int64_t avail = (int64_t)(model_reserve(model, ctx0, true) + 1.5 * need);
    char file[128];
    CHECK_EQ(save_profile(g_dir, "forcedslots", 4.0, 0.0, avail, file, sizeof file), 0);
    for (int forced = 0; forced <= 1; forced++) {
        hr_agent_params p = agent_params(model, "forcedslots", NULL, 0, 0); /* no --ctx */
        p.wire_dtype = HR_RING_F32;
        p.profile_file = file;
        p.mem_limit_gib = avail / 1073741824.0;
        p.windows = forced ? "12" : NULL;
        agent_th ag;
        char err[HR_ERR_LEN] = "";
        CHECK_EQ(agent_begin(&ag, &p), 0);
        if (!ag.a)
            continue;
        int rc = hr_head_wait_ready(ag.a, 0, 20000, err);
        json_t *st = head_status(ag.a);
        int slots = (int)json_integer_value(json_object_get(st, "kv_slots"));
        int slot_ctx = (int)json_integer_value(json_object_get(st, "kv_slot_ctx"));
        printf("%s: ready %d, %d KV slots of %d positions\n", forced ? "--windows 12" : "scheduler",
               rc == 0, slots, slot_ctx);
        CHECK_EQ(rc, 0);
        CHECK_EQ(slots, 4);
        CHECK_EQ(slot_ctx, ctx0);
        json_decref(st);
        agents_end(&ag, 1);
    }
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_WARN);
    char model[128];
    const char *bin =
        generated_model("planner", 12, 7, "m12.gguf", g_dir, sizeof g_dir, model, sizeof model);
    if (bin) {
        test_live_plan(model);
        test_memory_edge(model);
        test_parallel_fits(model);
        test_slot_ctx(model);
        test_forced_slots(model);
    }
    tmp_dir_remove(g_dir);
    return hr_check_finish("planner");
}
