/* json.h -- JSON (RFC 8259) into template values, and template values as JSON the way
 * Python's json.dumps writes them (transformers' |tojson is json.dumps with
 * ensure_ascii=False). */
#ifndef PI_CHAT_JSON_H
#define PI_CHAT_JSON_H

#include "chat/value.h"

/* Deepest nesting of arrays and objects accepted. */
#define JSON_MAX_DEPTH 128

/* Parse the n bytes at s (one JSON value, whitespace around it) into *out, with every
 * string and container in the arena. Objects keep their members' order (a repeated
 * name keeps its first place and its last value, as Python's dict). Numbers without a
 * fraction or exponent are ints (PI_ERR_RANGE outside int64), others floats.
 * PI_ERR_INVALID_ARG with "offset N: ..." in err for malformed JSON, invalid UTF-8, a
 * lone surrogate escape, nesting past JSON_MAX_DEPTH; PI_ERR_NOMEM / PI_ERR_RANGE from
 * the arena. */
int json_parse(struct jarena *a, const char *s, size_t n, jv *out, struct pi_error *err);

struct json_opts {
    int ensure_ascii;     /* non-ASCII as \uXXXX (surrogate pairs past U+FFFF) */
    int pretty;           /* an indent was given: one member a line */
    int indent;           /* spaces per level (indent_str overrides) */
    jv indent_str;        /* a string indent, or JV_UNDEF */
    jv item_sep, key_sep; /* JV_UNDEF: json.dumps's defaults for the indent */
    int sort_keys;
};

void json_opts_default(struct json_opts *o);

/* Append v as JSON. Tuples are arrays, namespaces and loops are not serialisable
 * (PI_ERR_TYPE "Object of type Namespace is not JSON serializable", as Python),
 * undefined neither; non-string keys become strings as json.dumps does (ints, floats,
 * true/false/null); NaN and infinities as NaN, Infinity, -Infinity. */
int json_dump(struct jbuf *b, jv v, const struct json_opts *o, struct pi_error *err);

#endif
