/* error.h -- status recording and the early-return macros.
 *
 * A pi_error holds the message of the last failure of one handle (or of one call
 * that has no handle yet). Functions that fail record why with pi_error_set and
 * return the negative status; callers propagate it with PI_TRY. These two macros and
 * PI_CHECK_ARG are the only control-flow macros of the library. */
#ifndef PI_UTIL_ERROR_H
#define PI_UTIL_ERROR_H

#include "powerinfer.h"

#define PI_ERRMSG_CAP 512

struct pi_error {
    int status;
    char msg[PI_ERRMSG_CAP];
};

#if defined(__MINGW32__)
/* MinGW: the C99 printf of __USE_MINGW_ANSI_STDIO (meson.build), not msvcrt's */
#  define PI_PRINTF(f, a) __attribute__((format(gnu_printf, f, a)))
#elif defined(__GNUC__)
#  define PI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#  define PI_PRINTF(f, a)
#endif

/* Record `status` and a formatted reason in err (which may be NULL); returns status. */
int pi_error_set(struct pi_error *err, int status, const char *fmt, ...) PI_PRINTF(3, 4);
/* Prefix the recorded message with a formatted context ("tensor x: ..."). */
void pi_error_prefix(struct pi_error *err, const char *fmt, ...) PI_PRINTF(2, 3);
void pi_error_clear(struct pi_error *err);

/* Return the status of `expr` from the enclosing function if it is negative. */
#define PI_TRY(expr)                                                                    \
    do {                                                                                \
        int pi_try_status_ = (expr);                                                    \
        if (pi_try_status_ < 0)                                                         \
            return pi_try_status_;                                                      \
    } while (0)

/* Record and return `status` with a reason. */
#define PI_FAIL(err, status, ...) return pi_error_set((err), (status), __VA_ARGS__)

#endif
