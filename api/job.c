/* job.c - the lifetime of a request of the HTTP API (hr_job): its
 * references (the connection's, the service's) and what it owns, freed
 * with the last one. Used by http.c (requests, the service's callbacks)
 * and respond.c (answers that outlive the handler). */
#include "api/http-impl.h"

#include <pthread.h>
#include <stdlib.h>

void hr_job_unref_locked(hr_job *j) {
    if (--j->refs > 0)
        return;
    j->srv->n_jobs--;
    pthread_cond_broadcast(&j->srv->cv);
    hr_api_req_free(&j->req);
    hr_gen_destroy(j->gen);
    free(j->text);
    free(j->ev);
    free(j);
}

void hr_job_unref(hr_job *j) {
    hr_http *h = j->srv;
    pthread_mutex_lock(&h->mu);
    hr_job_unref_locked(j);
    pthread_mutex_unlock(&h->mu);
}
