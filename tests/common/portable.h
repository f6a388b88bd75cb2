/* portable.h -- the few POSIX calls the tests make that Windows (MinGW) lacks or spells
 * differently: mkdir with a mode, mkdtemp. Include it after the system headers. On
 * POSIX systems it adds nothing. */
#ifndef PI_TEST_PORTABLE_H
#define PI_TEST_PORTABLE_H

#ifdef _WIN32
#  include <direct.h>
#  include <errno.h>
#  include <io.h>
#  include <process.h>
#  include <stdio.h>
#  include <string.h>
#  include <time.h>

/* mkdir(path, mode): the mode has no meaning for Windows' ACLs */
static inline int pi_test_mkdir(const char *path, int mode) {
    (void)mode;
    return _mkdir(path);
}
#  undef mkdir
#  define mkdir(path, mode) pi_test_mkdir((path), (mode))

/* mkdtemp: the trailing XXXXXX replaced until _mkdir creates a new directory */
static inline char *pi_test_mkdtemp(char *tmpl) {
    size_t n = strlen(tmpl);
    if (n < 6 || strcmp(tmpl + n - 6, "XXXXXX") != 0) {
        errno = EINVAL;
        return NULL;
    }
    static unsigned counter;
    unsigned seed = (unsigned)_getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int attempt = 0; attempt < 1000; attempt++) {
        unsigned v = seed + ++counter * 40503u;
        for (int i = 0; i < 6; i++) {
            tmpl[n - 6 + i] = "abcdefghijklmnopqrstuvwxyz0123456789"[v % 36];
            v /= 36;
        }
        if (_mkdir(tmpl) == 0)
            return tmpl;
        if (errno != EEXIST)
            return NULL;
    }
    return NULL;
}
#  define mkdtemp(t) pi_test_mkdtemp(t)
#endif

#endif
