/* numa.h - thread groups for NUMA-aware tensor parallelism inside a device.
 *
 * A group pool (hr_gpool) holds one group of persistent, pinned worker
 * threads per NUMA node (or per L3 domain when asked). hr_gpool_run runs
 * fn(ctx, g, n_groups) once per group on that group's leader thread (the
 * caller leads group 0); a leader runs its group's kernels on
 * hr_gpool_group(gp, g), an ordinary hr_pool, so kernels keep the
 * (ith, nth) contract and a kernel's fork/join is the intra-group barrier.
 * hr_gpool_barrier is the global barrier between leaders. Workers spin
 * briefly, then sleep; nothing is allocated or created per run.
 *
 * The topology comes from hwloc: this machine, or a synthetic description /
 * XML file (params.topology, or HWLOC_SYNTHETIC / HWLOC_XMLFILE in the
 * environment), so multi-node logic is testable on one node. Threads are
 * pinned and memory bound only when the topology is this machine's; asking
 * for more groups than domains maps several logical groups onto a domain.
 *
 * Per-phase thread plans: each group has a prefill and a decode thread
 * count; hr_gpool_set_phase switches between them with a few stores.
 *
 * Thread-safety: one caller at a time per group pool; hr_numa_plan_make is
 * reentrant. */
#ifndef HR_KERNELS_NUMA_H
#define HR_KERNELS_NUMA_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "kernels/pool.h"

#define HR_NUMA_MAX_GROUPS 16
#define HR_NUMA_MAX_GROUP_CPUS 256

typedef enum { HR_NUMA_DOMAIN_NODE = 0, HR_NUMA_DOMAIN_L3 = 1 } hr_numa_domain;
typedef enum { HR_PHASE_PREFILL = 0, HR_PHASE_DECODE = 1 } hr_phase;

typedef struct {
    int n_groups;          /* 0 = one per domain; N = exactly N (merging or splitting domains) */
    hr_numa_domain domain; /* NUMA nodes (default) or L3 domains */
    int n_threads;         /* prefill threads in all (0 = one per PU); each group >= 1 */
    int n_threads_decode;  /* decode threads in all (0 = n_threads); each group >= 1 */
    const char *topology;  /* NULL: this machine (or the HWLOC_* environment); else an
                              hwloc synthetic description ("numa:2 core:2 pu:1") or a
                              path ending in .xml */
    bool pin;              /* pin workers and bind memory (only on this machine) */
} hr_gpool_params;

hr_gpool_params hr_gpool_params_default(void);

typedef struct {
    int domain;           /* first topology domain (node or L3) the group runs on */
    int node;             /* OS index of the NUMA node holding its memory (-1 unknown) */
    int n_threads;        /* prefill */
    int n_threads_decode; /* decode (<= n_threads) */
    int n_cpus;
    int cpus[HR_NUMA_MAX_GROUP_CPUS]; /* OS indices of the PUs it may use */
} hr_numa_group;

typedef struct {
    bool this_system; /* topology is this machine's (pinning/binding possible) */
    int n_nodes;      /* NUMA nodes in the topology */
    int n_domains;    /* domains of the asked kind (nodes or L3) */
    int n_pus;
    int n_groups;
    hr_numa_group groups[HR_NUMA_MAX_GROUPS];
} hr_numa_plan;

/* Reads the topology and lays groups and thread counts over it. Returns 0,
 * HR_EINVAL (bad counts), HR_EIO (hwloc cannot load the topology). */
int hr_numa_plan_make(const hr_gpool_params *p, hr_numa_plan *out, char err[HR_ERR_LEN]);

typedef struct hr_gpool hr_gpool;
typedef void (*hr_gpool_fn)(void *ctx, int g, int n_groups);

int hr_gpool_create(hr_gpool **out, const hr_gpool_params *p, char err[HR_ERR_LEN]);
void hr_gpool_destroy(hr_gpool *gp); /* NULL is a no-op */
const hr_numa_plan *hr_gpool_plan(const hr_gpool *gp);
int hr_gpool_n_groups(const hr_gpool *gp);
/* The pool of group g (its leader is thread 0). */
hr_pool *hr_gpool_group(hr_gpool *gp, int g);
/* Total threads of the current phase. */
int hr_gpool_threads(const hr_gpool *gp);
/* Sets every group's active thread count for the phase. */
void hr_gpool_set_phase(hr_gpool *gp, hr_phase ph);
/* Runs fn once per group, each on its leader, and returns when all have. */
void hr_gpool_run(hr_gpool *gp, hr_gpool_fn fn, void *ctx);
/* Global barrier: called by every group leader inside hr_gpool_run. */
void hr_gpool_barrier(hr_gpool *gp);

/* Zeroed, 64-byte aligned memory on group g's node (bound when pinning is
 * on, the topology is this machine's and it has several nodes; plain memory
 * otherwise). NULL on failure. Free with hr_gpool_free and the same size. */
void *hr_gpool_alloc(hr_gpool *gp, int g, size_t bytes);
void hr_gpool_free(hr_gpool *gp, int g, void *ptr, size_t bytes);
/* Whether hr_gpool_alloc binds to nodes. */
bool hr_gpool_binds_memory(const hr_gpool *gp);
/* Best effort: moves the whole pages inside [ptr, ptr+bytes) (e.g. a mapped
 * weight slice) to group g's node. Returns 0, or HR_EUNSUPPORTED when
 * memory is not bound, or HR_EIO when the kernel refused (logged). */
int hr_gpool_bind_area(hr_gpool *gp, int g, const void *ptr, size_t bytes);

#endif
