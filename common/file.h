/* file.h - small file helpers shared by the CLI and the profiler.
 * Reentrant. */
#ifndef HR_COMMON_FILE_H
#define HR_COMMON_FILE_H

#include <stddef.h>

/* Reads a whole regular file or stream (stdin via "-" is not special) of at
 * most max_bytes into a malloc'ed, NUL-terminated buffer; *len gets its
 * length. Returns NULL (errno set) when the file cannot be read or is
 * larger than max_bytes. */
char *hr_file_read(const char *path, size_t max_bytes, size_t *len);

#endif
