/* api_core.c -- public functions that need no handle. */
#include "powerinfer.h"
#include "runtime/types.h"

#define PI_STR2(x) #x
#define PI_STR(x) PI_STR2(x)

unsigned pi_version(void) {
    return PI_VERSION_NUMBER;
}

const char *pi_version_string(void) {
    return PI_STR(PI_VERSION_MAJOR) "." PI_STR(PI_VERSION_MINOR) "." PI_STR(PI_VERSION_PATCH);
}

unsigned pi_abi_version(void) {
    return PI_ABI_VERSION;
}

const char *pi_status_str(int status) {
    switch (status) {
    case PI_OK:
        return "success";
    case PI_ERR_INVALID_ARG:
        return "invalid argument";
    case PI_ERR_NOMEM:
        return "out of memory";
    case PI_ERR_IO:
        return "input/output error";
    case PI_ERR_FORMAT:
        return "malformed file";
    case PI_ERR_UNSUPPORTED:
        return "not supported";
    case PI_ERR_ABORTED:
        return "aborted";
    case PI_ERR_NOT_FOUND:
        return "not found";
    case PI_ERR_TYPE:
        return "wrong type";
    case PI_ERR_RANGE:
        return "out of range";
    case PI_ERR_INTERNAL:
        return "internal error";
    case PI_ERR_NUMERIC:
        return "non-finite result (NaN or infinity)";
    default:
        return "unknown status";
    }
}

const char *pi_type_name(int type) {
    if (type < 0)
        return NULL;
    const struct pi_type_traits *t = pi_type_traits((uint32_t)type);
    return t ? t->name : NULL;
}
