/* os.h -- the operating-system layer. Every OS-specific call of the library sits
 * behind these functions: a POSIX implementation (os_posix.c) now, room for a
 * Windows one. */
#ifndef PI_UTIL_OS_H
#define PI_UTIL_OS_H

#include <stdint.h>

#include "util/error.h"

/* A read-only mapping of a whole file. */
struct pi_file_map {
    const uint8_t *data; /* NULL for an empty file */
    uint64_t size;
};

/* Map `path` read-only. PI_ERR_IO with the OS reason on failure. */
int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err);
void pi_os_unmap_file(struct pi_file_map *map);

#endif
