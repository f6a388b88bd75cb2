/* jsonschema.h -- JSON Schema -> GBNF, for pi_grammar_create (pi-server's
 * response_format json_schema, pi-run --json-schema). Uses cJSON.
 *
 * Supported: type (a name or an array of names: "string", "number", "integer",
 * "boolean", "null", "object", "array": ["string", "null"] is a nullable string;
 * OpenAPI's `nullable` is not JSON Schema, so it is refused); object properties
 * (members in the schema's order, as OpenAI's strict mode emits them; a required member
 * must be there, an optional one may be left out), required, additionalProperties (false;
 * true or a schema: more members after the listed ones; when absent, an object with
 * properties takes only those, an object without any takes any members); array items,
 * prefixItems (then `items`), minItems / maxItems (up to 1000); enum and
 * const (any JSON values, written compactly); anyOf / oneOf (oneOf's "exactly one" is
 * not enforced: the alternatives of a well-formed oneOf exclude each other anyway);
 * allOf of object schemas (their properties and required merged); $ref to "#",
 * "#/$defs/NAME" and "#/definitions/NAME" (recursive schemas allowed); string minLength /
 * maxLength (up to 1000 characters) and format "date", "time", "date-time", "uuid".
 * Annotations are ignored: title, description, examples, default, $schema, $id,
 * $comment, strict, deprecated, readOnly, writeOnly. Any other keyword (pattern,
 * minimum, multipleOf, ...) is refused with an error naming it, rather than ignored.
 *
 * The text is bounded so a model cannot pad it forever: at most JS_MAX_SPACE whitespace
 * bytes between tokens and before the value, none after it (so once the value is whole,
 * only the end of generation can come), integers of at most 16 digits, fractions of at most 16
 * digits, exponents of at most 3; "integer" is written without a fraction or exponent. */
#ifndef PI_TOOLS_JSONSCHEMA_H
#define PI_TOOLS_JSONSCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define JS_MAX_SPACE 64 /* as pi-server's json_object mode (JM_MAX_SPACE) */
#define JS_MAX_DEPTH 64 /* schema nesting */

/* The GBNF for `schema` (borrowed for the call), start rule "root": a malloc'd string
 * the caller frees, or NULL with a message in err (err_cap bytes, always terminated):
 * "keyword 'pattern' is not supported (at #/properties/id)", "$ref '...' ...". */
char *json_schema_to_gbnf(const cJSON *schema, char *err, size_t err_cap);

#endif
