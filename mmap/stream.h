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

#include <stdint.h>

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
 * [stream_off, stream_off + stream_len) from disk every round: the tail of
 * window r is read ahead while the rest of the ring computes and dropped
 * once window r is done, so at any time the resident parts plus one tail
 * are in memory. hr_stream_split picks the smallest tail length s (each
 * window streams min(len, s)) with
 *
 *     sum_i (len_i - min(len_i, s)) + min(s, max_i len_i) <= room
 *
 * which for n equal windows of T / n bytes is s = (T - room) / (n - 1):
 * the scheduler's pinned-reclaim rule (sched/sched.h). The tail is then
 * trimmed to whole pages inside the window (its start rounded up, its end
 * rounded down), so the streamed bytes are exactly what madvise acts on
 * and a page shared with a neighbouring window is never dropped. */
typedef struct {
    uint64_t off, len;               /* the window, as hr_stream_window_range gives it */
    uint64_t keep_len;               /* [off, off + keep_len) stays resident */
    uint64_t stream_off, stream_len; /* whole pages streamed every round; 0 = none */
} hr_stream_part;

/* Splits the n windows parts[i].off / .len (the caller sets them) under
 * room bytes for weights: fills keep_len, stream_off and stream_len and
 * returns 0. Everything stays (stream_len 0) when the windows fit. When
 * they cannot be split (n == 1 or room below the largest window) every
 * window streams whole (keep_len 0, its whole pages streamed) and the
 * return is HR_ERANGE. HR_EINVAL for NULL parts or n < 1. Reentrant. */
int hr_stream_split(hr_stream_part *parts, int n, double room);

/* Drops [off, off + len) from this mapping after use: MADV_COLD (where the
 * headers have it: the pages become the first to reclaim) and then
 * MADV_DONTNEED (unmapped here; they fault back in from the page cache or
 * the file). Same returns as hr_stream_prefetch. */
int hr_stream_evict(const hr_gguf *g, uint64_t off, uint64_t len);

/* Reads [off, off + len) in now: MADV_WILLNEED, then one byte of every page
 * is touched, so the call returns when the range is resident and mapped.
 * Blocks for the disk: for a thread off the critical path. Same returns. */
int hr_stream_fetch(const hr_gguf *g, uint64_t off, uint64_t len);

/* mlock / munlock of [off, off + len) of the mapping (whole pages). 0,
 * HR_EINVAL as hr_stream_prefetch, HR_EDENIED when the kernel refuses
 * (no CAP_IPC_LOCK and RLIMIT_MEMLOCK too small, or no memory). */
int hr_stream_lock(const hr_gguf *g, uint64_t off, uint64_t len);
int hr_stream_unlock(const hr_gguf *g, uint64_t off, uint64_t len);

/* Bytes this process has caused to be read from storage so far
 * (read_bytes of /proc/self/io, all threads); -1 when unknown. */
int64_t hr_stream_io_read_bytes(void);

#endif
