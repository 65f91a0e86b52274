/* device.c - the device profile: gathers the cheap facts (OS, topology,
 * memory, GPUs), decides whether the on-disk cache still describes this
 * machine, and otherwise runs the CPU and disk measurements and stores the
 * result.
 *
 * The cache is keyed by a fingerprint of what the measurements depend on
 * (CPU model, ISA, topology, kernel release, total memory, cgroup limits
 * of memory, CPU time and disk reads, the build of the running program
 * (its kernels set the measured rates),
 * the file system of the model, and the request: types, thread counts, row
 * length, quick). A hit also needs the memory available for weights to be
 * within 20% (or 256 MiB) of what it was. */
#include "profiler/profiler-impl.h"

#include "common/log.h"
#include "common/sync.h"
#include "kernels/quant.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

hr_prof_params hr_prof_params_default(void) { return (hr_prof_params){.use_cache = true}; }

/* The Vulkan devices the loader sees, with their memory heaps. */
static void hr_prof_list_vk(hr_prof_device *d) {
    hr_vk_device_info vi[HR_VK_MAX_DEVICES];
    int n = 0;
    char err[HR_ERR_LEN] = "";
    if (hr_vk_list(vi, HR_VK_MAX_DEVICES, &n, err) != 0)
        HR_LOG_WARN(HR_PROF_TAG, "Vulkan devices not listed: %s", err);
    for (int i = 0; i < n && d->n_vk < HR_PROF_MAX_VK; i++) {
        hr_prof_gpu *g = &d->vk[d->n_vk++];
        memset(g, 0, sizeof *g);
        g->index = i;
        hr_prof_strlcpy(g->name, vi[i].name, sizeof g->name);
        hr_prof_strlcpy(g->kind, hr_vk_type_name(vi[i].type), sizeof g->kind);
        g->n_heaps = vi[i].n_heaps;
        for (int h = 0; h < vi[i].n_heaps; h++) {
            g->heap_bytes[h] = (int64_t)vi[i].heap_bytes[h];
            if (vi[i].heap_device_local[h] && g->heap_bytes[h] > g->vram_bytes)
                g->vram_bytes = g->heap_bytes[h];
        }
        g->h2d_gbs = g->d2h_gbs = g->submit_us = -1.0;
    }
}

void hr_prof_device_sysinfo(hr_prof_device *d, const char *sysroot) {
    memset(d, 0, sizeof *d);
    d->version = HR_PROF_VERSION;
    hr_prof_read_os(&d->os, sysroot);
    hr_prof_strlcpy(d->os.isa, hr_isa_name(hr_kernels_best()->isa), sizeof d->os.isa);
    bool fake = sysroot && *sysroot;
    int rc = fake ? HR_EUNSUPPORTED : hr_prof_topo_hwloc(&d->topo);
    if (rc) {
        if (!fake)
            HR_LOG_WARN(HR_PROF_TAG, "hwloc topology unavailable (%s): reading sysfs",
                        hr_strerror(rc));
        hr_prof_topo_sysfs(&d->topo, sysroot);
    }
    hr_prof_read_mem(&d->mem, sysroot);
    hr_prof_read_cpu_quota(sysroot, &d->cpu_quota_cores, &d->cpu_period_ms);
    d->n_gpus = hr_prof_read_gpus(d->gpus, HR_PROF_MAX_GPUS, sysroot);
    d->vk_chosen = -1;
    if (!fake)
        hr_prof_list_vk(d);
    hr_prof_disk_unknown(&d->disk);
    d->membw_1t_gbs = d->membw_all_gbs = d->kv_copy_gbs = -1.0;
    d->membw_threads = -1;
    d->engine_ms = d->engine_pred_ms = d->engine_factor = d->engine_window_s = -1.0;
    d->engine_spread = -1.0;
    d->engine_attempts = d->engine_starts = 0;
    d->engine_round_ms = d->engine_burst_ms = 0;
    d->eltwise = (hr_prof_eltwise){-1.0, -1.0, -1.0, -1.0, -1.0};
    d->duration_s = -1.0;
    d->load_1m = -1.0;
}

int hr_prof_cache_dir(const hr_prof_params *p, char *buf, size_t cap) {
    const char *v;
    if (p && p->cache_dir && *p->cache_dir)
        snprintf(buf, cap, "%s", p->cache_dir);
    else if ((v = getenv(HR_PROF_CACHE_ENV)) && *v)
        snprintf(buf, cap, "%s", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        snprintf(buf, cap, "%s/hearth", v);
    else if ((v = getenv("HOME")) && *v)
        snprintf(buf, cap, "%s/.cache/hearth", v);
    else
        return HR_ENOENT;
    return 0;
}

/* Types the kernels can run, deduplicated; defaults when none are asked. */
static int hr_resolve_types(const hr_prof_params *p, int64_t row_len, int64_t ffn_len, int *out) {
    static const int dflt[] = {HR_TYPE_Q4_0, HR_TYPE_Q4_K, HR_TYPE_Q6_K, HR_TYPE_Q8_0};
    const int *src = p->n_types > 0 ? p->types : dflt;
    int n_src = p->n_types > 0 ? p->n_types : (int)(sizeof dflt / sizeof dflt[0]);
    if (n_src > HR_PROF_MAX_TYPES)
        n_src = HR_PROF_MAX_TYPES;
    const hr_kernels *k = hr_kernels_best();
    int n = 0;
    for (int i = 0; i < n_src; i++) {
        int t = src[i];
        const hr_type_traits *tt = hr_type_get(t);
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= out[j] == t;
        if (dup)
            continue;
        if (!tt || !tt->supported || !k->vec_dot[t] || (t != HR_TYPE_F32 && !k->quant[t]) ||
            hr_type_row_bytes(t, row_len) == 0 || hr_type_row_bytes(t, ffn_len) == 0) {
            HR_LOG_WARN(HR_PROF_TAG, "weight type %s cannot be measured; skipped", hr_type_name(t));
            continue;
        }
        out[n++] = t;
    }
    return n;
}

static int hr_resolve_threads(const hr_prof_params *p, const hr_prof_topo *t, int *out) {
    int cand[HR_PROF_MAX_THREADS + 3], nc = 0;
    if (p->n_threads > 0) {
        for (int i = 0; i < p->n_threads && i < HR_PROF_MAX_THREADS; i++)
            cand[nc++] = p->threads[i];
    } else {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        int pus = t->n_pus > 0 ? t->n_pus : online > 0 ? (int)online : 1;
        cand[nc++] = 1;
        cand[nc++] = t->n_cores > 0 ? t->n_cores : pus;
        cand[nc++] = pus;
    }
    int n = 0;
    for (int i = 0; i < nc && n < HR_PROF_MAX_THREADS; i++) {
        int v = cand[i] < 1 ? 1 : cand[i] > 256 ? 256 : cand[i];
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= out[j] == v;
        if (!dup)
            out[n++] = v;
    }
    return n;
}

/* The running program's build: its GNU build id (the linker's hash of the
 * code, so a rebuilt or upgraded hearth, whose kernels may run at other
 * rates, measures again), else the executable's size and time. */
typedef struct {
    char *buf;
    size_t cap;
    bool found;
} hr_build_id_ctx;

static int hr_build_id_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    hr_build_id_ctx *c = arg;
    for (int i = 0; i < info->dlpi_phnum && !c->found; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            ElfW(Nhdr) nh;
            memcpy(&nh, p, sizeof nh);
            const uint8_t *name = p + sizeof nh;
            const uint8_t *desc = name + ((nh.n_namesz + 3u) & ~3u);
            if (desc + nh.n_descsz > end)
                break;
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t o = 0;
                for (uint32_t k = 0; k < nh.n_descsz && o + 3 <= c->cap; k++)
                    o += (size_t)snprintf(c->buf + o, c->cap - o, "%02x", desc[k]);
                c->found = o > 0;
                break;
            }
            p = desc + ((nh.n_descsz + 3u) & ~3u);
        }
    }
    return 1; /* the first object is the program itself */
}

static void hr_build_id(char *buf, size_t cap) {
    hr_build_id_ctx c = {buf, cap, false};
    buf[0] = '\0';
    dl_iterate_phdr(hr_build_id_cb, &c);
    if (c.found)
        return;
    struct stat st;
    if (stat("/proc/self/exe", &st) == 0)
        snprintf(buf, cap, "exe%lld.%lld", (long long)st.st_size, (long long)st.st_mtime);
    else
        snprintf(buf, cap, "unknown");
}

/* Whole GiB (nearest): a VM's MemTotal moves by a few MiB when its
 * balloon driver takes or returns pages, which is not another machine. */
static int64_t hr_gib_round(int64_t bytes) {
    return bytes < 0 ? bytes : (bytes + (512ll << 20)) >> 30;
}

static void hr_fingerprint(hr_prof_device *d, const hr_prof_params *p, const int *types,
                           int n_types, const int *threads, int n_threads, int64_t row_len,
                           int64_t ffn_len) {
    char s[2048];
    int n = snprintf(s, sizeof s,
                     "v%d.s|%s|%s|%s|%d|%d|%d|%d|%" PRId64 "|%s|%" PRId64 "|%" PRId64 "|%d|%" PRId64
                     "|%" PRId64 "|%d|",
                     HR_PROF_VERSION, d->os.cpu_model, d->os.isa, d->os.machine, d->topo.n_pus,
                     d->topo.n_cores, d->topo.n_packages, d->topo.n_numa, d->topo.l3_bytes,
                     d->os.release, hr_gib_round(d->mem.total_bytes), d->mem.cg_limit_bytes,
                     d->n_gpus, row_len, ffn_len, p->quick);
    for (int i = 0; i < n_types && n > 0 && (size_t)n < sizeof s; i++)
        n += snprintf(s + n, sizeof s - (size_t)n, "t%d,", types[i]);
    for (int i = 0; i < n_threads && n > 0 && (size_t)n < sizeof s; i++)
        n += snprintf(s + n, sizeof s - (size_t)n, "n%d,", threads[i]);
    for (int i = 0; i < d->n_vk && n > 0 && (size_t)n < sizeof s; i++)
        n += snprintf(s + n, sizeof s - (size_t)n, "|vk%d:%s%s", i, d->vk[i].name,
                      i == d->vk_chosen ? "*" : "");
    if (n > 0 && (size_t)n < sizeof s) {
        char lim[1024];
        hr_prof_cg_limits_key(lim, sizeof lim, NULL);
        n += snprintf(s + n, sizeof s - (size_t)n, "|cg:%s", lim);
    }
    if (n > 0 && (size_t)n < sizeof s) {
        char bid[96];
        hr_build_id(bid, sizeof bid);
        n += snprintf(s + n, sizeof s - (size_t)n, "|build:%s", bid);
    }
    struct stat st;
    if (p->model_path && n > 0 && (size_t)n < sizeof s && stat(p->model_path, &st) == 0)
        snprintf(s + n, sizeof s - (size_t)n, "|dev%llu|%s|%s", (unsigned long long)st.st_dev,
                 d->disk.fs_type, d->disk.device);
    uint64_t h = hr_prof_hash(s, HR_PROF_HASH_INIT);
    snprintf(d->fingerprint, sizeof d->fingerprint, "%016" PRIx64, h);
    HR_LOG_DEBUG(HR_PROF_TAG, "fingerprint %s of %s", d->fingerprint, s);
}

static char *hr_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        sz = ftell(f);
    if (sz >= 0 && sz < (64 << 20) && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)sz + 1)) != NULL) {
        if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
            free(buf);
            buf = NULL;
        } else {
            buf[sz] = 0;
            *len = (size_t)sz;
        }
    }
    fclose(f);
    return buf;
}

static bool hr_mem_changed(int64_t then, int64_t now) {
    if (then < 0 || now < 0)
        return then != now;
    int64_t diff = then > now ? then - now : now - then;
    return diff > (256ll << 20) && (double)diff > 0.2 * (double)(then > now ? then : now);
}

/* Returns true when the cache at path matches cur (and fills out). */
/* A profile measured while the machine was busy: over a quarter of the
 * timed repetitions waited for a CPU, or the load average was above the
 * PUs. Its figures are the contention's, not the machine's. */
static bool hr_prof_busy(const hr_prof_device *d) {
    return (d->reps_total > 0 && 4 * d->reps_contended > d->reps_total) ||
           (d->topo.n_pus > 0 && d->load_1m > d->topo.n_pus);
}

static bool hr_cache_read(const char *path, const hr_prof_device *cur, hr_prof_device *out,
                          bool busy_ok) {
    size_t len = 0;
    char *text = hr_slurp(path, &len);
    if (!text)
        return false;
    char err[HR_ERR_LEN] = "";
    hr_prof_device *c = malloc(sizeof *c);
    bool hit = false;
    if (!c) {
        free(text);
        return false;
    }
    if (hr_prof_device_parse(text, len, c, err) != 0) {
        HR_LOG_WARN(HR_PROF_TAG, "ignoring unreadable cache %s: %s", path, err);
    } else if (!busy_ok && hr_prof_busy(c)) {
        HR_LOG_INFO(HR_PROF_TAG, "cache %s was measured on a busy machine: profiling again", path);
    } else if (strcmp(c->fingerprint, cur->fingerprint) != 0) {
        HR_LOG_INFO(HR_PROF_TAG, "cache %s is for another machine state", path);
    } else if (hr_mem_changed(c->mem.weights_avail_bytes, cur->mem.weights_avail_bytes)) {
        HR_LOG_INFO(HR_PROF_TAG,
                    "available memory changed (%" PRId64 " -> %" PRId64 " bytes): profiling again",
                    c->mem.weights_avail_bytes, cur->mem.weights_avail_bytes);
    } else {
        /* measured parts from the cache, current facts from now */
        *out = *c;
        /* where the model lives now (same file system: same fingerprint) */
        hr_prof_disk dk = c->disk;
        out->disk = cur->disk;
        out->disk.seq_mbs = dk.seq_mbs;
        out->disk.rand_mbs = dk.rand_mbs;
        out->disk.rand_iops = dk.rand_iops;
        out->disk.mmap_mbs = dk.mmap_mbs;
        out->disk.read_cpu_ms_mb = dk.read_cpu_ms_mb;
        hr_prof_strlcpy(out->disk.method, dk.method, sizeof out->disk.method);
        out->os = cur->os;
        out->topo = cur->topo;
        out->mem = cur->mem;
        out->cpu_quota_cores = cur->cpu_quota_cores;
        out->cpu_period_ms = cur->cpu_period_ms;
        out->n_gpus = cur->n_gpus;
        memcpy(out->gpus, cur->gpus, sizeof out->gpus);
        out->from_cache = true;
        hit = true;
    }
    free(c);
    free(text);
    return hit;
}

int hr_prof_mkdir_p(const char *dir) {
    char tmp[1024];
    hr_prof_strlcpy(tmp, dir, sizeof tmp);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

int hr_prof_write_atomic(const char *dir, const char *path, const char *text) {
    if (hr_prof_mkdir_p(dir) != 0)
        return -1;
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    size_t n = strlen(text);
    bool ok = f && fwrite(text, 1, n, f) == n;
    if (f)
        ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
}

double hr_prof_cpu_s(bool thread) {
    return hr_clock_s(thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID);
}

static void hr_cache_write(const char *dir, const char *path, const hr_prof_device *d) {
    char err[HR_ERR_LEN] = "";
    char *text = NULL;
    if (hr_prof_device_to_json(d, &text, err) != 0) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot serialize the profile: %s", err);
        return;
    }
    if (hr_prof_write_atomic(dir, path, text) != 0)
        HR_LOG_WARN(HR_PROF_TAG, "cannot write cache %s: %s", path, strerror(errno));
    free(text);
}

int hr_prof_device_measure(hr_prof_device *out, const hr_prof_params *p, char err[HR_ERR_LEN]) {
    if (!out || !p)
        return hr_seterr(err, HR_EINVAL, "no output or parameters");
    double t0 = hr_now_s();
    hr_prof_device_sysinfo(out, p->sysroot);
    int64_t row_len = p->row_len > 0 ? p->row_len : 4096;
    row_len = (row_len + 255) / 256 * 256;
    int64_t ffn_len = p->ffn_len > 0 ? p->ffn_len : row_len * 11 / 4;
    ffn_len = (ffn_len + 255) / 256 * 256;
    if (row_len > (1 << 20) || ffn_len > (1 << 22))
        return hr_seterr(err, HR_EINVAL, "row length %lld / %lld too large", (long long)p->row_len,
                         (long long)p->ffn_len);
    if (ffn_len < row_len + 256)
        ffn_len = row_len * 2; /* the two shapes must differ to separate row and byte costs */
    int types[HR_PROF_MAX_TYPES], threads[HR_PROF_MAX_THREADS];
    int n_types = hr_resolve_types(p, row_len, ffn_len, types);
    int n_threads = hr_resolve_threads(p, &out->topo, threads);
    if (n_types == 0)
        return hr_seterr(err, HR_EINVAL, "none of the requested weight types can be measured");
    if (p->model_path)
        hr_prof_disk_info(&out->disk, p->model_path, p->sysroot);
    int vk_idx = -1;
    char verr[HR_ERR_LEN] = "";
    if (out->n_vk > 0 && hr_vk_pick(p->gpu, &vk_idx, verr) != 0)
        HR_LOG_WARN(HR_PROF_TAG, "GPU choice: %s; not measuring a GPU", verr);
    for (int i = 0; i < out->n_vk; i++)
        if (out->vk[i].index == vk_idx)
            out->vk_chosen = i;
    hr_fingerprint(out, p, types, n_types, threads, n_threads, row_len, ffn_len);
    out->quick = p->quick;
    char dir[1024], path[1200];
    bool cache = p->use_cache && hr_prof_cache_dir(p, dir, sizeof dir) == 0;
    if (p->use_cache && !cache)
        HR_LOG_WARN(HR_PROF_TAG, "no cache folder (set %s or HOME): not caching",
                    HR_PROF_CACHE_ENV);
    if (cache) {
        snprintf(path, sizeof path, "%s/device-%s.json", dir, out->fingerprint);
        if (!p->force) {
            hr_prof_device *hit = malloc(sizeof *hit);
            if (hit && hr_cache_read(path, out, hit, p->cache_busy)) {
                *out = *hit;
                free(hit);
                HR_LOG_INFO(HR_PROF_TAG, "device profile from cache %s (%.3f s)", path,
                            hr_now_s() - t0);
                return 0;
            }
            free(hit);
        }
    }
    out->load_1m = hr_prof_read_load(p->sysroot);
    if (out->load_1m > 0 && out->topo.n_pus > 0 && out->load_1m > 0.5 * out->topo.n_pus)
        HR_LOG_WARN(HR_PROF_TAG, "load average %.2f on %d PUs: timings include contention",
                    out->load_1m, out->topo.n_pus);
    int rc = hr_prof_cpu_measure(out, types, n_types, threads, n_threads, row_len, ffn_len,
                                 p->quick, err);
    if (rc)
        return rc;
    if (p->model_path)
        hr_prof_disk_measure(&out->disk, out->disk.path[0] ? out->disk.path : p->model_path,
                             p->quick);
    if (out->vk_chosen >= 0) {
        char gerr[HR_ERR_LEN] = "";
        if (hr_prof_gpu_measure(&out->vk[out->vk_chosen], types, n_types, row_len, p->quick,
                                gerr) != 0)
            HR_LOG_WARN(HR_PROF_TAG, "GPU %s not measured: %s", out->vk[out->vk_chosen].name, gerr);
    }
    out->created = (double)time(NULL);
    out->duration_s = hr_now_s() - t0;
    if (cache && !p->cache_busy && hr_prof_busy(out))
        HR_LOG_WARN(HR_PROF_TAG,
                    "the machine was busy while profiling (%d of %d repetitions waited for a "
                    "CPU, load average %.2f on %d PUs): this profile is used now but not cached; "
                    "profile again when the machine is idle",
                    out->reps_contended, out->reps_total, out->load_1m, out->topo.n_pus);
    else if (cache)
        hr_cache_write(dir, path, out);
    HR_LOG_INFO(HR_PROF_TAG, "device profiled in %.2f s", out->duration_s);
    return 0;
}
