/* jsonmode.c -- a byte-at-a-time recogniser of JSON text prefixes (RFC 8259), for
 * response_format json_object: a token may be sampled only when the text so far plus
 * its bytes is still the beginning of some JSON object.
 *
 * A pushdown automaton: `mode` is where we are inside the current value, the stack holds
 * the open containers. Strings take any byte >= 0x20 but '"' and '\\' (UTF-8 is the
 * model's business: byte-level tokens may split a character), with \uXXXX and the
 * other escapes checked. Whitespace between tokens is limited to JM_MAX_SPACE bytes in a
 * row, so a model cannot pad forever. No mutable globals; the state is a plain struct
 * that can be copied to try a token. */
#include "server.h"

enum {
    M_VALUE,      /* a value must start (after optional space) */
    M_OBJ_FIRST,  /* after '{': a key or '}' */
    M_OBJ_KEY,    /* after ',' in an object: a key */
    M_COLON,      /* after a key */
    M_AFTER,      /* after a value inside a container: ',' or the closer */
    M_STRING,     /* inside a string */
    M_ESCAPE,     /* after '\\' */
    M_UNICODE,    /* inside \uXXXX: `count` hex digits left */
    M_NUMBER,     /* inside a number: `num` is the sub-state */
    M_LITERAL,    /* inside true/false/null: `lit` and `count` */
    M_DONE        /* the top-level value is complete */
};

enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

void jm_init(struct jm_state *s) {
    s->mode = M_VALUE;
    s->depth = 0;
    s->space = 0;
    s->is_key = 0;
    s->top = 1;
}

int jm_done(const struct jm_state *s) {
    return s->mode == M_DONE;
}

static int is_space(unsigned c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_hex(unsigned c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A value just ended: back into the container, or done. */
static void value_end(struct jm_state *s) {
    s->mode = s->depth ? M_AFTER : M_DONE;
}

static int push(struct jm_state *s, unsigned char kind) {
    if (s->depth >= JM_MAX_DEPTH)
        return 0;
    s->stack[s->depth++] = kind;
    s->mode = kind == '{' ? M_OBJ_FIRST : M_VALUE;
    s->first_in_array = kind == '[';
    return 1;
}

static int pop(struct jm_state *s, unsigned char kind) {
    if (!s->depth || s->stack[s->depth - 1] != kind)
        return 0;
    s->depth--;
    value_end(s);
    return 1;
}

/* A value starts with c (mode M_VALUE). */
static int value_start(struct jm_state *s, unsigned c) {
    if (s->top && c != '{')
        return 0; /* json_object: the text is one object */
    s->top = 0;
    switch (c) {
    case '{':
        return push(s, '{');
    case '[':
        return push(s, '[');
    case '"':
        s->mode = M_STRING;
        s->is_key = 0;
        return 1;
    case 't':
    case 'f':
    case 'n':
        s->mode = M_LITERAL;
        s->lit = (unsigned char)c;
        s->count = 1;
        return 1;
    case '-':
        s->mode = M_NUMBER;
        s->num = N_SIGN;
        return 1;
    default:
        if (c >= '0' && c <= '9') {
            s->mode = M_NUMBER;
            s->num = c == '0' ? N_ZERO : N_INT;
            return 1;
        }
        return 0;
    }
}

/* The byte that follows a number (which it ends, when the number may end there). */
static int number_step(struct jm_state *s, unsigned c) {
    const int digit = c >= '0' && c <= '9';
    switch (s->num) {
    case N_SIGN:
        if (!digit)
            return 0;
        s->num = c == '0' ? N_ZERO : N_INT;
        return 1;
    case N_ZERO:
    case N_INT:
        if (digit && s->num == N_INT)
            return 1;
        if (c == '.') {
            s->num = N_DOT;
            return 1;
        }
        if (c == 'e' || c == 'E') {
            s->num = N_E;
            return 1;
        }
        break; /* the number ends */
    case N_DOT:
        if (!digit)
            return 0;
        s->num = N_FRAC;
        return 1;
    case N_FRAC:
        if (digit)
            return 1;
        if (c == 'e' || c == 'E') {
            s->num = N_E;
            return 1;
        }
        break;
    case N_E:
        if (c == '+' || c == '-') {
            s->num = N_ESIGN;
            return 1;
        }
        if (!digit)
            return 0;
        s->num = N_EXP;
        return 1;
    case N_ESIGN:
        if (!digit)
            return 0;
        s->num = N_EXP;
        return 1;
    case N_EXP:
        if (digit)
            return 1;
        break;
    }
    /* ended by c: c is read in the container's state (a number is never the top) */
    value_end(s);
    const char b = (char)c;
    return jm_feed(s, &b, 1);
}

static const char *literal_text(unsigned char lit) {
    return lit == 't' ? "true" : lit == 'f' ? "false" : "null";
}

int jm_feed(struct jm_state *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned c = (unsigned char)bytes[i];
        switch (s->mode) {
        case M_STRING:
            if (c == '"') {
                if (s->is_key)
                    s->mode = M_COLON;
                else
                    value_end(s);
            } else if (c == '\\') {
                s->mode = M_ESCAPE;
            } else if (c < 0x20) {
                return 0;
            }
            continue;
        case M_ESCAPE:
            if (c == 'u') {
                s->mode = M_UNICODE;
                s->count = 4;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                       c == 'r' || c == 't') {
                s->mode = M_STRING;
            } else {
                return 0;
            }
            continue;
        case M_UNICODE:
            if (!is_hex(c))
                return 0;
            if (--s->count == 0)
                s->mode = M_STRING;
            continue;
        case M_LITERAL: {
            const char *t = literal_text(s->lit);
            if (c != (unsigned char)t[s->count])
                return 0;
            if (t[++s->count] == '\0')
                value_end(s);
            continue;
        }
        case M_NUMBER:
            if (!number_step(s, c))
                return 0;
            continue;
        default:
            break;
        }
        /* between tokens: whitespace, limited */
        if (is_space(c)) {
            if (++s->space > JM_MAX_SPACE)
                return 0;
            continue;
        }
        s->space = 0;
        switch (s->mode) {
        case M_VALUE:
            if (c == ']' && s->first_in_array) {
                s->first_in_array = 0;
                if (!pop(s, '['))
                    return 0;
                continue;
            }
            s->first_in_array = 0;
            if (!value_start(s, c))
                return 0;
            continue;
        case M_OBJ_FIRST:
        case M_OBJ_KEY:
            if (c == '}' && s->mode == M_OBJ_FIRST) {
                if (!pop(s, '{'))
                    return 0;
                continue;
            }
            if (c != '"')
                return 0;
            s->mode = M_STRING;
            s->is_key = 1;
            continue;
        case M_COLON:
            if (c != ':')
                return 0;
            s->mode = M_VALUE;
            s->first_in_array = 0;
            continue;
        case M_AFTER:
            if (c == ',') {
                s->mode = s->stack[s->depth - 1] == '{' ? M_OBJ_KEY : M_VALUE;
                s->first_in_array = 0;
                continue;
            }
            if (c == '}' || c == ']') {
                if (!pop(s, c == '}' ? '{' : '['))
                    return 0;
                continue;
            }
            return 0;
        default: /* M_DONE: only whitespace may follow */
            return 0;
        }
    }
    return 1;
}
