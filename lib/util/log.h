/* log.h -- diagnostics to the caller's callback; silence without one. */
#ifndef PI_UTIL_LOG_H
#define PI_UTIL_LOG_H

#include "powerinfer.h"
#include "util/error.h"

struct pi_logger {
    pi_log_fn fn; /* NULL: silence */
    void *user;
    int level;    /* least severe level passed on */
};

void pi_log(const struct pi_logger *lg, int level, const char *fmt, ...) PI_PRINTF(3, 4);

#endif
