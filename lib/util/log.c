#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

void pi_log(const struct pi_logger *lg, int level, const char *fmt, ...) {
    if (!lg || !lg->fn || level < lg->level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    lg->fn(lg->user, level, line);
}
