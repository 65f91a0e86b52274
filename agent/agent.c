/* agent.c - the agent daemon's public entry: parameters, create / run /
 * stop / destroy, dispatching to the node core (node.c) and to the head
 * (head.c) or the worker (worker.c). */
#include "agent/agent-impl.h"

#include "common/error.h"

#include <stdlib.h>

hr_agent_params hr_agent_params_default(void) {
    return (hr_agent_params){.listen = "127.0.0.1:7700",
                             .n_threads = 0,
                             .n_batch = 64,
                             .wire_dtype = HR_RING_F32,
                             .gpu_layers = -1,
                             .prefetch = true,
                             .release = -1,
                             .profile = false,
                             .hb_interval_ms = 250,
                             .hb_timeout_ms = 2000,
                             .data_timeout_ms = 60000,
                             .recover_ms = 30000,
                             .cache_gb = 0};
}

const char *hr_agent_endpoint(const hr_agent *a) { return a->ctrl_ep; }
const char *hr_agent_data_endpoint(const hr_agent *a) { return a->data_ep; }
bool hr_agent_is_head(const hr_agent *a) { return a->is_head; }
const char *hr_agent_join_token(const hr_agent *a) { return a->join_token; }
const char *hr_agent_name(const hr_agent *a) { return a->name; }
void hr_agent_stop(hr_agent *a) { atomic_store(&a->stop, 1); }

int hr_agent_create(hr_agent **out, const hr_agent_params *p, char err[HR_ERR_LEN]) {
    *out = NULL;
    if (!p->model_path && (!p->head && !p->discover))
        return hr_seterr(err, HR_EINVAL, "no model given (only a worker may start without one)");
    hr_agent *a = calloc(1, sizeof *a);
    if (!a)
        return hr_seterr(err, HR_ENOMEM, "out of memory");
    a->is_head = !p->head && !p->discover;
    int rc = hr_node_init(a, p, err);
    if (rc == 0 && a->is_head)
        rc = hr_head_create(a, err);
    if (rc) {
        hr_agent_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

void hr_agent_destroy(hr_agent *a) {
    if (!a)
        return;
    atomic_store(&a->stop, 1);
    hr_head_destroy(a); /* the service first: it may be generating */
    hr_node_fini(a);
    free(a);
}

/* An agent without --head waits for an invitation when it has no workers
 * of its own and no expectation set; it is a head otherwise. */
int hr_agent_run(hr_agent *a, char err[HR_ERR_LEN]) {
    if (!a->is_head)
        return hr_worker_run(a, err);
    int rc = hr_head_run(a, err);
    if (rc == 1) { /* invited: become a worker (the head's state stays idle) */
        a->is_head = false;
        return hr_worker_run(a, err);
    }
    return rc;
}
