#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pi_error_set(struct pi_error *err, int status, const char *fmt, ...) {
    if (!err)
        return status;
    err->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

void pi_error_prefix(struct pi_error *err, const char *fmt, ...) {
    if (!err)
        return;
    char head[PI_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(head, sizeof head - 2, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t hl = strlen(head);
    memcpy(head + hl, ": ", 3);
    hl += 2;
    /* Shift the old message right by hl bytes, dropping what no longer fits. */
    size_t ol = strlen(err->msg);
    if (hl + ol > sizeof err->msg - 1)
        ol = sizeof err->msg - 1 - hl;
    memmove(err->msg + hl, err->msg, ol);
    memcpy(err->msg, head, hl);
    err->msg[hl + ol] = '\0';
}

void pi_error_clear(struct pi_error *err) {
    if (!err)
        return;
    err->status = PI_OK;
    err->msg[0] = '\0';
}
