/* experts.h - streaming a mixture-of-experts window by expert: what every
 * token reads (attention, router, norms, shared experts) and the most used
 * experts stay resident; an expert the router picks that is not resident
 * is read right after the choice, on this module's thread, and dropped
 * again once its layer is computed.
 *
 * The file layout it works on: each layer's routed experts are three
 * stacks (gate, up, down), each n_expert equal slices one after another
 * (model.h hr_expert_view). Expert e of layer il is the three slices
 * [off[p] + e * stride[p], + stride[p]) for p < 3.
 *
 * Residency is advice, as everything in mmap/stream.h: the mapping reads
 * back the same bytes whatever is resident; a slice the thread has not
 * read yet when the layer needs it faults in on the computing thread.
 *
 * Thread-safety: create / destroy / plan from one controlling thread;
 * route / layer_done from the computing thread (one at a time); stats
 * from any thread. route and layer_done take a mutex and signal a
 * condition variable (no allocation, no disk); route also asks the kernel
 * to read the routed experts that are not resident (MADV_WILLNEED, which
 * returns at once), so that their reads go out together. */
#ifndef HR_MMAP_EXPERTS_H
#define HR_MMAP_EXPERTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "mmap/gguf.h"

/* The routed experts of one layer in the file. */
typedef struct {
    uint64_t off[3];    /* file offset of the gate, up and down stacks */
    uint64_t stride[3]; /* bytes of one expert's slice of each */
} hr_expert_layer;

typedef struct hr_expert_cache hr_expert_cache;

/* For the mapping of g (borrowed, it must outlive the cache): n_layer
 * layers of n_expert experts each, laid out as layers[il] says (copied).
 * 0, HR_EINVAL, HR_ENOMEM with err. */
int hr_expert_cache_create(hr_expert_cache **out, const hr_gguf *g, int n_layer, int n_expert,
                           const hr_expert_layer *layers, char err[HR_ERR_LEN]);
/* Stops the thread, unlocks what it locked. NULL is a no-op. */
void hr_expert_cache_destroy(hr_expert_cache *c);

/* The windows this device computes: win_off / win_len (n_win of them, file
 * ranges as mmap/stream.h hr_stream_window_range gives) holding layers
 * layer_begin[w] .. + n_layers[w]. Everything of those ranges but the
 * experts is pinned (mlock where allowed when lock, else read in once),
 * and of each layer's experts the `keep` most routed so far (the lowest
 * indices while there are no counts); the other experts are dropped.
 * Every `rerank` routes of a layer, its resident set moves to the most
 * routed experts. n_win 0 stops it (nothing pinned, nothing streamed). */
int hr_expert_cache_plan(hr_expert_cache *c, const uint64_t *win_off, const uint64_t *win_len,
                         const int *layer_begin, const int *n_layers, int n_win, int keep,
                         int rerank, bool lock);
/* Layer `layer` routes the step's rows to experts[0..n): the ones not
 * resident are read on the thread now and dropped after layer_done. */
void hr_expert_cache_route(hr_expert_cache *c, int layer, const int *experts, int n);
/* Layer `layer` was computed. */
void hr_expert_cache_layer_done(hr_expert_cache *c, int layer);

/* Waits until the thread has applied the latest plan and handled every
 * event posted so far: 0, or HR_ETIMEDOUT after timeout_ms. */
int hr_expert_cache_wait(hr_expert_cache *c, int timeout_ms);

typedef struct {
    int keep;                /* resident experts per layer of the plan */
    uint64_t pinned;         /* bytes pinned: the always-read part and the resident experts */
    int locked;              /* 1: all of them mlock'ed, 0: some kept by advice, -1 no plan */
    uint64_t routed, hits;   /* experts routed to, and of them resident ones */
    uint64_t fetched;        /* bytes of experts asked for on demand (cached or not) */
    uint64_t reranks;        /* resident experts replaced by more routed ones */
    uint64_t rerank_bytes;   /* bytes of experts read in by those replacements */
    uint64_t dropped_events; /* routes not followed (the queue was full) */
    uint64_t plans_applied;  /* plans whose pinned part has been read in */
} hr_expert_cache_stats;
void hr_expert_cache_get_stats(hr_expert_cache *c, hr_expert_cache_stats *out);

#endif
