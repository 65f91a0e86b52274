/* test_profiler.c - the profiler: fake /proc and /sys roots (cgroup v1 and
 * v2 limits, missing and garbage entries), the model profile against the
 * model's own byte counts, the cost model's arithmetic, a quick device
 * profile and its cache, JSON round trips and malformed input, the link
 * probe against the echo responder on 127.0.0.1, and the scheduler
 * converter. Timing-sensitive checks assert ranges, never speeds. */
#include "check.h"

#include "common/log.h"
#include "kernels/quant.h"
#include "mmap/gguf.h"
#include "model/model.h"
#include "profiler/profiler-impl.h"
#include "profiler/profiler.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char g_tmp[256];

/* Writes text to root/rel, creating folders. */
static void put(const char *root, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0700);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void rm_rf(const char *path) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup of %s failed\n", path);
}

/* ---- fake roots ---- */

static void test_fake_root_v1(void) {
    char root[400];
    snprintf(root, sizeof root, "%s/root-v1", g_tmp);
    put(root, "/proc/meminfo",
        "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n"
        "MemAvailable:    8192000 kB\nCached:          2048000 kB\n"
        "Active(file):    1000000 kB\nInactive(file):   500000 kB\n"
        "SwapTotal:       2097148 kB\nSwapFree:        1048574 kB\n");
    put(root, "/proc/self/cgroup",
        "12:pids:/\n4:memory:/hearth/test\n1:cpu,cpuacct:/lab/dev0\n0::/\n");
    put(root, "/proc/self/mountinfo",
        "22 1 0:20 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
        "24 1 0:22 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "23 1 0:21 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    /* CPU quota: the tighter of the cgroup's (0.5 core) and its parent's (1.5) */
    put(root, "/sys/fs/cgroup/cpu,cpuacct/lab/cpu.cfs_quota_us", "150000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/lab/cpu.cfs_period_us", "100000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/lab/dev0/cpu.cfs_quota_us", "1000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/lab/dev0/cpu.cfs_period_us", "2000\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put(root, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put(root, "/sys/fs/cgroup/memory/hearth/test/memory.limit_in_bytes", "536870912\n");
    put(root, "/sys/fs/cgroup/memory/hearth/test/memory.usage_in_bytes", "134217728\n");
    put(root, "/sys/fs/cgroup/memory/hearth/test/memory.stat",
        "cache 100663296\nrss 33554432\nhierarchical_memory_limit 536870912\n"
        "total_cache 100663296\n");
    put(root, "/proc/sys/vm/swappiness", "10\n");
    put(root, "/proc/loadavg", "0.50 0.40 0.30 1/100 1234\n");
    put(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test CPU 9000\n");
    put(root, "/etc/os-release", "NAME=Test\nPRETTY_NAME=\"Test OS 1.0\"\n");
    put(root, "/proc/sys/kernel/osrelease", "9.9.9-test\n");
    put(root, "/proc/sys/kernel/ostype", "Linux\n");
    put(root, "/proc/sys/kernel/hostname", "fakehost\n");
    put(root, "/sys/devices/system/cpu/online", "0-3\n");
    for (int c = 0; c < 4; c++) {
        char rel[128], v[16];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        put(root, rel, "0\n");
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        snprintf(v, sizeof v, "%d\n", c / 2); /* 2 cores x 2 threads */
        put(root, rel, v);
    }
    put(root, "/sys/devices/system/cpu/cpu0/cache/index3/level", "3\n");
    put(root, "/sys/devices/system/cpu/cpu0/cache/index3/size", "16384K\n");
    put(root, "/sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list", "0-3\n");
    put(root, "/sys/devices/system/node/node0/cpulist", "0-3\n");
    put(root, "/sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       16384000 kB\n");
    put(root, "/sys/class/drm/card0/device/vendor", "0x10de\n");
    put(root, "/sys/class/drm/card0/device/device", "0x2330\n");
    put(root, "/sys/class/drm/card0-HDMI-A-1/status", "disconnected\n");

    hr_prof_device *d = calloc(1, sizeof *d);
    hr_prof_device_sysinfo(d, root);
    CHECK_EQ(d->mem.total_bytes, 16384000ll * 1024);
    CHECK_EQ(d->mem.available_bytes, 8192000ll * 1024);
    CHECK_EQ(d->mem.file_lru_bytes, 1500000ll * 1024);
    CHECK_EQ(d->mem.swap_total_bytes, 2097148ll * 1024);
    CHECK_EQ(d->mem.swap_free_bytes, 1048574ll * 1024);
    CHECK_EQ(d->mem.swappiness, 10);
    CHECK_EQ(d->mem.cg_version, 1);
    CHECK_STR(d->mem.cg_path, "/hearth/test");
    CHECK_EQ(d->mem.cg_limit_bytes, 536870912);
    CHECK_EQ(d->mem.cg_usage_bytes, 134217728);
    CHECK_EQ(d->mem.cg_file_bytes, 100663296);
    /* the cgroup bounds the page cache: limit - (usage - cache) */
    CHECK_EQ(d->mem.weights_avail_bytes, 536870912 - (134217728 - 100663296));
    CHECK_STR(d->os.cpu_model, "Test CPU 9000");
    CHECK_STR(d->os.name, "Test OS 1.0");
    CHECK_STR(d->os.release, "9.9.9-test");
    CHECK_STR(d->os.hostname, "fakehost");
    CHECK_STR(d->topo.source, "sysfs");
    CHECK_EQ(d->topo.n_pus, 4);
    CHECK_EQ(d->topo.n_cores, 2);
    CHECK_EQ(d->topo.n_packages, 1);
    CHECK_EQ(d->topo.smt, 2);
    CHECK_EQ(d->topo.n_l3, 1);
    CHECK_EQ(d->topo.l3_bytes, 16ll << 20);
    CHECK_EQ(d->topo.n_numa, 1);
    CHECK_EQ(d->topo.numa[0].n_pus, 4);
    CHECK_EQ(d->topo.numa[0].mem_bytes, 16384000ll * 1024);
    CHECK_EQ(d->n_gpus, 1);
    CHECK(strstr(d->gpus[0], "nvidia") != NULL);
    CHECK_NEAR(d->cpu_quota_cores, 0.5, 1e-12);
    CHECK_NEAR(d->cpu_period_ms, 2.0, 1e-12);
    /* the parent's quota binds when it is the tighter one */
    put(root, "/sys/fs/cgroup/cpu,cpuacct/lab/dev0/cpu.cfs_quota_us", "-1\n");
    hr_prof_device_sysinfo(d, root);
    CHECK_NEAR(d->cpu_quota_cores, 1.5, 1e-12);
    CHECK_NEAR(d->cpu_period_ms, 100.0, 1e-12);
    free(d);
}

static void test_fake_root_v2(void) {
    char root[400];
    snprintf(root, sizeof root, "%s/root-v2", g_tmp);
    put(root, "/proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 6000000 kB\n");
    put(root, "/proc/self/cgroup", "0::/user.slice/hearth.service\n");
    put(root, "/proc/self/mountinfo",
        "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    put(root, "/sys/fs/cgroup/user.slice/memory.max", "1073741824\n");
    put(root, "/sys/fs/cgroup/user.slice/cpu.max", "250000 100000\n");
    put(root, "/sys/fs/cgroup/user.slice/hearth.service/cpu.max", "max 100000\n");
    put(root, "/sys/fs/cgroup/user.slice/hearth.service/memory.max", "max\n");
    put(root, "/sys/fs/cgroup/user.slice/hearth.service/memory.current", "209715200\n");
    put(root, "/sys/fs/cgroup/user.slice/hearth.service/memory.stat",
        "anon 52428800\nfile 157286400\n");
    hr_prof_mem m;
    hr_prof_device *d = calloc(1, sizeof *d);
    hr_prof_device_sysinfo(d, root);
    m = d->mem;
    CHECK_EQ(m.cg_version, 2);
    CHECK_STR(m.cg_path, "/user.slice/hearth.service");
    CHECK_EQ(m.cg_limit_bytes, 1073741824); /* the parent's limit applies */
    CHECK_EQ(m.cg_usage_bytes, 209715200);
    CHECK_EQ(m.cg_file_bytes, 157286400);
    CHECK_EQ(m.weights_avail_bytes, 1073741824 - (209715200 - 157286400));
    CHECK_NEAR(d->cpu_quota_cores, 2.5, 1e-12); /* the parent's cpu.max */
    CHECK_NEAR(d->cpu_period_ms, 100.0, 1e-12);
    CHECK_STR(d->os.cpu_model, "unknown"); /* no cpuinfo */
    CHECK_STR(d->topo.source, "unknown");
    free(d);
}

static void test_fake_root_broken(void) {
    /* empty root: everything unknown, nothing crashes */
    char root[400];
    snprintf(root, sizeof root, "%s/root-empty", g_tmp);
    mkdir(root, 0700);
    hr_prof_device *d = calloc(1, sizeof *d);
    hr_prof_device_sysinfo(d, root);
    CHECK_EQ(d->mem.total_bytes, -1);
    CHECK_EQ(d->mem.available_bytes, -1);
    CHECK_EQ(d->mem.weights_avail_bytes, -1);
    CHECK_EQ(d->mem.cg_version, 0);
    CHECK_NEAR(d->cpu_quota_cores, -1.0, 0);
    CHECK_EQ(d->mem.swappiness, -1);
    CHECK_EQ(d->topo.n_pus, -1);
    CHECK_EQ(d->n_gpus, 0);
    CHECK_STR(d->os.release, "unknown");
    CHECK_STR(d->os.name, "unknown");
    CHECK_STR(d->mem.lru, "unknown");
    /* garbage: truncated and nonsense files */
    snprintf(root, sizeof root, "%s/root-junk", g_tmp);
    put(root, "/proc/meminfo", "MemTotal: lots\nMemAvailable:\n\x01\x02garbage");
    put(root, "/proc/self/cgroup", "nonsense\n::\n4:memory\n");
    put(root, "/proc/self/mountinfo", "x\n - \n1 2 3\n");
    put(root, "/proc/sys/vm/swappiness", "abc");
    put(root, "/sys/devices/system/cpu/online", "zz");
    put(root, "/sys/devices/system/node/node0/cpulist", "");
    put(root, "/proc/loadavg", "");
    hr_prof_device_sysinfo(d, root);
    CHECK_EQ(d->mem.total_bytes, -1);
    CHECK_EQ(d->mem.swappiness, -1);
    CHECK_EQ(d->mem.cg_version, 0);
    CHECK(d->topo.n_pus <= 0);
    /* a cgroup whose files are missing */
    snprintf(root, sizeof root, "%s/root-cgmiss", g_tmp);
    put(root, "/proc/self/cgroup", "4:memory:/gone\n");
    put(root, "/proc/self/mountinfo",
        "22 1 0:20 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    hr_prof_device_sysinfo(d, root);
    CHECK_EQ(d->mem.cg_version, 1);
    CHECK_EQ(d->mem.cg_limit_bytes, -1);
    CHECK_EQ(d->mem.cg_usage_bytes, -1);
    free(d);
}

/* ---- model profile ---- */

typedef struct {
    hr_gguf *g;
    hr_model *m;
} loaded;

static int load(loaded *l, const char *name) {
    char path[512], err[HR_ERR_LEN] = "";
    hr_shared_path(name, path, sizeof path);
    memset(l, 0, sizeof *l);
    if (hr_gguf_open(&l->g, path, err) || hr_model_load(&l->m, l->g, err)) {
        fprintf(stderr, "cannot load %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

static void unload(loaded *l) {
    hr_model_free(l->m);
    hr_gguf_close(l->g);
}

static void test_model_profile(hr_prof_model *keep) {
    loaded l;
    CHECK_EQ(load(&l, "models/small-llama-q4_k_m.gguf"), 0);
    if (!l.m)
        return;
    char err[HR_ERR_LEN] = "";
    hr_prof_model pm;
    CHECK_EQ(hr_prof_model_build(&pm, l.m, l.g, err), 0);
    const hr_hparams *hp = hr_model_hparams(l.m);
    CHECK_EQ(pm.n_layer, hp->n_layer);
    CHECK_EQ(pm.n_layers_listed, hp->n_layer);
    CHECK_EQ(pm.n_embd, 256);
    CHECK_EQ(pm.file_bytes, hr_gguf_file_size(l.g));
    CHECK_EQ(pm.kv_bytes_per_token, 2ull * hp->n_head_kv * hp->head_dim * 2);
    CHECK_EQ(pm.hidden_bytes, (uint64_t)hp->n_embd * 4); /* f32 wire */
    CHECK_EQ(pm.output.bytes, hr_model_output_bytes(l.m));
    CHECK_EQ(pm.embd_row_bytes, hr_model_tok_embd(l.m)->row_bytes);
    for (int il = 0; il < pm.n_layer; il++) {
        const hr_prof_layer *L = &pm.layers[il];
        CHECK_EQ(L->bytes, hr_model_layer_bytes(l.m, il));
        uint64_t tb = 0, params = 0;
        for (int i = 0; i < L->n_types; i++) {
            tb += L->types[i].bytes;
            params += L->types[i].params;
        }
        /* matrices + the two f32 norm vectors */
        CHECK_EQ(tb + 2ull * hp->n_embd * 4, L->bytes);
        CHECK_NEAR(L->flops, 2.0 * (double)params, 0.5);
        CHECK_EQ(L->n_calls, 4); /* qkv, o, gate+up, down */
    }
    int types[HR_PROF_MAX_TYPES];
    int nt = hr_prof_model_types(&pm, types, HR_PROF_MAX_TYPES);
    bool q4k = false, q6k = false;
    for (int i = 0; i < nt; i++) {
        q4k |= types[i] == HR_TYPE_Q4_K;
        q6k |= types[i] == HR_TYPE_Q6_K;
    }
    CHECK(q4k && q6k);
    uint64_t all = hr_prof_model_window_bytes(&pm, 0, pm.n_layer, true, true);
    uint64_t sum = pm.embd_row_bytes + pm.output.bytes;
    for (int il = 0; il < pm.n_layer; il++)
        sum += hr_model_layer_bytes(l.m, il);
    CHECK_EQ(all, sum);
    CHECK_EQ(pm.elems.swiglu, hp->n_ff);
    CHECK_EQ(pm.elems.f16, 2ll * hp->n_head_kv * hp->head_dim);
    hr_prof_model copy;
    CHECK_EQ(hr_prof_model_copy(&copy, &pm), 0);
    CHECK(copy.layers != pm.layers);
    CHECK_EQ(copy.layers[1].bytes, pm.layers[1].bytes);
    hr_prof_model_clear(&copy);
    hr_prof_model_clear(&copy); /* idempotent */
    *keep = pm;
    unload(&l);
}

/* ---- cost model ---- */

static void synthetic_device(hr_prof_device *d) {
    memset(d, 0, sizeof *d);
    d->version = HR_PROF_VERSION;
    d->n_rates = 0;
    int types[] = {HR_TYPE_Q4_K, HR_TYPE_Q6_K, HR_TYPE_F16};
    for (int t = 0; t < 3; t++)
        for (int nt = 1; nt <= 2; nt++)
            d->rates[d->n_rates++] = (hr_prof_rate){.type = types[t],
                                                    .n_threads = nt,
                                                    .matvec_gbs = 5.0 * nt / (t + 1),
                                                    .matvec_call_us = 10.0,
                                                    .matmat_gflops = 20.0 * nt};
    d->n_opcosts = 2;
    d->opcosts[0] = (hr_prof_opcost){1, 2.0, 1.0, 0.5};
    d->opcosts[1] = (hr_prof_opcost){2, 4.0, 0.5, 0.25};
    d->eltwise = (hr_prof_eltwise){1.0, 0.5, 2.0, 3.0, 1.5};
    d->membw_1t_gbs = 10.0;
    d->membw_all_gbs = 15.0;
    d->disk.mmap_mbs = 500.0;
    d->disk.seq_mbs = 800.0;
    d->mem.weights_avail_bytes = 1 << 30;
    snprintf(d->os.sysname, sizeof d->os.sysname, "Linux");
    snprintf(d->os.hostname, sizeof d->os.hostname, "synthetic");
}

/* The engine probe on the fixture model: real decode steps of its first
 * layers against the synthetic rates' prediction. */
static void test_probe(void) {
    loaded l;
    CHECK_EQ(load(&l, "models/small-llama-q4_k_m.gguf"), 0);
    if (!l.m)
        return;
    char err[HR_ERR_LEN] = "";
    hr_prof_model pm;
    CHECK_EQ(hr_prof_model_build(&pm, l.m, l.g, err), 0);
    hr_prof_device *d = calloc(1, sizeof *d);
    synthetic_device(d);
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 2, 0.05, err), 0);
    CHECK_EQ(d->engine_layers, 2);
    CHECK_EQ(d->engine_threads, 2);
    CHECK(d->engine_ms > 0 && d->engine_pred_ms > 0);
    CHECK(d->engine_window_s >= 0.05);
    CHECK_NEAR(d->engine_factor, d->engine_ms / d->engine_pred_ms, 1e-12);
    /* the prediction is the cost model's for layers [0, 2) at 2 threads */
    hr_prof_cost_params cp = hr_prof_cost_params_default();
    cp.n_threads = 2;
    cp.n_past = 0;
    hr_prof_cost c;
    double f = d->engine_factor;
    d->engine_factor = -1.0;
    CHECK_EQ(hr_prof_cost_window(d, &pm, NULL, 0, 2, &cp, &c, err), 0);
    CHECK(d->engine_pred_ms >= c.total_ms); /* attention over >= 0 positions */
    d->engine_factor = f;
    /* the cost model takes the factor at the probe's thread count only */
    CHECK_NEAR(hr_prof_device_sustain(d, 2), f, 0);
    CHECK_NEAR(hr_prof_device_sustain(d, 1), 1.0, 0);
    hr_prof_cost c2;
    CHECK_EQ(hr_prof_cost_window(d, &pm, NULL, 0, 2, &cp, &c2, err), 0);
    CHECK_NEAR(c2.total_ms, f * c.total_ms, 1e-9 * c.total_ms);
    /* under a CPU quota below its threads: single steps first, each after
     * an idle spell of a quota period at least, then the steps back to back
     * for twice the window; without one (or under one it cannot exceed)
     * only back to back */
    d->cpu_quota_cores = -1.0;
    double t0 = now_s();
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.1, err), 0);
    double plain = now_s() - t0, plain_w = d->engine_window_s;
    int plain_n = d->engine_attempts;
    CHECK_NEAR(d->engine_burst_ms, 0.0, 0);
    /* three attempts, 0.2 s and 0.4 s apart; the median's rate stands and
     * the range over it is the spread */
    CHECK_INT(plain_n, ==, 3);
    CHECK(d->engine_spread >= 0 && isfinite(d->engine_spread));
    d->cpu_quota_cores = 0.5;
    d->cpu_period_ms = 20.0;
    t0 = now_s();
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.1, err), 0);
    double paced = now_s() - t0, paced_w = d->engine_window_s;
    CHECK_INT(d->engine_attempts, ==, 3);
    CHECK(d->engine_spread >= 0 && isfinite(d->engine_spread));
    printf("engine probe: %.3f s for a %.3f s window back to back, %.3f s for %.3f s paced "
           "(%.3f ms per step back to back, %.3f single)\n",
           plain, plain_w, paced, paced_w, d->engine_ms, d->engine_burst_ms);
    CHECK(paced_w >= 0.2); /* twice the window back to back */
    /* eight single steps an attempt, each after 20 ms at least */
    CHECK(paced >= 3 * (paced_w + 8 * 0.020));
    CHECK_NEAR(d->engine_round_ms, 0.0, 0);
    /* no quota really throttles this test: single steps and steps back to
     * back do the same work at about the same speed */
    CHECK(d->engine_burst_ms > d->engine_ms / 3 && d->engine_burst_ms < 3 * d->engine_ms);
    /* each attempt runs about its window (the kept one's, within 1.5x) */
    CHECK(plain < plain_n * (1.5 * plain_w + 0.05) + 0.1 * plain_n * (plain_n - 1));
    d->cpu_quota_cores = 1.0; /* one thread under a one-core quota: back to back */
    t0 = now_s();
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.1, err), 0);
    int n = d->engine_attempts;
    CHECK(now_s() - t0 < n * (1.5 * d->engine_window_s + 0.05) + 0.1 * n * (n - 1));
    CHECK_NEAR(d->engine_burst_ms, 0.0, 0);
    d->cpu_quota_cores = -1.0;
    /* little memory: one layer; none: refused, the factor unset */
    d->mem.weights_avail_bytes = (int64_t)(2 * hr_prof_model_window_bytes(&pm, 0, 1, false, false));
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_EQ(d->engine_layers, 1);
    /* a last-level cache that holds two layers: more layers, while their
     * bytes are below three times it and the next fits in 3/4 of the
     * memory left for weights (4 layers in the fixture) */
    uint64_t w1 = hr_prof_model_window_bytes(&pm, 0, 1, false, false);
    uint64_t w2 = hr_prof_model_window_bytes(&pm, 0, 2, false, false);
    uint64_t w3 = hr_prof_model_window_bytes(&pm, 0, 3, false, false);
    d->mem.weights_avail_bytes = 1 << 30;
    d->topo.l3_bytes = (int64_t)w1; /* 3x: below three layers' bytes */
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, 3);
    CHECK(w2 < 3 * w1 && w3 >= 3 * w1); /* the fixture's layers are about equal */
    d->topo.l3_bytes = (int64_t)w3;     /* the whole model within 3x: every layer */
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, pm.n_layer);
    /* memory: the third layer's bytes above 3/4 of what is left */
    d->mem.weights_avail_bytes = (int64_t)((double)w3 / 0.75) - 1;
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, 2);
    /* paced steps (a quota of 20 ms periods) grow only while their bytes
     * take at most 4 periods at the one-thread memory bandwidth: 3 here */
    d->cpu_quota_cores = 0.5;
    d->mem.weights_avail_bytes = 1 << 30;
    d->membw_1t_gbs = (double)w3 / (4 * 20.0 * 1e6);
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, 3);
    d->membw_1t_gbs = -1.0; /* unknown: two */
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, 2);
    d->membw_1t_gbs = 10.0;
    d->cpu_quota_cores = -1.0;
    d->topo.l3_bytes = 0; /* unknown: two */
    d->mem.weights_avail_bytes = 1 << 30;
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), 0);
    CHECK_INT(d->engine_layers, ==, 2);
    d->mem.weights_avail_bytes = 1000;
    CHECK_EQ(hr_prof_engine_probe(d, l.m, &pm, 1, 0.01, err), HR_ENOMEM);
    CHECK_NEAR(d->engine_factor, -1.0, 0);
    CHECK_NEAR(hr_prof_device_sustain(d, 1), 1.0, 0);
    free(d);
    hr_prof_model_clear(&pm);
    unload(&l);
}

static void test_cost(const hr_prof_model *pm) {
    hr_prof_device *d = calloc(1, sizeof *d);
    synthetic_device(d);
    char err[HR_ERR_LEN] = "";
    hr_prof_cost_params cp = hr_prof_cost_params_default();
    cp.n_threads = 2;
    cp.n_past = 100;
    hr_prof_cost c;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 1, &cp, &c, err), 0);
    /* memory: bytes / rate per type */
    const hr_prof_layer *L = &pm->layers[0];
    double mem = 0;
    for (int i = 0; i < L->n_types; i++) {
        const hr_prof_rate *r = hr_prof_device_rate(d, L->types[i].type, 2);
        CHECK(r != NULL);
        if (r)
            mem += (double)L->types[i].bytes / (r->matvec_gbs * 1e9) * 1e3;
    }
    CHECK_NEAR(c.memory_ms, mem, 1e-9);
    /* compute: 4 calls x 10 us + pool 4 us + attention + element-wise */
    double attn_us = 4.0 + pm->n_head * 100.0 * (0.5 + 0.25 * pm->head_dim) * 1e-3;
    double elt_us = (pm->elems.norm * 1.0 + pm->elems.add * 0.5 + pm->elems.rope * 2.0 +
                     pm->elems.swiglu * 3.0 + pm->elems.f16 * 1.5) *
                    1e-3;
    CHECK_NEAR(c.compute_ms, (4 * 10.0 + attn_us + elt_us) * 1e-3, 1e-9);
    CHECK_NEAR(c.disk_ms, 0.0, 0);
    CHECK_NEAR(c.comm_ms, 0.0, 0);
    CHECK_NEAR(c.total_ms, c.memory_ms + c.compute_ms, 1e-12);
    CHECK_EQ(c.n_threads, 2);
    CHECK(c.prefill_ms > 0);
    /* windows add up */
    hr_prof_cost c2, c12;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 1, 2, &cp, &c2, err), 0);
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 2, &cp, &c12, err), 0);
    CHECK_NEAR(c12.total_ms, c.total_ms + c2.total_ms, 1e-9);
    /* disk: nothing resident -> every byte at the mmap rate */
    cp.resident_bytes = 0;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 2, &cp, &c, err), 0);
    double wb = (double)hr_prof_model_window_bytes(pm, 0, 2, false, false);
    CHECK_NEAR(c.disk_ms, wb / 500e6 * 1e3, 1e-9);
    /* comm: one hop */
    hr_prof_link l = {.rtt_us = 200.0, .bw_mbs = 100.0};
    cp.resident_bytes = UINT64_MAX;
    cp.n_hops = 1;
    CHECK_EQ(hr_prof_cost_window(d, pm, &l, 0, 2, &cp, &c, err), 0);
    CHECK_NEAR(c.comm_ms, 0.1 + (double)pm->hidden_bytes / 100e6 * 1e3, 1e-9);
    /* a CPU quota: the measured sustained factor stretches CPU times (not
     * disk or link); without a measurement, threads / quota cores */
    cp.n_hops = 0;
    cp.n_threads = 2;
    hr_prof_cost qbase, q;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 2, &cp, &qbase, err), 0);
    d->cpu_quota_cores = 0.5;
    CHECK_NEAR(hr_prof_device_sustain(d, 2), 4.0, 1e-12);
    d->n_sustain = 2;
    d->sustain[0] = (hr_prof_sustain){.n_threads = 1, .factor = 1.5, .window_s = 0.2};
    d->sustain[1] = (hr_prof_sustain){.n_threads = 2, .factor = 2.5, .window_s = 0.2};
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 2, &cp, &q, err), 0);
    CHECK_NEAR(q.memory_ms, 2.5 * qbase.memory_ms, 1e-9);
    CHECK_NEAR(q.compute_ms, 2.5 * qbase.compute_ms, 1e-9);
    CHECK_NEAR(q.prefill_ms, 2.5 * qbase.prefill_ms, 1e-9);
    CHECK_NEAR(hr_prof_device_sustain(d, 1), 1.5, 1e-12);
    CHECK_NEAR(hr_prof_device_sustain(d, 4), 2.5, 1e-12); /* nearest measured */
    d->cpu_quota_cores = -1.0;
    d->n_sustain = 0;
    CHECK_NEAR(hr_prof_device_sustain(d, 2), 1.0, 0);
    /* best threads: 2 threads stream faster in the synthetic device */
    cp.n_threads = 0;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 2, &cp, &c, err), 0);
    CHECK_EQ(c.n_threads, 2);
    /* output + input add their terms */
    cp.n_hops = 0;
    cp.n_threads = 1;
    hr_prof_cost base, io;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 0, &cp, &base, err), 0);
    CHECK_NEAR(base.total_ms, 0.0, 1e-12);
    cp.output = cp.input = true;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 0, &cp, &io, err), 0);
    CHECK(io.memory_ms > 0 && io.compute_ms > 0);
    /* bad windows */
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 2, 1, &cp, &c, err), HR_EINVAL);
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, pm->n_layer + 1, &cp, &c, err), HR_EINVAL);
    d->n_rates = 0;
    CHECK_EQ(hr_prof_cost_window(d, pm, NULL, 0, 1, &cp, &c, err), HR_EINVAL);
    /* steady state of a cyclic pass: all or nothing */
    CHECK_EQ(hr_prof_steady_resident(100, 200), 100);
    CHECK_EQ(hr_prof_steady_resident(300, 200), 0);
    CHECK_EQ(hr_prof_steady_resident(300, -1), 300);
    free(d);
}

/* ---- scheduler converter ---- */

static void test_sched(const hr_prof_model *pm) {
    hr_prof_device *d = calloc(1, sizeof *d);
    synthetic_device(d);
    char err[HR_ERR_LEN] = "";
    hr_sched_model sm;
    CHECK_EQ(hr_prof_to_sched_model(pm, 1024, &sm, err), 0);
    CHECK_EQ(sm.n_layer, pm->n_layer);
    CHECK_NEAR(sm.kv_bytes_per_layer, (double)pm->kv_bytes_per_token * 1024, 0);
    CHECK_NEAR(sm.output_bytes, (double)pm->output.bytes, 0);
    CHECK_NEAR(sm.hidden_bytes, (double)pm->hidden_bytes, 0);
    hr_prof_sched_params sp = hr_prof_sched_params_default();
    sp.is_head = true;
    sp.n_ctx = 1024;
    sp.reserve_bytes = 1 << 20;
    hr_prof_link l = {.rtt_us = 500.0, .bw_mbs = 50.0};
    hr_sched_device sd;
    CHECK_EQ(hr_prof_to_sched_device(d, pm, &l, &sp, &sd, err), 0);
    CHECK_EQ(sd.n_thread_rates, 2);
    CHECK(sd.decode_ms[0] > sd.decode_ms[1]);
    CHECK(sd.prefill_ms[0] > 0 && sd.prefill_ms[1] > 0);
    CHECK_NEAR(sd.mem_bytes, (double)((1 << 30) - (1 << 20)), 0);
    CHECK_NEAR(sd.disk_bps, 500e6, 0);
    CHECK_NEAR(sd.rtt_ms, 0.5, 1e-12);
    CHECK_NEAR(sd.link_bps, 50e6, 0);
    CHECK(sd.t_head_ms > 0);
    CHECK(sd.is_head);
    CHECK_EQ(sd.os, HR_SCHED_OS_LINUX);
    CHECK_NEAR(sd.throttle_slope, 0.0, 0); /* no quota */
    /* a CPU quota of half a core in 5 ms periods, probed at one thread:
     * 10 ms a step back to back, 4 ms single steps. Unthrottled times are
     * 4 / 10 of the sustained ones; a burst takes max(c, 2.5 c - save),
     * save = a (2.5 - 1) with a = 2.5 ms (a burst after a period's start
     * has the whole share); a round with the share spent waits (5 - a)^2 / 10 */
    hr_prof_device *q = calloc(1, sizeof *q);
    *q = *d;
    q->cpu_quota_cores = 0.5;
    q->cpu_period_ms = 5.0;
    q->engine_layers = 2;
    q->engine_threads = 1;
    q->engine_ms = 10.0;
    q->engine_pred_ms = 8.0;
    q->engine_factor = 1.25;
    q->engine_burst_ms = 4.0;
    double fr, slope, save, wait;
    CHECK(hr_prof_throttle(q, 1, &fr, &slope, &save, &wait));
    CHECK_NEAR(fr, 0.4, 1e-12);
    CHECK_NEAR(slope, 2.5, 1e-12);
    CHECK_NEAR(save, 2.5 * 1.5, 1e-12);
    CHECK_NEAR(wait, 2.5 * 2.5 / 10, 1e-12); /* (5 - 2.5)^2 / (2 * 5) */
    hr_sched_device sq, s0;
    CHECK_EQ(hr_prof_to_sched_device(q, pm, &l, &sp, &sq, err), 0);
    CHECK_NEAR(sq.throttle_slope, 2.5, 1e-12);
    CHECK_NEAR(sq.throttle_save_ms, save, 1e-12);
    CHECK_NEAR(sq.throttle_wait_ms, wait, 1e-12);
    CHECK_NEAR(sq.throttle_period_ms, 5.0, 0);
    CHECK_NEAR(sq.t_round_ms, 0.0, 0);
    CHECK_NEAR(sq.read_cpu_ms_mb, 0.0, 0); /* the synthetic disk's is unknown */
    q->disk.read_cpu_ms_mb = 1.25;
    CHECK_EQ(hr_prof_to_sched_device(q, pm, &l, &sp, &sq, err), 0);
    CHECK_NEAR(sq.read_cpu_ms_mb, 1.25, 0); /* counted under its quota */
    q->engine_burst_ms = 0;                 /* no single steps: the sustained rates as they are */
    CHECK_EQ(hr_prof_to_sched_device(q, pm, &l, &sp, &s0, err), 0);
    CHECK_NEAR(s0.throttle_slope, 0.0, 0);
    CHECK_NEAR(s0.throttle_wait_ms, 0.0, 0);
    CHECK_NEAR(s0.read_cpu_ms_mb, 0.0, 0); /* no quota term: reads run beside */
    CHECK_NEAR(sq.decode_ms[0], 0.4 * s0.decode_ms[0], 1e-9 * s0.decode_ms[0]);
    CHECK_NEAR(sq.t_head_ms, 0.4 * s0.t_head_ms, 1e-9 * s0.t_head_ms);
    CHECK_NEAR(sq.prefill_ms[0], s0.prefill_ms[0], 0); /* a batch is long: sustained */
    CHECK(!hr_prof_throttle(q, 1, &fr, &slope, &save, &wait));
    CHECK_NEAR(fr, 1.0, 0);
    q->engine_burst_ms = 9.8; /* within 5% of back to back: no throttling measured */
    CHECK(!hr_prof_throttle(q, 1, &fr, &slope, &save, &wait));
    q->engine_burst_ms = 4.0;
    CHECK(!hr_prof_throttle(q, 2, &fr, &slope, &save, &wait)); /* not probed at 2 threads */
    q->cpu_quota_cores = 1.0;                                  /* cannot throttle one thread */
    CHECK(!hr_prof_throttle(q, 1, &fr, &slope, &save, &wait));
    q->cpu_quota_cores = -1.0;
    CHECK(!hr_prof_throttle(q, 1, &fr, &slope, &save, &wait));
    CHECK_NEAR(slope, 0.0, 0);
    CHECK_NEAR(wait, 0.0, 0);
    free(q);
    /* the scheduler takes what we give it */
    hr_sched_device devs[2] = {sd, sd};
    devs[1].is_head = false;
    hr_sched_plan *plan = calloc(1, sizeof *plan);
    int rc = hr_sched_solve(&sm, devs, 2, NULL, plan, err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "scheduler: %s\n", err);
    else
        CHECK(plan->latency_ms > 0);
    free(plan);
    free(d);
}

/* ---- device profile and cache ---- */

/* The probe pooled over starts: the median of the last HR_PROBE_HISTORY
 * results kept in the cache folder, per device, shape and thread count. */
static void test_probe_history(const hr_prof_model *pm) {
    char cache[400];
    snprintf(cache, sizeof cache, "%s/probe-cache", g_tmp);
    hr_prof_params p = hr_prof_params_default();
    p.cache_dir = cache;
    hr_prof_device *d = calloc(1, sizeof *d);
    synthetic_device(d);
    snprintf(d->fingerprint, sizeof d->fingerprint, "00112233aabbccdd");
    /* one start's figures, as hr_prof_engine_probe leaves them */
#define START(ms_, spread_)                                                                        \
    do {                                                                                           \
        d->engine_layers = 2;                                                                      \
        d->engine_threads = 1;                                                                     \
        d->engine_ms = (ms_);                                                                      \
        d->engine_burst_ms = (ms_) / 10;                                                           \
        d->engine_pred_ms = 5.0;                                                                   \
        d->engine_factor = d->engine_ms / d->engine_pred_ms;                                       \
        d->engine_spread = (spread_);                                                              \
        d->engine_attempts = 3;                                                                    \
        d->engine_starts = 1;                                                                      \
    } while (0)
    START(10.0, 0.05);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 1); /* the first start: its own figures */
    CHECK_NEAR(d->engine_ms, 10.0, 0);
    CHECK_NEAR(d->engine_spread, 0.05, 0);
    START(14.0, 0.05);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 2);
    CHECK_NEAR(d->engine_ms, 12.0, 1e-12);      /* the median of two: their mean */
    CHECK_NEAR(d->engine_burst_ms, 1.2, 1e-12); /* the single steps' median likewise */
    CHECK_NEAR(d->engine_factor, 12.0 / 5.0, 1e-12);
    CHECK_NEAR(d->engine_spread, 4.0 / 12.0, 1e-12); /* the starts' range over the median */
    START(11.0, 0.5);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 3);
    CHECK_NEAR(d->engine_ms, 11.0, 1e-12);
    CHECK_NEAR(d->engine_spread, 0.5, 0); /* this start's own, larger */
    START(30.0, 0.0);
    START(30.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 4);
    START(30.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 5);
    CHECK_NEAR(d->engine_ms, 14.0, 1e-12); /* 10 11 14 30 30 */
    START(30.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 5); /* the oldest (10) went */
    CHECK_NEAR(d->engine_ms, 30.0, 1e-12);               /* 11 14 30 30 30 */
    /* another thread count is another history */
    START(7.0, 0.0);
    d->engine_threads = 2;
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 1);
    CHECK_NEAR(d->engine_ms, 7.0, 0);
    /* no probe, no cache folder: left as they are */
    START(9.0, 0.0);
    d->engine_factor = -1.0;
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 0);
    START(9.0, 0.0);
    hr_prof_params nc = p;
    nc.use_cache = false;
    CHECK_INT(hr_prof_engine_history(d, pm, &nc), ==, 1);
    CHECK_NEAR(d->engine_ms, 9.0, 0);
    /* a damaged file is replaced, not trusted */
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "for f in %s/probe-*.json; do printf '{\"version\":1,\"runs\":[{\"ms\":-1,\"at\":1},' "
             ">\"$f\"; done",
             cache);
    CHECK_EQ(system(cmd), 0);
    START(20.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 1);
    CHECK_NEAR(d->engine_ms, 20.0, 0);
    START(22.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 2);
    CHECK_NEAR(d->engine_ms, 21.0, 1e-12);
    /* a result older than HR_PROBE_HIST_MAX_AGE_S no longer counts */
    long now = (long)time(NULL);
    snprintf(cmd, sizeof cmd,
             "for f in %s/probe-*.json; do printf '{\"version\":2,\"runs\":[{\"ms\":50,"
             "\"burst_ms\":0,\"at\":%ld},{\"ms\":40,\"burst_ms\":0,\"at\":%ld}]}' >\"$f\"; "
             "done",
             cache, now - (long)HR_PROBE_HIST_MAX_AGE_S - 60, now - 100);
    CHECK_EQ(system(cmd), 0);
    START(20.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 2);
    CHECK_NEAR(d->engine_ms, 30.0, 1e-12);
    /* a history of the older kind (version 1: under a quota its ms was a
     * slope, not a sustained rate) is started over */
    snprintf(cmd, sizeof cmd,
             "for f in %s/probe-*.json; do printf '{\"version\":1,\"runs\":[{\"ms\":50,"
             "\"round_ms\":0,\"at\":%ld}]}' >\"$f\"; done",
             cache, now - 100);
    CHECK_EQ(system(cmd), 0);
    START(20.0, 0.0);
    CHECK_INT(hr_prof_engine_history(d, pm, &p), ==, 1);
#undef START
    free(d);
}

/* The cache hit expected of hr_prof_device_measure(d, p), the cache written
 * with `then` bytes of available memory: a cached profile is measured again when the available
 * memory moved by over 256 MiB and 20% since it was taken (hr_mem_changed), which other tests
 * running beside this one can cause. So a miss must come with such a move (its measure is then
 * cached, and the next call is tried); up to three calls. */
static double g_hit_s; /* seconds of hits_cache's last call */

static bool hits_cache(hr_prof_device *d, const hr_prof_params *p, int64_t then) {
    char err[HR_ERR_LEN] = "";
    for (int i = 0; i < 3; i++, then = d->mem.weights_avail_bytes) {
        double t0 = now_s();
        int rc = hr_prof_device_measure(d, p, err);
        g_hit_s = now_s() - t0;
        if (rc != 0)
            return false;
        if (d->from_cache)
            return true;
        int64_t now = d->mem.weights_avail_bytes, diff = now > then ? now - then : then - now;
        int64_t big = now > then ? now : then;
        if (then < 0 || now < 0 || diff <= (256ll << 20) || (double)diff <= 0.2 * (double)big) {
            fprintf(stderr, "cache missed with the available memory at %lld then %lld bytes\n",
                    (long long)then, (long long)now);
            return false;
        }
    }
    return false;
}

static void test_device_and_cache(void) {
    char cache[400], model[512], err[HR_ERR_LEN] = "";
    snprintf(cache, sizeof cache, "%s/cache", g_tmp);
    hr_shared_path("models/small-llama-q4_0.gguf", model, sizeof model);
    hr_prof_params p = hr_prof_params_default();
    p.quick = true;
    p.cache_dir = cache;
    p.cache_busy = true; /* the cache's mechanics, however busy the test machine is */
    p.model_path = model;
    p.types[0] = HR_TYPE_Q4_0;
    p.types[1] = HR_TYPE_Q6_K;
    p.types[2] = 999; /* unknown: skipped with a warning */
    p.n_types = 3;
    p.threads[0] = 1;
    p.n_threads = 1;
    p.row_len = 256;
    hr_prof_device *d = calloc(1, sizeof *d), *d2 = calloc(1, sizeof *d2);
    double t0 = now_s();
    int rc = hr_prof_device_measure(d, &p, err);
    double t_first = now_s() - t0;
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "measure: %s\n", err);
    printf("quick device profile: %.2f s\n", t_first);
    CHECK(!d->from_cache);
    /* a bound against a hang, not a speed target (sanitizer builds on a busy
     * 2-core machine take 13 s; the speed is printed above) */
    CHECK(t_first < 60.0);
    CHECK_EQ(d->n_rates, 2);
    CHECK_EQ(d->row_len, 256);
    for (int i = 0; i < d->n_rates; i++) {
        CHECK(d->rates[i].matvec_gbs > 0.01 && d->rates[i].matvec_gbs < 1000);
        CHECK(d->rates[i].matvec_call_us >= 0 && d->rates[i].matvec_call_us < 1e5);
        CHECK(d->rates[i].matmat_gflops > 0.01 && d->rates[i].matmat_gflops < 1e5);
        CHECK_EQ(d->rates[i].n_threads, 1);
    }
    CHECK(hr_prof_device_rate(d, HR_TYPE_Q4_0, 1) != NULL);
    CHECK(hr_prof_device_rate(d, HR_TYPE_Q4_0, 8) != NULL); /* nearest thread count */
    CHECK(hr_prof_device_rate(d, HR_TYPE_Q8_0, 1) == NULL);
    CHECK(d->membw_1t_gbs > 0.1 && d->membw_all_gbs > 0.1);
    CHECK(d->kv_copy_gbs > 0.1);
    CHECK(d->eltwise.norm_ns > 0 && d->eltwise.swiglu_ns > 0 && d->eltwise.f16_ns > 0);
    CHECK_EQ(d->n_opcosts, 1);
    CHECK(d->opcosts[0].attn_dim_ns >= 0 && d->opcosts[0].attn_pos_ns >= 0);
    CHECK(d->opcosts[0].attn_dim_ns + d->opcosts[0].attn_pos_ns > 0);
    CHECK(d->disk.seq_mbs > 0);
    /* the mmap faults' CPU time: measured wherever their rate is */
    CHECK(d->disk.mmap_mbs <= 0 || (d->disk.read_cpu_ms_mb > 0 && d->disk.read_cpu_ms_mb < 1e3));
    CHECK(d->disk.rand_iops > 0);
    CHECK(strcmp(d->disk.method, "none") != 0);
    CHECK(d->mem.total_bytes > 0);
    CHECK(d->topo.n_pus >= 1);
    CHECK(strlen(d->fingerprint) == 16);
    /* the measured profile feeds the scheduler */
    {
        loaded l;
        CHECK_EQ(load(&l, "models/small-llama-q4_0.gguf"), 0);
        hr_prof_model pm;
        memset(&pm, 0, sizeof pm);
        if (l.m && hr_prof_model_build(&pm, l.m, l.g, err) == 0) {
            hr_sched_model sm;
            hr_sched_device sd;
            hr_prof_sched_params sp = hr_prof_sched_params_default();
            sp.is_head = true;
            sp.n_ctx = 512;
            CHECK_EQ(hr_prof_to_sched_model(&pm, sp.n_ctx, &sm, err), 0);
            CHECK_EQ(hr_prof_to_sched_device(d, &pm, NULL, &sp, &sd, err), 0);
            CHECK(sd.decode_ms[0] > 0 && sd.mem_bytes > 0 && sd.disk_bps > 0);
            hr_sched_plan *plan = calloc(1, sizeof *plan);
            CHECK_EQ(hr_sched_solve(&sm, &sd, 1, NULL, plan, err), 0);
            CHECK(plan->latency_ms > 0);
            free(plan);
        }
        hr_prof_model_clear(&pm);
        unload(&l);
    }
    /* second run: the cache, fast */
    CHECK(hits_cache(d2, &p, d->mem.weights_avail_bytes));
    double t_second = g_hit_s;
    printf("cached device profile: %.3f s\n", t_second);
    /* from_cache above is the assertion; this only guards against a hang
     * (the time is printed; sanitizer builds on a busy machine are slow) */
    CHECK(t_second < 10.0);
    CHECK_STR(d2->fingerprint, d->fingerprint);
    CHECK_EQ(d2->n_rates, d->n_rates);
    CHECK_NEAR(d2->rates[0].matvec_gbs, d->rates[0].matvec_gbs, 0);
    CHECK_NEAR(d2->disk.seq_mbs, d->disk.seq_mbs, 0);
    /* free memory that changed materially invalidates the cache */
    {
        char cpath[700];
        snprintf(cpath, sizeof cpath, "%s/device-%s.json", cache, d->fingerprint);
        hr_prof_device *c = calloc(1, sizeof *c);
        FILE *cf = fopen(cpath, "r");
        char *text = calloc(1, 1 << 20);
        size_t n = cf ? fread(text, 1, (1 << 20) - 1, cf) : 0;
        if (cf)
            fclose(cf);
        CHECK(n > 0);
        CHECK_EQ(hr_prof_device_parse(text, n, c, err), 0);
        c->mem.weights_avail_bytes /= 3;
        char *j = NULL;
        CHECK_EQ(hr_prof_device_to_json(c, &j, err), 0);
        cf = fopen(cpath, "w");
        if (cf && j) {
            fputs(j, cf);
            fclose(cf);
        }
        rc = hr_prof_device_measure(d2, &p, err);
        CHECK_EQ(rc, 0);
        CHECK(!d2->from_cache);
        CHECK(hits_cache(d2, &p, d2->mem.weights_avail_bytes)); /* rewritten: hits again */
        free(j);
        free(text);
        free(c);
    }
    /* a different request misses */
    hr_prof_params p2 = p;
    p2.n_types = 1;
    rc = hr_prof_device_measure(d2, &p2, err);
    CHECK_EQ(rc, 0);
    CHECK(!d2->from_cache);
    CHECK(strcmp(d2->fingerprint, d->fingerprint) != 0);
    /* force re-measures */
    p2.force = true;
    rc = hr_prof_device_measure(d2, &p2, err);
    CHECK(!d2->from_cache);
    /* a corrupt cache file is ignored (warning), not trusted */
    char path[700];
    snprintf(path, sizeof path, "%s/device-%s.json", cache, d->fingerprint);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{\"schema\": \"hearth.profile\", \"version\": 1, \"device\": [", f);
        fclose(f);
    }
    rc = hr_prof_device_measure(d2, &p, err);
    CHECK_EQ(rc, 0);
    CHECK(!d2->from_cache);
    /* and the rewritten one hits again */
    CHECK(hits_cache(d2, &p, d2->mem.weights_avail_bytes));
    /* no types at all */
    hr_prof_params p3 = p;
    p3.types[0] = 999;
    p3.n_types = 1;
    CHECK_EQ(hr_prof_device_measure(d2, &p3, err), HR_EINVAL);
    /* a missing model file: disk unknown, the rest measured */
    hr_prof_params p4 = p;
    p4.model_path = "/nonexistent/model.gguf";
    p4.use_cache = false;
    rc = hr_prof_device_measure(d2, &p4, err);
    CHECK_EQ(rc, 0);
    CHECK(d2->disk.seq_mbs < 0);
    /* a FIFO as the model path: no hang, disk unknown */
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", g_tmp);
    CHECK_EQ(mkfifo(fifo, 0600), 0);
    p4.model_path = fifo;
    rc = hr_prof_device_measure(d2, &p4, err);
    CHECK_EQ(rc, 0);
    CHECK(d2->disk.seq_mbs < 0 && d2->disk.mmap_mbs < 0);
    /* cache folder resolution */
    char dir[512];
    hr_prof_params p5 = hr_prof_params_default();
    setenv(HR_PROF_CACHE_ENV, "/x/y", 1);
    CHECK_EQ(hr_prof_cache_dir(&p5, dir, sizeof dir), 0);
    CHECK_STR(dir, "/x/y");
    unsetenv(HR_PROF_CACHE_ENV);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK_EQ(hr_prof_cache_dir(&p5, dir, sizeof dir), 0);
    CHECK_STR(dir, "/xdg/hearth");
    unsetenv("XDG_CACHE_HOME");
    p5.cache_dir = "/explicit";
    CHECK_EQ(hr_prof_cache_dir(&p5, dir, sizeof dir), 0);
    CHECK_STR(dir, "/explicit");
    free(d);
    free(d2);
}

/* ---- JSON ---- */

static void test_json(const hr_prof_model *pm) {
    char err[HR_ERR_LEN] = "";
    hr_prof_doc *doc = calloc(1, sizeof *doc), *back = calloc(1, sizeof *back);
    hr_prof_device_sysinfo(&doc->device, NULL);
    synthetic_device(&doc->device);
    hr_prof_device_sysinfo(&doc->device, NULL); /* real facts, unknown measurements */
    doc->device.n_rates = 1;
    doc->device.rates[0] = (hr_prof_rate){.type = HR_TYPE_Q4_K,
                                          .n_threads = 2,
                                          .matvec_gbs = 7.25,
                                          .matvec_call_us = 12.5,
                                          .matmat_gflops = 33.3};
    doc->device.n_opcosts = 1;
    doc->device.opcosts[0] = (hr_prof_opcost){2, 3.5, 1.25, 0.0625};
    doc->device.disk.seq_mbs = 1234.5;
    doc->device.disk.read_cpu_ms_mb = 0.625;
    doc->device.cpu_quota_cores = 0.75;
    doc->device.cpu_period_ms = 2.0;
    doc->device.n_sustain = 1;
    doc->device.sustain[0] = (hr_prof_sustain){.n_threads = 2, .factor = 1.75, .window_s = 0.5};
    doc->device.engine_layers = 2;
    doc->device.engine_threads = 2;
    doc->device.engine_ms = 2.5;
    doc->device.engine_pred_ms = 2.0;
    doc->device.engine_factor = 1.25;
    doc->device.engine_window_s = 0.3;
    doc->device.engine_round_ms = -0.75;
    doc->device.engine_burst_ms = 1.5;
    doc->device.engine_spread = 0.125;
    doc->device.engine_attempts = 2;
    doc->device.created = 1700000000.0;
    doc->has_device = true;
    CHECK_EQ(hr_prof_model_copy(&doc->model, pm), 0);
    doc->has_model = true;
    doc->n_links = 1;
    doc->links[0] = (hr_prof_link){
        .msg_bytes = 512, .n_samples = 10, .rtt_us = 85.5, .rtt_min_us = 60.25, .bw_mbs = -1.0};
    snprintf(doc->links[0].endpoint, sizeof doc->links[0].endpoint, "tcp://10.0.0.2:7100");
    doc->has_prediction = true;
    doc->prediction.n_threads = 2;
    doc->prediction.n_past = 160;
    doc->prediction.resident_bytes = 123456789;
    doc->prediction.n_layer_ms = 2;
    doc->prediction.layer_ms = calloc(2, sizeof(double));
    doc->prediction.layer_ms[0] = 1.5;
    doc->prediction.layer_ms[1] = 2.25;
    doc->prediction.token = (hr_prof_cost){2, 1.0, 2.0, 0.0, 0.5, 3.5, 7.0};
    char *j1 = NULL, *j2 = NULL;
    CHECK_EQ(hr_prof_doc_to_json(doc, true, &j1, err), 0);
    CHECK(j1 && strstr(j1, "\"schema\": \"hearth.profile\"") != NULL);
    CHECK(j1 && strstr(j1, "\"q4_K\"") != NULL);
    CHECK_EQ(hr_prof_doc_parse(j1, strlen(j1), back, err), 0);
    CHECK(back->has_device && back->has_model && back->has_prediction);
    CHECK_EQ(back->n_links, 1);
    CHECK_EQ(hr_prof_doc_to_json(back, true, &j2, err), 0);
    CHECK(j1 && j2 && strcmp(j1, j2) == 0);
    CHECK_EQ(back->device.rates[0].type, HR_TYPE_Q4_K);
    CHECK_NEAR(back->device.rates[0].matvec_gbs, 7.25, 0);
    CHECK_EQ(back->device.mem.total_bytes, doc->device.mem.total_bytes);
    CHECK_NEAR(back->device.membw_1t_gbs, -1.0, 0); /* unknown stays unknown */
    CHECK_NEAR(back->device.cpu_quota_cores, 0.75, 0);
    CHECK_EQ(back->device.n_sustain, 1);
    CHECK_NEAR(back->device.sustain[0].factor, 1.75, 0);
    CHECK_EQ(back->device.engine_threads, 2);
    CHECK_NEAR(back->device.engine_factor, 1.25, 0);
    CHECK_NEAR(back->device.engine_round_ms, -0.75, 0);
    CHECK_NEAR(back->device.engine_burst_ms, 1.5, 0);
    CHECK_NEAR(back->device.engine_spread, 0.125, 0);
    CHECK_INT(back->device.engine_attempts, ==, 2);
    CHECK_NEAR(back->links[0].bw_mbs, -1.0, 0);
    CHECK_EQ(back->model.n_layers_listed, pm->n_layer);
    CHECK_EQ(back->model.layers[0].bytes, pm->layers[0].bytes);
    CHECK_EQ(back->prediction.resident_bytes, 123456789);
    CHECK_NEAR(back->prediction.layer_ms[1], 2.25, 0);
    /* the cost model gives the same answer on the parsed profiles */
    hr_prof_cost_params cp = hr_prof_cost_params_default();
    hr_prof_cost a, b;
    CHECK_EQ(hr_prof_cost_window(&doc->device, &doc->model, NULL, 0, pm->n_layer, &cp, &a, err), 0);
    CHECK_EQ(hr_prof_cost_window(&back->device, &back->model, NULL, 0, pm->n_layer, &cp, &b, err),
             0);
    CHECK_NEAR(a.total_ms, b.total_ms, 0);
    /* device-only documents (the cache format) */
    char *j3 = NULL;
    hr_prof_device *d3 = calloc(1, sizeof *d3);
    CHECK_EQ(hr_prof_device_to_json(&doc->device, &j3, err), 0);
    CHECK_EQ(hr_prof_device_parse(j3, strlen(j3), d3, err), 0);
    CHECK_STR(d3->os.release, doc->device.os.release);
    CHECK_NEAR(d3->disk.seq_mbs, 1234.5, 0);
    CHECK_NEAR(d3->disk.read_cpu_ms_mb, 0.625, 0);
    /* malformed input: codes, never crashes */
    hr_prof_doc_clear(back);
    const char *bad[] = {
        "",
        "[]",
        "{\"schema\": \"other\", \"version\": 1}",
        "{\"schema\": \"hearth.profile\"}",
        "{\"schema\": \"hearth.profile\", \"version\": \"1\"}",
        "{\"schema\": \"hearth.profile\", \"version\": 1, \"model\": {\"n_layer\": 3, "
        "\"n_embd\": 8, \"n_head\": 1, \"head_dim\": 8, \"layers\": []}}",
        "{\"schema\": \"hearth.profile\", \"version\": 1, \"device\": {\"cpu\": {\"rates\": "
        "[{\"type\": \"q9_9\"}, 5, null]}}, \"links\": [1, \"x\"]}",
        "{\"schema\": \"hearth.profile\", \"version\": 1, \"device\": {\"os\": 7, \"topology\": "
        "{\"numa\": {}}, \"memory\": null, \"gpus\": [1, 2]}}",
        "{\"schema\": \"hearth.profile\", \"ver",
    };
    int expect[] = {HR_EFORMAT, HR_EFORMAT, HR_EFORMAT, HR_EUNSUPPORTED, HR_EUNSUPPORTED,
                    HR_EFORMAT, 0,          0,          HR_EFORMAT};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = hr_prof_doc_parse(bad[i], strlen(bad[i]), back, err);
        CHECK_EQ(rc, expect[i]);
        CHECK(rc == 0 || err[0] != 0);
        hr_prof_doc_clear(back);
    }
    const char *v2 = "{\"schema\": \"hearth.profile\", \"version\": 2}";
    CHECK_EQ(hr_prof_device_parse(v2, strlen(v2), d3, err), HR_EUNSUPPORTED);
    free(j1);
    free(j2);
    free(j3);
    free(d3);
    hr_prof_doc_clear(doc);
    free(doc);
    free(back);
}

/* ---- link ---- */

static void *echo_thread(void *arg) {
    hr_prof_echo_serve(arg);
    return NULL;
}

static void test_link(void) {
    char err[HR_ERR_LEN] = "";
    hr_prof_echo *e = NULL;
    int rc = hr_prof_echo_create(&e, NULL, "tcp://127.0.0.1:*", err);
    CHECK_EQ(rc, 0);
    if (rc) {
        fprintf(stderr, "echo: %s\n", err);
        return;
    }
    char ep[256]; /* kept past hr_prof_echo_destroy */
    snprintf(ep, sizeof ep, "%s", hr_prof_echo_endpoint(e));
    CHECK(strncmp(ep, "tcp://127.0.0.1:", 16) == 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, echo_thread, e), 0);
    /* malformed probes are dropped, the responder keeps serving */
    void *zc = zmq_ctx_new();
    void *s = zmq_socket(zc, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    CHECK_EQ(zmq_connect(s, ep), 0);
    zmq_send(s, "garbage", 7, 0);
    unsigned char hdr[16] = {'H', 'R', 'P', 'E', 1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0, 0};
    zmq_send(s, hdr, sizeof hdr, 0); /* length says 65535, frame has none */
    zmq_send(s, "a", 1, ZMQ_SNDMORE);
    zmq_send(s, "b", 1, 0); /* multipart */
    hr_prof_link l;
    rc = hr_prof_link_measure(&l, zc, ep, 4096, 20, 2000, err);
    CHECK_EQ(rc, 0);
    if (rc)
        fprintf(stderr, "link: %s\n", err);
    printf("link 127.0.0.1: rtt %.1f us (min %.1f), %.0f MB/s\n", l.rtt_us, l.rtt_min_us, l.bw_mbs);
    CHECK(l.rtt_us > 0 && l.rtt_us < 1e6);
    CHECK(l.rtt_min_us > 0 && l.rtt_min_us <= l.rtt_us);
    CHECK(l.bw_mbs > 1);
    CHECK_EQ(l.n_samples, 20);
    CHECK_EQ(l.msg_bytes, 4096);
    CHECK(hr_prof_echo_served(e) >= 23);
    /* the garbage got no answer */
    char buf[64];
    CHECK_EQ(zmq_recv(s, buf, sizeof buf, ZMQ_DONTWAIT), -1);
    zmq_close(s);
    /* hidden-state sizes of large models, and an empty payload */
    rc = hr_prof_link_measure(&l, NULL, ep, 16384, 5, 2000, err);
    CHECK_EQ(rc, 0);
    rc = hr_prof_link_measure(&l, NULL, ep, 0, 5, 2000, err);
    CHECK_EQ(rc, 0);
    hr_prof_echo_stop(e);
    pthread_join(th, NULL);
    hr_prof_echo_destroy(e);
    /* nobody there: times out */
    double t0 = now_s();
    rc = hr_prof_link_measure(&l, zc, ep, 4096, 5, 200, err);
    CHECK_EQ(rc, HR_ETIMEDOUT);
    CHECK(now_s() - t0 < 5.0);
    CHECK(err[0] != 0);
    CHECK_EQ(hr_prof_link_measure(&l, zc, "not an endpoint", 64, 5, 200, err), HR_ENET);
    CHECK_EQ(hr_prof_link_measure(&l, zc, ep, -1, 5, 200, err), HR_EINVAL);
    CHECK_EQ(hr_prof_echo_create(&e, zc, "bogus://x", err), HR_ENET);
    hr_prof_echo_destroy(NULL);
    zmq_ctx_term(zc);
}

/* Two threads spinning on one CPU wait for it half the time each; the
 * calling thread sleeps meanwhile. A disk test's elapsed time is less its
 * own waits only (hr_prof_thread_run_delay_ns): the process's sum counts
 * the two spinners' waits too. */
static void *spin_on_cpu(void *arg) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(*(int *)arg, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    double t0 = now_s();
    volatile unsigned long x = 0;
    while (now_s() - t0 < 0.3)
        x++;
    return NULL;
}

static void test_run_delay(void) {
    cpu_set_t mine;
    int cpu = -1;
    if (sched_getaffinity(0, sizeof mine, &mine) == 0)
        for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
            if (CPU_ISSET(i, &mine))
                cpu = i;
    int64_t p0 = hr_prof_run_delay_ns(), t0 = hr_prof_thread_run_delay_ns();
    if (cpu < 0 || p0 < 0 || t0 < 0) {
        hr_check_skip("run delays: no CPU affinity or no /proc schedstat here");
        return;
    }
    pthread_t th[2];
    int ok = 0;
    for (int i = 0; i < 2; i++)
        ok += pthread_create(&th[i], NULL, spin_on_cpu, &cpu) == 0;
    struct timespec nap = {0, 250000000}; /* read while they run: a joined thread's
                                              schedstat is gone */
    nanosleep(&nap, NULL);
    int64_t p1 = hr_prof_run_delay_ns(), t1 = hr_prof_thread_run_delay_ns();
    for (int i = 0; i < ok; i++)
        pthread_join(th[i], NULL);
    CHECK_INT(ok, ==, 2);
    CHECK(p1 - p0 >= 100000000); /* the spinners waited ~0.12 s each by then */
    CHECK(t1 - t0 >= 0);
    CHECK(t1 - t0 < 50000000); /* this thread slept: none of theirs */
}

int main(void) {
    hr_log_set_level(HR_LOG_LEVEL_ERROR);
    test_run_delay();
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hr_test_profiler.%ld", (long)getpid());
    mkdir(g_tmp, 0700);
    test_fake_root_v1();
    test_fake_root_v2();
    test_fake_root_broken();
    hr_prof_model pm;
    memset(&pm, 0, sizeof pm);
    test_model_profile(&pm);
    if (pm.layers) {
        test_cost(&pm);
        test_sched(&pm);
        test_json(&pm);
        test_probe_history(&pm);
    }
    test_probe();
    test_link();
    test_device_and_cache();
    hr_prof_model_clear(&pm);
    rm_rf(g_tmp);
    return hr_check_finish("profiler");
}
