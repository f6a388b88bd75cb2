/* POSIX implementation of os.h. */
#define _POSIX_C_SOURCE 200809L
#include "util/os.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err) {
    map->data = NULL;
    map->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return PI_OK;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "'%s' is too large to map on this system", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        PI_FAIL(err, PI_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    map->data = p;
    map->size = (uint64_t)st.st_size;
    return PI_OK;
}

void pi_os_unmap_file(struct pi_file_map *map) {
    if (map->data)
        munmap((void *)map->data, (size_t)map->size);
    map->data = NULL;
    map->size = 0;
}
