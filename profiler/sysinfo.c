/* sysinfo.c - what the device profile reads rather than measures: OS and
 * kernel, /proc/meminfo, the memory cgroup (v1 or v2), GPUs, and a sysfs
 * topology reader used when hwloc is unavailable or a fake root is given.
 * Every reader degrades to "unknown" (-1 / "") with a warning. */
#include "profiler/profiler-impl.h"

#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers (shared through profiler-impl.h) ---- */

static int hr_dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hr_prof_median(double *v, int n) {
    if (n <= 0)
        return -1.0;
    qsort(v, (size_t)n, sizeof v[0], hr_dbl_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void hr_prof_path(char *buf, size_t cap, const char *sysroot, const char *abs) {
    snprintf(buf, cap, "%s%s", sysroot ? sysroot : "", abs);
}

long hr_prof_read_text(const char *path, char *buf, size_t cap) {
    if (cap == 0)
        return -1;
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return -1;
    buf[n] = 0;
    return (long)n;
}

int hr_prof_read_i64(const char *path, int64_t *out) {
    char buf[64];
    if (hr_prof_read_text(path, buf, sizeof buf) <= 0)
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || end == buf)
        return -1;
    *out = v;
    return 0;
}

void hr_prof_strlcpy(char *dst, const char *src, size_t cap) {
    if (cap == 0)
        return;
    size_t n = src ? strlen(src) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    dst[n] = 0;
}

uint64_t hr_prof_hash(const char *s, uint64_t h) {
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* The run delay (ns waited for a CPU) in a schedstat file; -1 unreadable. */
static int64_t hr_schedstat_wait_ns(const char *path) {
    char buf[128];
    unsigned long long run = 0, wait = 0;
    if (hr_prof_read_text(path, buf, sizeof buf) > 0 && sscanf(buf, "%llu %llu", &run, &wait) == 2)
        return (int64_t)wait;
    return -1;
}

int64_t hr_prof_run_delay_ns(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int64_t sum = 0;
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%.32s/schedstat", e->d_name);
        int64_t w = hr_schedstat_wait_ns(path);
        if (w >= 0) {
            sum += w;
            any = true;
        }
    }
    closedir(d);
    return any ? sum : -1;
}

int64_t hr_prof_thread_run_delay_ns(void) {
    return hr_schedstat_wait_ns("/proc/thread-self/schedstat");
}

static void hr_rstrip(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
}

/* ---- OS ---- */

/* Value of "key<sep>value" in a text, trimmed and unquoted, into out. */
static bool hr_kv_find(const char *text, const char *key, char sep, char *out, size_t cap) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, key, kl) != 0)
            continue;
        const char *p = l + kl;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != sep)
            continue;
        p++;
        while (*p == ' ' || *p == '\t' || *p == '"')
            p++;
        size_t n = 0;
        while (p[n] && p[n] != '\n')
            n++;
        while (n && (p[n - 1] == '"' || p[n - 1] == ' ' || p[n - 1] == '\r'))
            n--;
        if (n >= cap)
            n = cap - 1;
        memcpy(out, p, n);
        out[n] = 0;
        return true;
    }
    return false;
}

static void hr_read_line(const char *sysroot, const char *abs, char *out, size_t cap) {
    char path[512];
    hr_prof_path(path, sizeof path, sysroot, abs);
    if (hr_prof_read_text(path, out, cap) <= 0) {
        hr_prof_strlcpy(out, "unknown", cap);
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: reported as unknown", path);
        return;
    }
    hr_rstrip(out);
}

void hr_prof_read_os(hr_prof_os *os, const char *sysroot) {
    memset(os, 0, sizeof *os);
    bool fake = sysroot && *sysroot;
    struct utsname u;
    if (!fake && uname(&u) == 0) {
        hr_prof_strlcpy(os->sysname, u.sysname, sizeof os->sysname);
        hr_prof_strlcpy(os->release, u.release, sizeof os->release);
        hr_prof_strlcpy(os->hostname, u.nodename, sizeof os->hostname);
        hr_prof_strlcpy(os->machine, u.machine, sizeof os->machine);
    } else {
        hr_read_line(sysroot, "/proc/sys/kernel/ostype", os->sysname, sizeof os->sysname);
        hr_read_line(sysroot, "/proc/sys/kernel/osrelease", os->release, sizeof os->release);
        hr_read_line(sysroot, "/proc/sys/kernel/hostname", os->hostname, sizeof os->hostname);
        hr_prof_strlcpy(os->machine, fake && uname(&u) == 0 ? u.machine : "unknown",
                        sizeof os->machine);
    }
    char buf[4096], path[512];
    hr_prof_path(path, sizeof path, sysroot, "/etc/os-release");
    long n = hr_prof_read_text(path, buf, sizeof buf);
    if (n <= 0) {
        hr_prof_path(path, sizeof path, sysroot, "/usr/lib/os-release");
        n = hr_prof_read_text(path, buf, sizeof buf);
    }
    if (n <= 0 || !hr_kv_find(buf, "PRETTY_NAME", '=', os->name, sizeof os->name)) {
        HR_LOG_WARN(HR_PROF_TAG, "no PRETTY_NAME in %s: OS name unknown", path);
        hr_prof_strlcpy(os->name, "unknown", sizeof os->name);
    }
    /* /proc/cpuinfo is large on big machines; the first CPU's block is enough */
    char *ci = malloc(65536);
    hr_prof_path(path, sizeof path, sysroot, "/proc/cpuinfo");
    if (!ci || hr_prof_read_text(path, ci, 65536) <= 0 ||
        (!hr_kv_find(ci, "model name", ':', os->cpu_model, sizeof os->cpu_model) &&
         !hr_kv_find(ci, "Model", ':', os->cpu_model, sizeof os->cpu_model) &&
         !hr_kv_find(ci, "cpu model", ':', os->cpu_model, sizeof os->cpu_model) &&
         !hr_kv_find(ci, "Hardware", ':', os->cpu_model, sizeof os->cpu_model))) {
        HR_LOG_WARN(HR_PROF_TAG, "no CPU model in %s: reported as unknown", path);
        hr_prof_strlcpy(os->cpu_model, "unknown", sizeof os->cpu_model);
    }
    free(ci);
}

/* ---- memory and cgroup ---- */

static int64_t hr_meminfo_kb(const char *text, const char *key) {
    char v[64];
    if (!hr_kv_find(text, key, ':', v, sizeof v))
        return -1;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (end == v || x < 0)
        return -1;
    return (int64_t)x * 1024;
}

/* memory.stat style "key value" line. */
static int64_t hr_stat_value(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, key, kl) == 0 && l[kl] == ' ') {
            long long x = strtoll(l + kl + 1, NULL, 10);
            return x < 0 ? -1 : (int64_t)x;
        }
    }
    return -1;
}

/* Finds the mount point (and its root) of a cgroup hierarchy in
 * /proc/self/mountinfo: fstype "cgroup" with option `opt`, or "cgroup2". */
static bool hr_cg_mount_of(const char *sysroot, bool v2, const char *ctrl, char *mnt, size_t mcap,
                           char *root, size_t rcap) {
    char path[512];
    hr_prof_path(path, sizeof path, sysroot, "/proc/self/mountinfo");
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint opts... - fstype source superopts */
        char *dash = strstr(line, " - ");
        if (!dash)
            continue;
        char fstype[32] = "", source[256] = "", sopts[1024] = "";
        if (sscanf(dash + 3, "%31s %255s %1023s", fstype, source, sopts) < 2)
            continue;
        char r[512], m[512];
        if (sscanf(line, "%*s %*s %*s %511s %511s", r, m) != 2)
            continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0 : strcmp(fstype, "cgroup") != 0)
            continue;
        if (!v2) {
            bool has = false;
            char *save = NULL;
            for (char *tok = strtok_r(sopts, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                has |= strcmp(tok, ctrl) == 0;
            if (!has)
                continue;
        }
        hr_prof_strlcpy(mnt, m, mcap);
        hr_prof_strlcpy(root, r, rcap);
        found = true;
    }
    fclose(f);
    return found;
}

static bool hr_cg_mount(const char *sysroot, bool v2, char *mnt, size_t mcap, char *root,
                        size_t rcap) {
    return hr_cg_mount_of(sysroot, v2, "memory", mnt, mcap, root, rcap);
}

/* Directory of our memory cgroup: mount + (path relative to the mount's root). */
static void hr_cg_dir(char *out, size_t cap, const char *sysroot, const char *mnt, const char *root,
                      const char *cgpath) {
    const char *rel = cgpath;
    size_t rl = strlen(root);
    if (strcmp(root, "/") != 0 && strncmp(cgpath, root, rl) == 0)
        rel = cgpath + rl;
    snprintf(out, cap, "%s%s%s", sysroot ? sysroot : "", mnt, strcmp(rel, "/") == 0 ? "" : rel);
}

static void hr_cg_v1(hr_prof_mem *m, const char *dir) {
    char path[1100];
    char *st = malloc(16384);
    if (!st)
        return;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    bool have_stat = hr_prof_read_text(path, st, 16384) > 0;
    int64_t lim = -1;
    if (have_stat)
        lim = hr_stat_value(st, "hierarchical_memory_limit");
    if (lim < 0) {
        snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
        if (hr_prof_read_i64(path, &lim) != 0)
            lim = -1;
    }
    /* v1 reports "no limit" as a huge page-rounded number */
    m->cg_limit_bytes = lim >= ((int64_t)1 << 60) ? -1 : lim;
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
    if (hr_prof_read_i64(path, &m->cg_usage_bytes) != 0) {
        m->cg_usage_bytes = -1;
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: cgroup usage unknown", path);
    }
    if (have_stat) {
        m->cg_file_bytes = hr_stat_value(st, "total_cache");
        if (m->cg_file_bytes < 0)
            m->cg_file_bytes = hr_stat_value(st, "cache");
    } else {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s/memory.stat: cgroup page cache unknown", dir);
    }
    free(st);
}

static void hr_cg_v2(hr_prof_mem *m, const char *dir, const char *top) {
    char path[1100], buf[64];
    /* the effective limit is the smallest memory.max up to the mount point */
    char d[1024];
    hr_prof_strlcpy(d, dir, sizeof d);
    int64_t lim = -1;
    size_t tl = strlen(top);
    for (;;) {
        snprintf(path, sizeof path, "%s/memory.max", d);
        if (hr_prof_read_text(path, buf, sizeof buf) > 0 && strncmp(buf, "max", 3) != 0) {
            long long v = strtoll(buf, NULL, 10);
            if (v > 0 && (lim < 0 || v < lim))
                lim = v;
        }
        char *slash = strrchr(d, '/');
        if (!slash || (size_t)(slash - d) < tl)
            break;
        *slash = 0;
    }
    m->cg_limit_bytes = lim;
    snprintf(path, sizeof path, "%s/memory.current", dir);
    if (hr_prof_read_i64(path, &m->cg_usage_bytes) != 0)
        m->cg_usage_bytes = -1;
    char *st = malloc(16384);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    if (st && hr_prof_read_text(path, st, 16384) > 0)
        m->cg_file_bytes = hr_stat_value(st, "file");
    free(st);
}

/* Whether the comma-separated controller list ctrls names ctrl. */
static bool hr_cg_has(const char *ctrls, const char *ctrl) {
    char cbuf[256];
    bool has = false;
    hr_prof_strlcpy(cbuf, ctrls, sizeof cbuf);
    for (char *save = NULL, *tok = strtok_r(cbuf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save))
        has |= strcmp(tok, ctrl) == 0;
    return has;
}

/* Calls fn for each line of /proc/self/cgroup ("hierarchy-id:controllers:
 * path"): v2 for the unified hierarchy's line ("0::path"), else the v1
 * controllers. False when the file cannot be read. */
static bool hr_cg_lines(const char *sysroot,
                        void (*fn)(bool v2, const char *ctrls, const char *path, void *ud),
                        void *ud) {
    char path[512];
    char *text = malloc(8192);
    hr_prof_path(path, sizeof path, sysroot, "/proc/self/cgroup");
    if (!text || hr_prof_read_text(path, text, 8192) <= 0) {
        free(text);
        return false;
    }
    char *lsave = NULL;
    for (char *l = strtok_r(text, "\n", &lsave); l; l = strtok_r(NULL, "\n", &lsave)) {
        char *c1 = strchr(l, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = 0;
        fn(strcmp(l, "0") == 0 && c1[1] == 0, c1 + 1, c2 + 1, ud);
    }
    free(text);
    return true;
}

typedef struct {
    char v1path[256], v2path[256];
    bool have_v1, have_v2;
} hr_cg_mem_paths;

static void hr_cg_mem_line(bool v2, const char *ctrls, const char *p, void *ud) {
    hr_cg_mem_paths *mp = ud;
    if (v2) {
        hr_prof_strlcpy(mp->v2path, p, sizeof mp->v2path);
        mp->have_v2 = true;
    } else if (hr_cg_has(ctrls, "memory")) {
        hr_prof_strlcpy(mp->v1path, p, sizeof mp->v1path);
        mp->have_v1 = true;
    }
}

static void hr_read_cgroup(hr_prof_mem *m, const char *sysroot) {
    hr_cg_mem_paths mp = {0};
    if (!hr_cg_lines(sysroot, hr_cg_mem_line, &mp)) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read /proc/self/cgroup: cgroup limits unknown");
        return;
    }
    char *v1path = mp.v1path, *v2path = mp.v2path;
    bool have_v1 = mp.have_v1, have_v2 = mp.have_v2;
    char mnt[512], root[512], dir[1024];
    if (have_v1 && hr_cg_mount(sysroot, false, mnt, sizeof mnt, root, sizeof root)) {
        m->cg_version = 1;
        hr_prof_strlcpy(m->cg_path, v1path, sizeof m->cg_path);
        hr_cg_dir(dir, sizeof dir, sysroot, mnt, root, v1path);
        hr_cg_v1(m, dir);
        return;
    }
    if (have_v2 && hr_cg_mount(sysroot, true, mnt, sizeof mnt, root, sizeof root)) {
        char top[600];
        snprintf(top, sizeof top, "%s%s", sysroot ? sysroot : "", mnt);
        hr_cg_dir(dir, sizeof dir, sysroot, mnt, root, v2path);
        char probe[1100];
        snprintf(probe, sizeof probe, "%s/memory.current", dir);
        if (access(probe, R_OK) != 0 && strcmp(v2path, "/") != 0) {
            HR_LOG_DEBUG(HR_PROF_TAG, "cgroup v2 %s has no memory controller", dir);
            return;
        }
        m->cg_version = 2;
        hr_prof_strlcpy(m->cg_path, v2path, sizeof m->cg_path);
        hr_cg_v2(m, dir, top);
        return;
    }
    if (have_v1 || have_v2)
        HR_LOG_WARN(HR_PROF_TAG,
                    "memory cgroup listed in /proc/self/cgroup but its mount was not found");
}

void hr_prof_read_mem(hr_prof_mem *m, const char *sysroot) {
    memset(m, 0, sizeof *m);
    m->total_bytes = m->available_bytes = m->free_bytes = m->cached_bytes = -1;
    m->file_lru_bytes = m->swap_total_bytes = m->swap_free_bytes = -1;
    m->swappiness = -1;
    m->cg_limit_bytes = m->cg_usage_bytes = m->cg_file_bytes = -1;
    m->weights_avail_bytes = -1;
    hr_prof_strlcpy(m->lru, "unknown", sizeof m->lru);
    char path[512];
    char *mi = malloc(16384);
    hr_prof_path(path, sizeof path, sysroot, "/proc/meminfo");
    if (mi && hr_prof_read_text(path, mi, 16384) > 0) {
        m->total_bytes = hr_meminfo_kb(mi, "MemTotal");
        m->available_bytes = hr_meminfo_kb(mi, "MemAvailable");
        m->free_bytes = hr_meminfo_kb(mi, "MemFree");
        m->cached_bytes = hr_meminfo_kb(mi, "Cached");
        int64_t af = hr_meminfo_kb(mi, "Active(file)"), inf = hr_meminfo_kb(mi, "Inactive(file)");
        m->file_lru_bytes = af >= 0 && inf >= 0 ? af + inf : -1;
        m->swap_total_bytes = hr_meminfo_kb(mi, "SwapTotal");
        m->swap_free_bytes = hr_meminfo_kb(mi, "SwapFree");
        if (m->total_bytes < 0 || m->available_bytes < 0)
            HR_LOG_WARN(HR_PROF_TAG, "%s lacks MemTotal/MemAvailable: reported as unknown", path);
    } else {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: memory sizes unknown", path);
    }
    free(mi);
    int64_t v;
    hr_prof_path(path, sizeof path, sysroot, "/proc/sys/vm/swappiness");
    if (hr_prof_read_i64(path, &v) == 0)
        m->swappiness = (int)v;
    else
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: swappiness unknown", path);
    char buf[64];
    hr_prof_path(path, sizeof path, sysroot, "/sys/kernel/mm/lru_gen/enabled");
    if (hr_prof_read_text(path, buf, sizeof buf) > 0) {
        hr_prof_strlcpy(m->lru, strtol(buf, NULL, 16) & 1 ? "mglru" : "classic", sizeof m->lru);
    } else {
        hr_prof_path(path, sizeof path, sysroot, "/sys/kernel/mm");
        if (access(path, F_OK) == 0)
            hr_prof_strlcpy(m->lru, "classic", sizeof m->lru);
    }
    hr_read_cgroup(m, sysroot);
    /* page cache the weights can hold */
    int64_t avail = m->available_bytes;
    if (m->cg_limit_bytes > 0) {
        int64_t used = 0;
        if (m->cg_usage_bytes >= 0)
            used = m->cg_usage_bytes - (m->cg_file_bytes > 0 ? m->cg_file_bytes : 0);
        int64_t room = m->cg_limit_bytes - (used > 0 ? used : 0);
        if (room < 0)
            room = 0;
        avail = avail < 0 || room < avail ? room : avail;
    }
    m->weights_avail_bytes = avail;
}

double hr_prof_read_load(const char *sysroot) {
    char path[512], buf[128];
    hr_prof_path(path, sizeof path, sysroot, "/proc/loadavg");
    if (hr_prof_read_text(path, buf, sizeof buf) <= 0) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: load unknown", path);
        return -1.0;
    }
    char *end = NULL;
    double v = strtod(buf, &end);
    return end == buf || v < 0 ? -1.0 : v;
}

/* ---- GPUs ---- */

static const char *hr_pci_vendor(unsigned v) {
    switch (v) {
    case 0x10de:
        return "nvidia";
    case 0x1002:
        return "amd";
    case 0x8086:
        return "intel";
    case 0x1af4:
        return "virtio";
    case 0x1234:
        return "qemu";
    case 0x15ad:
        return "vmware";
    default:
        return "other";
    }
}

int hr_prof_read_gpus(char gpus[][64], int max, const char *sysroot) {
    char path[512];
    int n = 0;
    hr_prof_path(path, sizeof path, sysroot, "/sys/class/drm");
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && n < max) {
            /* cardN only, not connectors like card0-HDMI-A-1 */
            if (strncmp(e->d_name, "card", 4) != 0 || !e->d_name[4] ||
                strspn(e->d_name + 4, "0123456789") != strlen(e->d_name + 4))
                continue;
            char p2[800], buf[32];
            unsigned vendor = 0, device = 0;
            snprintf(p2, sizeof p2, "%s/%s/device/vendor", path, e->d_name);
            if (hr_prof_read_text(p2, buf, sizeof buf) > 0)
                vendor = (unsigned)strtoul(buf, NULL, 16);
            snprintf(p2, sizeof p2, "%s/%s/device/device", path, e->d_name);
            if (hr_prof_read_text(p2, buf, sizeof buf) > 0)
                device = (unsigned)strtoul(buf, NULL, 16);
            snprintf(gpus[n++], 64, "%s %04x:%04x %.24s", hr_pci_vendor(vendor), vendor, device,
                     e->d_name);
        }
        closedir(d);
    } else {
        HR_LOG_DEBUG(HR_PROF_TAG, "no %s: no DRM GPUs", path);
    }
    if (n == 0) {
        /* the NVIDIA driver without DRM */
        hr_prof_path(path, sizeof path, sysroot, "/proc/driver/nvidia/gpus");
        d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) && n < max)
                if (e->d_name[0] != '.')
                    snprintf(gpus[n++], 64, "nvidia %.40s", e->d_name);
            closedir(d);
        }
    }
    return n;
}

/* ---- topology from sysfs ---- */

void hr_prof_topo_unknown(hr_prof_topo *t) {
    memset(t, 0, sizeof *t);
    hr_prof_strlcpy(t->source, "unknown", sizeof t->source);
    t->n_packages = t->n_numa = t->n_cores = t->n_pus = t->n_l3 = t->smt = -1;
    t->l3_bytes = -1;
}

/* Counts the CPUs in a list like "0-3,8,10-11". */
static int hr_cpulist_count(const char *s) {
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s)
            break;
        long b = a;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            s = end;
        }
        if (b >= a)
            n += (int)(b - a + 1);
        if (*s == ',')
            s++;
    }
    return n;
}

void hr_prof_topo_sysfs(hr_prof_topo *t, const char *sysroot) {
    hr_prof_topo_unknown(t);
    char path[512], buf[256];
    hr_prof_path(path, sizeof path, sysroot, "/sys/devices/system/cpu/online");
    if (hr_prof_read_text(path, buf, sizeof buf) <= 0) {
        HR_LOG_WARN(HR_PROF_TAG, "cannot read %s: topology unknown", path);
        return;
    }
    hr_prof_strlcpy(t->source, "sysfs", sizeof t->source);
    t->n_pus = hr_cpulist_count(buf);
    /* cores and packages: distinct (package, core) pairs over cpu0..cpuN */
    enum { MAXC = 1024 };
    static const int none = -1;
    int64_t *pairs = malloc(MAXC * sizeof *pairs);
    int n_pairs = 0, n_pkg = 0;
    int pkgs[64];
    for (int c = 0; pairs && c < MAXC; c++) {
        char p2[600];
        int64_t pkg = none, core = none;
        snprintf(p2, sizeof p2, "%s/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 sysroot ? sysroot : "", c);
        if (hr_prof_read_i64(p2, &pkg) != 0)
            continue;
        snprintf(p2, sizeof p2, "%s/sys/devices/system/cpu/cpu%d/topology/core_id",
                 sysroot ? sysroot : "", c);
        if (hr_prof_read_i64(p2, &core) != 0)
            continue;
        int64_t key = pkg * 100000 + core;
        bool seen = false;
        for (int i = 0; i < n_pairs && !seen; i++)
            seen = pairs[i] == key;
        if (!seen)
            pairs[n_pairs++] = key;
        seen = false;
        for (int i = 0; i < n_pkg && !seen; i++)
            seen = pkgs[i] == (int)pkg;
        if (!seen && n_pkg < 64)
            pkgs[n_pkg++] = (int)pkg;
    }
    free(pairs);
    if (n_pairs > 0) {
        t->n_cores = n_pairs;
        t->n_packages = n_pkg;
        if (t->n_pus > 0)
            t->smt = t->n_pus / n_pairs > 0 ? t->n_pus / n_pairs : 1;
    }
    /* L3: size and sharing of cpu0's level-3 cache */
    for (int idx = 0; idx < 8; idx++) {
        char p2[600];
        int64_t level = 0;
        snprintf(p2, sizeof p2, "%s/sys/devices/system/cpu/cpu0/cache/index%d/level",
                 sysroot ? sysroot : "", idx);
        if (hr_prof_read_i64(p2, &level) != 0 || level != 3)
            continue;
        snprintf(p2, sizeof p2, "%s/sys/devices/system/cpu/cpu0/cache/index%d/size",
                 sysroot ? sysroot : "", idx);
        if (hr_prof_read_text(p2, buf, sizeof buf) > 0) {
            char *end;
            long long v = strtoll(buf, &end, 10);
            t->l3_bytes = v * (*end == 'K' ? 1024 : *end == 'M' ? 1048576 : 1);
        }
        snprintf(p2, sizeof p2, "%s/sys/devices/system/cpu/cpu0/cache/index%d/shared_cpu_list",
                 sysroot ? sysroot : "", idx);
        if (hr_prof_read_text(p2, buf, sizeof buf) > 0 && t->n_pus > 0) {
            int share = hr_cpulist_count(buf);
            if (share > 0)
                t->n_l3 = (t->n_pus + share - 1) / share;
        }
        break;
    }
    /* NUMA nodes */
    int nn = 0;
    for (int node = 0; node < 1024 && nn < HR_PROF_MAX_NUMA; node++) {
        char p2[600];
        snprintf(p2, sizeof p2, "%s/sys/devices/system/node/node%d/cpulist", sysroot ? sysroot : "",
                 node);
        if (hr_prof_read_text(p2, buf, sizeof buf) < 0)
            continue;
        hr_prof_numa *nu = &t->numa[nn++];
        nu->os_index = node;
        nu->n_pus = hr_cpulist_count(buf);
        nu->n_cores = t->smt > 0 ? nu->n_pus / t->smt : -1;
        nu->mem_bytes = -1;
        char *mi = malloc(4096);
        snprintf(p2, sizeof p2, "%s/sys/devices/system/node/node%d/meminfo", sysroot ? sysroot : "",
                 node);
        if (mi && hr_prof_read_text(p2, mi, 4096) > 0) {
            const char *p = strstr(mi, "MemTotal:");
            if (p)
                nu->mem_bytes = (int64_t)strtoll(p + 9, NULL, 10) * 1024;
        }
        free(mi);
    }
    t->n_numa_listed = nn;
    t->n_numa = nn > 0 ? nn : -1;
}

/* ---- CPU quota ---- */

typedef struct {
    const char *sysroot;
    double cores, period_us; /* smallest quota / period over the ancestors; -1 none */
} hr_cg_cpu_ctx;

/* Keeps the tighter of the running limit and quota / period. */
static void hr_cg_cpu_take(hr_cg_cpu_ctx *c, double quota_us, double period_us) {
    if (!(quota_us > 0 && period_us > 0))
        return;
    double cores = quota_us / period_us;
    if (c->cores < 0 || cores < c->cores) {
        c->cores = cores;
        c->period_us = period_us;
    }
}

/* Walks from dir up to the mount point top, reading the quota at each level
 * (a parent's quota bounds its children). */
static void hr_cg_cpu_walk(hr_cg_cpu_ctx *c, bool v2, const char *dir, const char *top) {
    char d[1024], path[1100], buf[96];
    hr_prof_strlcpy(d, dir, sizeof d);
    size_t tl = strlen(top);
    for (;;) {
        if (v2) {
            snprintf(path, sizeof path, "%s/cpu.max", d);
            double q = -1, per = -1;
            if (hr_prof_read_text(path, buf, sizeof buf) > 0 && strncmp(buf, "max", 3) != 0 &&
                sscanf(buf, "%lf %lf", &q, &per) == 2)
                hr_cg_cpu_take(c, q, per);
        } else {
            int64_t q = -1, per = -1;
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", d);
            if (hr_prof_read_i64(path, &q) == 0) {
                snprintf(path, sizeof path, "%s/cpu.cfs_period_us", d);
                if (hr_prof_read_i64(path, &per) == 0)
                    hr_cg_cpu_take(c, (double)q, (double)per);
            }
        }
        char *slash = strrchr(d, '/');
        if (!slash || (size_t)(slash - d) < tl)
            break;
        *slash = 0;
    }
}

static void hr_cg_cpu_line(bool v2, const char *ctrls, const char *p, void *ud) {
    hr_cg_cpu_ctx *c = ud;
    char mnt[512], root[512], dir[1024], top[600];
    if (!v2 && !hr_cg_has(ctrls, "cpu"))
        return;
    if (!hr_cg_mount_of(c->sysroot, v2, v2 ? "" : "cpu", mnt, sizeof mnt, root, sizeof root))
        return;
    snprintf(top, sizeof top, "%s%s", c->sysroot ? c->sysroot : "", mnt);
    hr_cg_dir(dir, sizeof dir, c->sysroot, mnt, root, p);
    hr_cg_cpu_walk(c, v2, dir, top);
}

void hr_prof_read_cpu_quota(const char *sysroot, double *cores, double *period_ms) {
    hr_cg_cpu_ctx c = {sysroot, -1.0, -1.0};
    hr_cg_lines(sysroot, hr_cg_cpu_line, &c);
    *cores = c.cores;
    *period_ms = c.period_us > 0 ? c.period_us / 1e3 : -1.0;
}

/* Appends "name=contents;" of a cgroup file (newlines as spaces) to out. */
static void hr_cg_key_file(char *out, size_t cap, const char *dir, const char *name) {
    char path[1200], buf[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (hr_prof_read_text(path, buf, sizeof buf) <= 0)
        return;
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    size_t n = strlen(out);
    if (n < cap)
        snprintf(out + n, cap - n, "%s=%s;", name, buf);
}

typedef struct {
    char *out;
    size_t cap;
    const char *sysroot;
} hr_cg_key_ctx;

static void hr_cg_key_line(bool v2, const char *ctrls, const char *p, void *ud) {
    static const char *const v1[][3] = {
        {"cpu", "cpu.cfs_quota_us", "cpu.cfs_period_us"},
        {"blkio", "blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device"}};
    hr_cg_key_ctx *kc = ud;
    char mnt[512], root[512], dir[1024];
    if (v2) {
        if (hr_cg_mount_of(kc->sysroot, true, "", mnt, sizeof mnt, root, sizeof root)) {
            hr_cg_dir(dir, sizeof dir, kc->sysroot, mnt, root, p);
            hr_cg_key_file(kc->out, kc->cap, dir, "cpu.max");
            hr_cg_key_file(kc->out, kc->cap, dir, "io.max");
        }
        return;
    }
    for (size_t k = 0; k < sizeof v1 / sizeof v1[0]; k++) {
        if (hr_cg_has(ctrls, v1[k][0]) &&
            hr_cg_mount_of(kc->sysroot, false, v1[k][0], mnt, sizeof mnt, root, sizeof root)) {
            hr_cg_dir(dir, sizeof dir, kc->sysroot, mnt, root, p);
            hr_cg_key_file(kc->out, kc->cap, dir, v1[k][1]);
            hr_cg_key_file(kc->out, kc->cap, dir, v1[k][2]);
        }
    }
}

void hr_prof_cg_limits_key(char *out, size_t cap, const char *sysroot) {
    out[0] = 0;
    hr_cg_key_ctx kc = {out, cap, sysroot};
    hr_cg_lines(sysroot, hr_cg_key_line, &kc);
}
