/* stream.h - streaming the weights of an opened GGUF file through the page
 * cache: the file byte range of a window of layers, read-ahead of a range
 * (madvise WILLNEED), release of a range (MADV_COLD where the headers have
 * it, else MADV_DONTNEED), and how much of some ranges is resident
 * (mincore). The caller decides when: a device that computes its layers in
 * windows prefetches the next window while it computes this one and may
 * release a window once it is done with it.
 *
 * Offsets and lengths are file bytes ([off, off + len)); a range is
 * clamped to the file, and its start is rounded down to a page for the
 * system calls. Everything here is advice: it never changes what the
 * mapping reads back (the mapping is read-only, dropped pages fault back
 * in from the file).
 *
 * Thread-safety: every function is thread-safe. They only read the
 * immutable hr_gguf and issue madvise/mincore on its read-only mapping, so
 * any number of threads may call them at once, on overlapping ranges too;
 * the hr_gguf must stay open until the calls return. */
#ifndef HR_MMAP_STREAM_H
#define HR_MMAP_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "mmap/gguf.h"

/* File byte range of the layers [layer_begin, layer_end): *off is the
 * first byte of any of their tensors rounded down to a page, *off + *len
 * the end of the last byte of any of them (not rounded). Covers every
 * "blk.N." tensor with layer_begin <= N < layer_end; in a file with
 * out-of-order layers it is their hull and may include other tensors.
 * Layers without tensors are skipped. Returns 0; HR_ENOENT (*off = *len =
 * 0) when no layer of the window has tensors; HR_EINVAL for a NULL
 * argument, layer_begin < 0 or layer_end <= layer_begin. */
int hr_stream_window_range(const hr_gguf *g, int layer_begin, int layer_end, uint64_t *off,
                           uint64_t *len);

/* Asks the kernel to read [off, off + len) ahead (MADV_WILLNEED); returns
 * at once. 0 (also for an empty range); HR_ERANGE when off is past the end
 * of the file and len > 0; HR_EINVAL for NULL or a hr_gguf opened with
 * hr_gguf_open_memory (not our mapping to advise on); HR_EIO when madvise
 * refuses. */
int hr_stream_prefetch(const hr_gguf *g, uint64_t off, uint64_t len);

/* Tells the kernel [off, off + len) is not needed soon: MADV_COLD (pages
 * become the first to reclaim) where the headers define it, else
 * MADV_DONTNEED (this mapping drops them; they fault back in from the page
 * cache or the file). Same returns as hr_stream_prefetch. */
int hr_stream_release(const hr_gguf *g, uint64_t off, uint64_t len);

/* Faults on [off, off + len) read only the page they need (random: true,
 * MADV_RANDOM) or, as by default, the kernel's read-around window about it
 * (false, MADV_NORMAL; read_ahead_kb, often 128 KiB but up to several MiB
 * per fault). For ranges read in small scattered pieces, each piece asked
 * for with hr_stream_prefetch / hr_stream_fetch: a piece reclaimed before
 * use then faults back in alone, not with the megabytes around it.
 * A random range is also made small (hr_stream_small), a normal one
 * huge again. Same returns as hr_stream_prefetch. */
int hr_stream_random(const hr_gguf *g, uint64_t off, uint64_t len, bool random);

/* On a mapping advised huge (hr_stream_huge): takes the advice back from
 * [off, off + len) (small: true, MADV_NOHUGEPAGE; a fault there reads the
 * kernel's read-around, not the aligned 2 MiB about it) or gives it again
 * (false). Does nothing on other mappings. Same returns. */
int hr_stream_small(const hr_gguf *g, uint64_t off, uint64_t len, bool small);

/* Fraction in [0, 1] of the pages of the n ranges off[i], len[i] that are
 * resident (mincore; pages are counted once per range, so overlapping
 * ranges count twice). Ranges are clamped to the file; 1.0 when they hold
 * no page (n == 0, empty or past the end). -1 for NULL arguments, n < 0, a
 * hr_gguf opened with hr_gguf_open_memory, or when mincore fails. For a
 * file the process neither owns nor may write, Linux counts only the pages
 * this process has mapped, not the whole page cache. */
double hr_stream_residency(const hr_gguf *g, const uint64_t *off, const uint64_t *len, int n);

/* ---- one device's windows: a resident part and a streamed part ----
 *
 * A device computes n windows in turn (one per round). When their bytes
 * do not all fit the room it has for weights, each window keeps a
 * resident head [off, off + keep_len) and streams its tail
 * [stream_off, stream_off + stream_len) from disk every round, through a
 * buffer (the pump below): the scheme of sched/sched.h
 * hr_sched_stream_split, which gives the resident budget and the buffer;
 * hr_stream_split_resident turns the budget into heads and tails. */
typedef struct {
    uint64_t off, len;               /* the window, as hr_stream_window_range gives it */
    uint64_t keep_len;               /* [off, off + keep_len) stays resident */
    uint64_t stream_off, stream_len; /* whole pages streamed every round; 0 = none */
    int layer_begin, n_layers;       /* its layers (hr_stream_pump follows them); the split
                                        functions leave them as they are */
} hr_stream_part;

/* Splits the n windows so that their resident heads total at most
 * `resident` bytes (the resident part of sched.h's hr_sched_stream_split,
 * which also sizes the buffer the tails go through, see hr_stream_pump):
 * the smallest tail length s with sum_i (len_i - min(len_i, s)) <=
 * resident, each window streaming min(len_i, s) bytes. The tail is trimmed
 * to whole pages inside the window with its start rounded down (the heads
 * never exceed the budget) and its end rounded down (a page shared with
 * the next window is never dropped). resident >= the windows' total: none
 * streams; resident <= 0: every window streams from its first page.
 * Returns 0, HR_EINVAL for NULL parts or n < 1. Reentrant. */
int hr_stream_split_resident(hr_stream_part *parts, int n, double resident);

/* Drops [off, off + len) from this mapping after use: MADV_COLD (where the
 * headers have it: the pages become the first to reclaim) and then
 * MADV_DONTNEED (unmapped here; they fault back in from the page cache or
 * the file). Same returns as hr_stream_prefetch. */
int hr_stream_evict(const hr_gguf *g, uint64_t off, uint64_t len);

/* Reads [off, off + len) in now: MADV_WILLNEED, then one byte of every page
 * is touched, so the call returns when the range is resident and mapped.
 * Blocks for the disk: for a thread off the critical path. Same returns. */
int hr_stream_fetch(const hr_gguf *g, uint64_t off, uint64_t len);

/* hr_stream_fetch for a range that stays resident. On a mapping advised
 * huge (hr_stream_huge), without MADV_WILLNEED: its read-ahead fills the
 * page cache in small folios, where the faults alone read 2 MiB folios
 * that one page-table entry maps. Same returns. */
int hr_stream_keep(const hr_gguf *g, uint64_t off, uint64_t len);

/* True when g's mapping was advised MADV_HUGEPAGE at open (the default;
 * HEARTH_NO_HUGEPAGE set turns it off; mmap/gguf.c says why). */
bool hr_stream_huge(const hr_gguf *g);

/* mlock / munlock of [off, off + len) of the mapping (whole pages). 0,
 * HR_EINVAL as hr_stream_prefetch, HR_EDENIED when the kernel refuses
 * (no CAP_IPC_LOCK and RLIMIT_MEMLOCK too small, or no memory). */
int hr_stream_lock(const hr_gguf *g, uint64_t off, uint64_t len);
int hr_stream_unlock(const hr_gguf *g, uint64_t off, uint64_t len);

/* Bytes of the n ranges off[i], len[i] that are mapped in this process
 * now (present in its page table, /proc/self/pagemap), whole pages, ranges
 * clamped to the file. Unlike hr_stream_residency this does not count
 * pages that are only in the page cache, which mincore reports to a
 * process that owns the file or runs as root. -1 on NULL arguments, a
 * hr_gguf opened with hr_gguf_open_memory, or when pagemap is unreadable. */
int64_t hr_stream_mapped(const hr_gguf *g, const uint64_t *off, const uint64_t *len, int n);

/* Bytes this process has caused to be read from storage so far
 * (read_bytes of /proc/self/io, all threads); -1 when unknown. */
int64_t hr_stream_io_read_bytes(void);
/* The same for the calling thread alone (/proc/thread-self/io). */
int64_t hr_stream_thread_io_read_bytes(void);

/* ---- the pump: one device's streamed parts, read ahead and dropped ----
 *
 * A thread that keeps the windows of a split (hr_stream_split_resident)
 * where the pinned streaming scheme (sched/sched.h hr_sched_stream_split)
 * says they are: the resident heads pinned (mlock where the kernel allows
 * it, else read in once and never dropped) and at most `buffer` bytes of
 * streamed pages mapped at once. After window r is done the rest of r's
 * tail is dropped (MADV_COLD + MADV_DONTNEED) and window r+1's tail is read
 * from its start up to `buffer` bytes (WILLNEED, then touched), while the
 * rest of the ring computes. When the tail is larger than the buffer the
 * computing thread posts each finished layer (hr_stream_pump_layer_done):
 * the pump drops the streamed bytes of the layers done and reads on, never
 * beyond the start of the layer being computed + buffer. A window whose
 * tail fits the buffer is read whole and dropped after it is done. If
 * windows are computed out of turn the pump follows the one computing.
 *
 * The computing thread only takes a mutex and signals a condition
 * variable (no madvise, no allocation, no disk); everything slow is on
 * the pump's thread.
 *
 * Thread-safety: create / destroy / plan from one controlling thread;
 * layer_done / window_done from the computing thread (any one thread at a
 * time); stats and wait from any thread. */
#define HR_STREAM_MAX_WINDOWS 64

typedef struct hr_stream_pump hr_stream_pump;

enum {
    HR_STREAM_PREFETCH = 1u << 0, /* read tails ahead (else only drop what was used) */
    HR_STREAM_LOCK = 1u << 1,     /* mlock the resident heads (else read them in once) */
    HR_STREAM_DROP = 1u << 2,     /* drop tails after use (else nothing is ever dropped) */
};

typedef struct {
    uint64_t plans_warm; /* plans whose resident part is in (the warm-up is over) */
    int locked;          /* 1 every head mlock'ed, 0 some kept by advice, -1 not known */
    uint64_t buffer;     /* the current plan's buffer, bytes (whole pages) */
    uint64_t fetched;    /* bytes of tails read ahead, all plans */
    uint64_t evicted;    /* bytes of tails dropped, all plans */
    uint64_t max_span;   /* most streamed bytes the pump held mapped at once (its own
                            reads, since the last plan) */
    /* the disk as the pump gets it: bytes its own reads of tails took from
     * storage (/proc/thread-self/io), and the wall time of the reads that
     * took any (CPU waits under a quota and other readers of the disk
     * included), all plans */
    uint64_t disk_bytes;
    double disk_s;
} hr_stream_pump_stats;

/* Starts the pump thread for the mapping of g (borrowed; it must outlive
 * the pump). 0, HR_EINVAL, HR_ENOMEM with err. */
int hr_stream_pump_create(hr_stream_pump **out, const hr_gguf *g, char err[HR_ERR_LEN]);
/* Stops the thread, unlocks what it locked. NULL is a no-op. */
void hr_stream_pump_destroy(hr_stream_pump *p);
/* Hands over a new split: n windows parts[] (hr_stream_split_resident
 * output, with layer_begin / n_layers set; n_layers 0 = the window is
 * followed only as a whole), buffer bytes of the sliding buffer (rounded
 * down to whole pages, at least one) and HR_STREAM_* flags. The pump
 * unlocks the previous heads, pins the new ones and reads the first tail.
 * n == 0 stops all streaming. Allocates the layer table here, never per
 * token. Returns 0, HR_EINVAL (n out of [0, HR_STREAM_MAX_WINDOWS], NULL
 * parts) or HR_ENOMEM. */
int hr_stream_pump_plan(hr_stream_pump *p, const hr_stream_part *parts, int n, uint64_t buffer,
                        unsigned flags);
/* Layer `layer` (a model layer index) was computed. Cheap: for the
 * computing thread after each layer. Layers of no window are ignored. */
void hr_stream_pump_layer_done(hr_stream_pump *p, int layer);
/* Window `window` (0-based index into the plan's parts) was computed: drop
 * its tail, read the next window's. */
void hr_stream_pump_window_done(hr_stream_pump *p, int window);
/* Waits until the pump has handled every event posted so far and has
 * nothing left to read or drop: 0, or HR_ETIMEDOUT after timeout_ms. */
int hr_stream_pump_wait(hr_stream_pump *p, int timeout_ms);
void hr_stream_pump_get_stats(hr_stream_pump *p, hr_stream_pump_stats *out);

#endif
