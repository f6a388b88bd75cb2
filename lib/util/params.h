/* params.h -- the struct_size rule of every public params struct (ABI.md): the
 * library reads only the fields the caller's struct_size covers, refuses sizes below
 * the first published one, and refuses set fields it does not know. */
#ifndef PI_UTIL_PARAMS_H
#define PI_UTIL_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/error.h"

/* `out` holds the defaults (out_size bytes, struct_size first). Copy the caller's
 * struct `in` (NULL: keep the defaults) over it. */
static inline int pi_params_take(const void *in, void *out, size_t out_size, size_t min_size,
                                 const char *name, struct pi_error *err) {
    if (!in)
        return PI_OK;
    uint32_t size;
    memcpy(&size, in, sizeof size);
    if (size < min_size)
        PI_FAIL(err, PI_ERR_INVALID_ARG, "%s.struct_size %u is smaller than %u; fill the "
                "params with the matching _default_params function", name, size,
                (unsigned)min_size);
    const unsigned char *bytes = in;
    for (size_t i = out_size; i < size; i++)
        if (bytes[i])
            PI_FAIL(err, PI_ERR_UNSUPPORTED, "%s has set fields that this library version "
                    "does not know", name);
    memcpy((unsigned char *)out + sizeof size, bytes + sizeof size,
           (size < out_size ? size : out_size) - sizeof size);
    return PI_OK;
}

#endif
