/* hash.h -- FNV-1a (64-bit): the identities of models and statistics (hybrid.c) and the
 * checksum of context states (api_state.c). Not cryptographic: it detects accidents
 * (a stale plan file, a flipped byte), not tampering. */
#ifndef PI_UTIL_HASH_H
#define PI_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define PI_FNV1A_INIT 0xcbf29ce484222325ull

/* h continued over p[0..n); start with PI_FNV1A_INIT. */
static inline uint64_t pi_fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
