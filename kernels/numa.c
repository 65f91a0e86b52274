/* numa.c - hwloc topology -> thread groups, the group pool, node-local
 * memory. */
#include "kernels/numa.h"

#include "common/log.h"

#include <hwloc.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "numa"

hr_gpool_params hr_gpool_params_default(void) {
    return (hr_gpool_params){.n_groups = 0, .domain = HR_NUMA_DOMAIN_NODE, .pin = true};
}

/* ---- topology -> plan ---- */

typedef struct {
    int node;
    int n_cpus;
    int *cpus;
} hr_domain;

static int hr_domain_fill(hwloc_topology_t topo, hwloc_const_cpuset_t set, hr_domain *d) {
    int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_PU);
    d->cpus = malloc((size_t)(n > 0 ? n : 1) * sizeof *d->cpus);
    if (!d->cpus)
        return HR_ENOMEM;
    d->n_cpus = 0;
    hwloc_obj_t pu = NULL;
    while ((pu = hwloc_get_next_obj_inside_cpuset_by_type(topo, set, HWLOC_OBJ_PU, pu)) &&
           d->n_cpus < n)
        d->cpus[d->n_cpus++] = (int)pu->os_index;
    d->node = -1;
    hwloc_obj_t nd = NULL;
    while ((nd = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nd))) {
        if (nd->cpuset && hwloc_bitmap_intersects(nd->cpuset, set)) {
            d->node = (int)nd->os_index;
            break;
        }
    }
    return 0;
}

static void hr_split_threads(int total, int n, int g, int *out) {
    long b, e;
    hr_split_range(total, g, n, 1, &b, &e);
    *out = e - b > 0 ? (int)(e - b) : 1;
}

int hr_numa_plan_make(const hr_gpool_params *p, hr_numa_plan *out, char err[HR_ERR_LEN]) {
    memset(out, 0, sizeof *out);
    if (p->n_groups < 0 || p->n_groups > HR_NUMA_MAX_GROUPS)
        return hr_seterr(err, HR_EINVAL, "%d thread groups asked; 0..%d supported", p->n_groups,
                         HR_NUMA_MAX_GROUPS);
    if (p->n_threads < 0 || p->n_threads_decode < 0)
        return hr_seterr(err, HR_EINVAL, "negative thread count");
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return hr_seterr(err, HR_ENOMEM, "hwloc: cannot initialise a topology");
    if (p->topology) {
        size_t len = strlen(p->topology);
        int rc = len > 4 && strcmp(p->topology + len - 4, ".xml") == 0
                     ? hwloc_topology_set_xml(topo, p->topology)
                     : hwloc_topology_set_synthetic(topo, p->topology);
        if (rc != 0) {
            hwloc_topology_destroy(topo);
            return hr_seterr(err, HR_EINVAL, "hwloc: bad topology '%s'", p->topology);
        }
    }
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return hr_seterr(err, HR_EIO, "hwloc: cannot load the topology");
    }
    out->this_system = hwloc_topology_is_thissystem(topo) != 0;
    int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    out->n_nodes = nn > 0 ? nn : 1;
    int npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    out->n_pus = npu > 0 ? npu : 1;
    hwloc_obj_type_t type = p->domain == HR_NUMA_DOMAIN_L3 ? HWLOC_OBJ_L3CACHE : HWLOC_OBJ_NUMANODE;
    int nd = hwloc_get_nbobjs_by_type(topo, type);
    if (nd <= 0 && type == HWLOC_OBJ_L3CACHE) {
        HR_LOG_INFO(TAG, "no L3 caches in the topology; grouping by NUMA node");
        type = HWLOC_OBJ_NUMANODE;
        nd = hwloc_get_nbobjs_by_type(topo, type);
    }
    bool whole = nd <= 0;
    if (whole)
        nd = 1;
    hr_domain *dom = calloc((size_t)nd, sizeof *dom);
    int rc = dom ? 0 : HR_ENOMEM;
    for (int d = 0; d < nd && rc == 0; d++) {
        hwloc_obj_t o =
            whole ? hwloc_get_root_obj(topo) : hwloc_get_obj_by_type(topo, type, (unsigned)d);
        rc = hr_domain_fill(topo, o->cpuset, &dom[d]);
        if (rc == 0 && dom[d].n_cpus == 0) {
            /* a CPU-less memory node: give it the machine's CPUs */
            free(dom[d].cpus);
            int node = dom[d].node;
            rc = hr_domain_fill(topo, hwloc_get_root_obj(topo)->cpuset, &dom[d]);
            dom[d].node = type == HWLOC_OBJ_NUMANODE ? (int)o->os_index : node;
        } else if (rc == 0 && type == HWLOC_OBJ_NUMANODE) {
            dom[d].node = (int)o->os_index;
        }
    }
    hwloc_topology_destroy(topo);
    if (rc) {
        for (int d = 0; dom && d < nd; d++)
            free(dom[d].cpus);
        free(dom);
        return hr_seterr(err, rc, "out of memory reading the topology");
    }
    out->n_domains = nd;
    int G = p->n_groups;
    if (G == 0) {
        G = nd;
        if (G > HR_NUMA_MAX_GROUPS) {
            HR_LOG_INFO(TAG, "%d domains; merging them into %d groups", nd, HR_NUMA_MAX_GROUPS);
            G = HR_NUMA_MAX_GROUPS;
        }
    }
    out->n_groups = G;
    for (int g = 0; g < G; g++) {
        hr_numa_group *gr = &out->groups[g];
        if (G <= nd) { /* merge domains [d0, d1) */
            long d0, d1;
            hr_split_range(nd, g, G, 1, &d0, &d1);
            gr->domain = (int)d0;
            gr->node = dom[d0].node;
            for (long d = d0; d < d1; d++)
                for (int i = 0; i < dom[d].n_cpus && gr->n_cpus < HR_NUMA_MAX_GROUP_CPUS; i++)
                    gr->cpus[gr->n_cpus++] = dom[d].cpus[i];
        } else { /* several logical groups share domain d */
            int d = (int)((long)g * nd / G);
            int first = -1, m = 0;
            for (int h = 0; h < G; h++) {
                if ((int)((long)h * nd / G) == d) {
                    if (first < 0)
                        first = h;
                    m++;
                }
            }
            int k = g - first;
            gr->domain = d;
            gr->node = dom[d].node;
            long c0, c1;
            hr_split_range(dom[d].n_cpus, k, m, 1, &c0, &c1);
            if (c1 <= c0) {
                gr->cpus[gr->n_cpus++] = dom[d].cpus[k % dom[d].n_cpus];
            } else {
                for (long c = c0; c < c1 && gr->n_cpus < HR_NUMA_MAX_GROUP_CPUS; c++)
                    gr->cpus[gr->n_cpus++] = dom[d].cpus[c];
            }
        }
    }
    for (int d = 0; d < nd; d++)
        free(dom[d].cpus);
    free(dom);
    int total = p->n_threads > 0 ? p->n_threads : out->n_pus;
    int total_dec = p->n_threads_decode > 0 ? p->n_threads_decode : total;
    for (int g = 0; g < G; g++) {
        hr_split_threads(total, G, g, &out->groups[g].n_threads);
        hr_split_threads(total_dec, G, g, &out->groups[g].n_threads_decode);
    }
    return 0;
}

/* ---- group pool ---- */

struct hr_gpool {
    hr_numa_plan plan;
    hr_pool *top;                     /* one thread per group leader; caller = group 0 */
    hr_pool *grp[HR_NUMA_MAX_GROUPS]; /* per group; thread 0 = its leader */
    hr_barrier bar;
    hr_gpool_fn fn;
    void *ctx;
    hr_phase phase;
    bool bind;
};

void hr_gpool_destroy(hr_gpool *gp) {
    if (!gp)
        return;
    hr_pool_destroy(gp->top);
    for (int g = 0; g < gp->plan.n_groups; g++)
        hr_pool_destroy(gp->grp[g]);
    free(gp);
}

int hr_gpool_create(hr_gpool **out, const hr_gpool_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    hr_gpool *gp = calloc(1, sizeof *gp);
    if (!gp)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    int rc = hr_numa_plan_make(p, &gp->plan, err);
    if (rc) {
        free(gp);
        return rc;
    }
    const hr_numa_plan *pl = &gp->plan;
    bool pin = p->pin && pl->this_system;
    gp->bind = pin && pl->n_nodes > 1 && numa_available() >= 0;
    int G = pl->n_groups;
    int cpus[HR_NUMA_MAX_GROUP_CPUS];
    for (int g = 0; g < G; g++)
        cpus[g] = pin ? pl->groups[g].cpus[0] : -1;
    gp->top = hr_pool_create_pinned(G, cpus);
    if (!gp->top || hr_pool_size(gp->top) != G) {
        hr_gpool_destroy(gp);
        return hr_seterr(err, HR_ENOMEM, "cannot start %d group leaders", G);
    }
    hr_pool_set_steal(gp->top, false); /* the leaders meet at barriers inside a job */
    for (int g = 0; g < G; g++) {
        const hr_numa_group *gr = &pl->groups[g];
        int nt = gr->n_threads > gr->n_threads_decode ? gr->n_threads : gr->n_threads_decode;
        if (nt > HR_NUMA_MAX_GROUP_CPUS)
            nt = HR_NUMA_MAX_GROUP_CPUS;
        for (int i = 0; i < nt; i++)
            cpus[i] = pin ? gr->cpus[i % gr->n_cpus] : -1;
        gp->grp[g] = hr_pool_create_pinned(nt, cpus);
        if (!gp->grp[g] || hr_pool_size(gp->grp[g]) != nt) {
            hr_gpool_destroy(gp);
            return hr_seterr(err, HR_ENOMEM, "cannot start %d threads for group %d", nt, g);
        }
    }
    if (pin && pl->n_nodes > 1) {
        /* group 0's work runs on the caller: keep it on group 0's node */
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int i = 0; i < pl->groups[0].n_cpus; i++)
            if (pl->groups[0].cpus[i] < CPU_SETSIZE)
                CPU_SET(pl->groups[0].cpus[i], &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
            HR_LOG_WARN(TAG, "cannot pin the calling thread to group 0's node");
    }
    hr_barrier_init(&gp->bar);
    hr_gpool_set_phase(gp, HR_PHASE_PREFILL);
    HR_LOG_INFO(TAG, "%d groups over %d %s (%d nodes, %s topology%s)", G, pl->n_domains,
                p->domain == HR_NUMA_DOMAIN_L3 ? "L3 domains" : "nodes", pl->n_nodes,
                pl->this_system ? "this machine's" : "a foreign",
                gp->bind ? ", memory bound per node" : "");
    *out = gp;
    return 0;
}

const hr_numa_plan *hr_gpool_plan(const hr_gpool *gp) { return &gp->plan; }
int hr_gpool_n_groups(const hr_gpool *gp) { return gp->plan.n_groups; }
hr_pool *hr_gpool_group(hr_gpool *gp, int g) { return gp->grp[g]; }
bool hr_gpool_binds_memory(const hr_gpool *gp) { return gp->bind; }

int hr_gpool_threads(const hr_gpool *gp) {
    int n = 0;
    for (int g = 0; g < gp->plan.n_groups; g++)
        n += hr_pool_active(gp->grp[g]);
    return n;
}

void hr_gpool_set_phase(hr_gpool *gp, hr_phase ph) {
    gp->phase = ph;
    for (int g = 0; g < gp->plan.n_groups; g++) {
        const hr_numa_group *gr = &gp->plan.groups[g];
        hr_pool_set_active(gp->grp[g],
                           ph == HR_PHASE_DECODE ? gr->n_threads_decode : gr->n_threads);
    }
}

static void hr_gpool_trampoline(void *ctx, int ith, int nth) {
    hr_gpool *gp = ctx;
    gp->fn(gp->ctx, ith, nth);
}

void hr_gpool_run(hr_gpool *gp, hr_gpool_fn fn, void *ctx) {
    gp->fn = fn;
    gp->ctx = ctx;
    hr_pool_run(gp->top, hr_gpool_trampoline, gp);
}

void hr_gpool_barrier(hr_gpool *gp) { hr_barrier_wait(&gp->bar, gp->plan.n_groups); }

/* ---- memory ---- */

void *hr_gpool_alloc(hr_gpool *gp, int g, size_t bytes) {
    if (bytes == 0)
        bytes = 64;
    if (gp->bind && gp->plan.groups[g].node >= 0)
        return numa_alloc_onnode(bytes, gp->plan.groups[g].node); /* zeroed pages */
    void *p = NULL;
    if (posix_memalign(&p, 64, (bytes + 63) & ~(size_t)63) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

void hr_gpool_free(hr_gpool *gp, int g, void *ptr, size_t bytes) {
    if (!ptr)
        return;
    if (bytes == 0)
        bytes = 64;
    if (gp->bind && gp->plan.groups[g].node >= 0)
        numa_free(ptr, bytes);
    else
        free(ptr);
}

int hr_gpool_bind_area(hr_gpool *gp, int g, const void *ptr, size_t bytes) {
    int node = gp->plan.groups[g].node;
    if (!gp->bind || node < 0)
        return HR_EUNSUPPORTED;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = ((uintptr_t)ptr + ps - 1) & ~(ps - 1);
    uintptr_t e = ((uintptr_t)ptr + bytes) & ~(ps - 1);
    if (e <= b)
        return 0;
    unsigned long mask[16] = {0};
    if (node >= (int)(sizeof mask * 8))
        return HR_EUNSUPPORTED;
    mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
    if (mbind((void *)b, e - b, MPOL_BIND, mask, sizeof mask * 8, MPOL_MF_MOVE) != 0) {
        HR_LOG_DEBUG(TAG, "mbind of %zu bytes to node %d refused", (size_t)(e - b), node);
        return HR_EIO;
    }
    return 0;
}
