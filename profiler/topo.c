/* topo.c - CPU and memory topology from hwloc: packages, NUMA nodes with
 * their cores and memory, L3 domains, SMT. */
#include "profiler/profiler-impl.h"

#include "common/log.h"

#include <hwloc.h>
#include <string.h>

int hr_prof_topo_hwloc(hr_prof_topo *t) {
    hr_prof_topo_unknown(t);
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return HR_ENOMEM;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return HR_EIO;
    }
    hr_prof_strlcpy(t->source, "hwloc", sizeof t->source);
    int v;
    v = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    t->n_packages = v > 0 ? v : -1;
    v = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    t->n_numa = v > 0 ? v : -1;
    v = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->n_cores = v > 0 ? v : -1;
    v = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    t->n_pus = v > 0 ? v : -1;
    v = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE);
    t->n_l3 = v >= 0 ? v : -1;
    if (v > 0) {
        hwloc_obj_t l3 = hwloc_get_obj_by_type(topo, HWLOC_OBJ_L3CACHE, 0);
        if (l3 && l3->attr)
            t->l3_bytes = (int64_t)l3->attr->cache.size;
    }
    if (t->n_cores > 0 && t->n_pus > 0)
        t->smt = t->n_pus / t->n_cores > 0 ? t->n_pus / t->n_cores : 1;
    int nn = t->n_numa > 0 ? t->n_numa : 0;
    if (nn > HR_PROF_MAX_NUMA) {
        HR_LOG_INFO(HR_PROF_TAG, "%d NUMA nodes; listing the first %d", nn, HR_PROF_MAX_NUMA);
        nn = HR_PROF_MAX_NUMA;
    }
    for (int i = 0; i < nn; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        hr_prof_numa *nu = &t->numa[i];
        nu->os_index = node ? (int)node->os_index : i;
        nu->mem_bytes = node && node->attr ? (int64_t)node->attr->numanode.local_memory : -1;
        nu->n_cores =
            node ? hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE) : -1;
        nu->n_pus =
            node ? hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_PU) : -1;
    }
    t->n_numa_listed = nn;
    hwloc_topology_destroy(topo);
    return 0;
}
