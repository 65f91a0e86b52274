/*
 * lab-disk.c - a disk of a given read rate for the emulated home lab
 * (deploy/lab.sh): a FUSE file system holding one read-only file, an image
 * whose reads are served no faster than the rate, with no burst.
 *
 *   hearth-lab-disk IMAGE MOUNTPOINT MBPS [-f] [FUSE options]
 *
 * The lab attaches MOUNTPOINT/<image name> to a loop device and mounts the
 * file system inside it, so a device's model file sits on a block device
 * whose reads wait for this rate. A blkio throttle cannot stand in for
 * that: it grants each 100 ms slice's bytes at once, so reads of tens of
 * MiB after an idle spell pass at the host disk's speed (LAB.md).
 *
 * Pacing: one queue for all reads, as a disk with one head. A read of n
 * bytes starts when the previous one ends (or now, when the disk is idle)
 * and is answered n / rate later. Every open is direct I/O (no FUSE page
 * cache), so the only cache in front of the rate is the one the lab's
 * device owns (its file system on the loop device). The image itself is
 * read through the host's page cache: its own disk is not what is
 * emulated.
 *
 * On SIGUSR1 it prints the bytes served and the seconds spent waiting.
 */
#define FUSE_USE_VERSION 31
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct {
    int fd;
    char name[NAME_MAX + 1]; /* the one file's name, without '/' */
    off_t size;              /* bytes */
    double bps;              /* bytes per second */
    pthread_mutex_t mu;
    double busy_until; /* s, CLOCK_MONOTONIC: when the queued reads end */
    _Atomic uint64_t served;
    _Atomic uint64_t wait_ns;
} g_disk = {.fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* pace: waits until n bytes queued behind every earlier read have passed;
 * t0 is when the read arrived (s, CLOCK_MONOTONIC), so the copy out of the
 * image counts as part of its transfer time. */
static void pace(size_t n, double t0) {
    pthread_mutex_lock(&g_disk.mu);
    double start = g_disk.busy_until > t0 ? g_disk.busy_until : t0;
    double end = start + (double)n / g_disk.bps;
    g_disk.busy_until = end;
    pthread_mutex_unlock(&g_disk.mu);
    struct timespec ts = {.tv_sec = (time_t)end};
    ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    atomic_fetch_add(&g_disk.wait_ns, (uint64_t)((now_s() - t0) * 1e9));
}

static int is_file(const char *path) { return path[0] == '/' && !strcmp(path + 1, g_disk.name); }

static int disk_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    memset(st, 0, sizeof *st);
    if (!strcmp(path, "/")) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        return 0;
    }
    if (!is_file(path))
        return -ENOENT;
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = g_disk.size;
    st->st_blksize = 4096;
    st->st_blocks = (g_disk.size + 511) / 512;
    return 0;
}

static int disk_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                        struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)off;
    (void)fi;
    (void)flags;
    if (strcmp(path, "/"))
        return -ENOENT;
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    fill(buf, g_disk.name, NULL, 0, 0);
    return 0;
}

static int disk_open(const char *path, struct fuse_file_info *fi) {
    if (!is_file(path))
        return -ENOENT;
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return -EROFS;
    fi->direct_io = 1; /* every read comes here: no FUSE page cache */
    fi->keep_cache = 0;
    return 0;
}

static int disk_read(const char *path, char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
    (void)path;
    (void)fi;
    double t0 = now_s();
    if (off >= g_disk.size)
        return 0;
    if ((off_t)size > g_disk.size - off)
        size = (size_t)(g_disk.size - off);
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(g_disk.fd, buf + got, size - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    pace(got, t0);
    atomic_fetch_add(&g_disk.served, got);
    return (int)got;
}

static void *disk_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    (void)conn;
    cfg->direct_io = 1;
    cfg->kernel_cache = 0;
    cfg->attr_timeout = 3600;
    cfg->entry_timeout = 3600;
    return NULL;
}

static const struct fuse_operations disk_ops = {
    .init = disk_init,
    .getattr = disk_getattr,
    .readdir = disk_readdir,
    .open = disk_open,
    .read = disk_read,
};

static void on_usr1(int sig) {
    (void)sig;
    char line[128];
    int n = snprintf(line, sizeof line, "lab-disk: %" PRIu64 " bytes served, %.3f s waited\n",
                     (uint64_t)atomic_load(&g_disk.served),
                     (double)atomic_load(&g_disk.wait_ns) * 1e-9);
    if (n > 0)
        (void)!write(2, line, (size_t)n);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s IMAGE MOUNTPOINT MBPS [-f] [FUSE options]\n"
                "  serves IMAGE read-only as MOUNTPOINT/<its name>, reads paced at MBPS "
                "(10^6 bytes per second)\n",
                argv[0]);
        return 2;
    }
    const char *image = argv[1];
    char *end = NULL;
    double mbps = strtod(argv[3], &end);
    if (!end || *end || !(mbps > 0) || mbps > 1e6) {
        fprintf(stderr, "lab-disk: rate '%s' is not a number of MB/s in (0, 1e6]\n", argv[3]);
        return 2;
    }
    g_disk.bps = mbps * 1e6;
    const char *base = strrchr(image, '/');
    base = base ? base + 1 : image;
    if (!*base || strlen(base) > NAME_MAX) {
        fprintf(stderr, "lab-disk: bad image name '%s'\n", image);
        return 2;
    }
    snprintf(g_disk.name, sizeof g_disk.name, "%s", base);
    g_disk.fd = open(image, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (g_disk.fd < 0 || fstat(g_disk.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "lab-disk: cannot open the image '%s': %s\n", image,
                g_disk.fd < 0 ? strerror(errno) : "not a regular file");
        return 1;
    }
    g_disk.size = st.st_size;
    signal(SIGUSR1, on_usr1);

    /* fuse_main sees: prog MOUNTPOINT [options...] -o ro,... */
    char *fargv[64];
    int fargc = 0;
    fargv[fargc++] = argv[0];
    fargv[fargc++] = argv[2];
    for (int i = 4; i < argc && fargc < 60; i++)
        fargv[fargc++] = argv[i];
    fargv[fargc++] = "-o";
    fargv[fargc++] = "ro,default_permissions,fsname=hearth-lab-disk,subtype=hearth-lab-disk";
    fargv[fargc] = NULL;
    int rc = fuse_main(fargc, fargv, &disk_ops, NULL);
    on_usr1(0);
    close(g_disk.fd);
    return rc;
}
