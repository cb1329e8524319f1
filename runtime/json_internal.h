/* A small JSON reader for the safetensors header: objects, arrays,
 * strings (with all escapes, \uXXXX included), numbers, true/false/null.
 * Enough for headers written by any safetensors implementation. */
#ifndef NETRT_JSON_INTERNAL_H
#define NETRT_JSON_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum JsonKind { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonKind;

typedef struct Json {
	JsonKind kind;
	char *key;              /* member name when inside an object, else NULL */
	char *str;              /* JSON_STRING: the decoded UTF-8 value */
	size_t len;             /* JSON_STRING: bytes in str (it may hold NULs) */
	bool boolean;           /* JSON_BOOL */
	double num;             /* JSON_NUMBER */
	bool is_int;            /* JSON_NUMBER without fraction/exponent that fits int64 */
	int64_t i;              /* JSON_NUMBER when is_int */
	struct Json *kids;      /* JSON_ARRAY, JSON_OBJECT: n elements/members */
	size_t n;
} Json;

/* Parses text[0, len) (need not be NUL-terminated). NULL with a message
 * in err on malformed input; free the result with json_free. */
Json *json_parse(const char *text, size_t len, char *err, size_t errlen);
/* The same, keeping of the root object only the members named in
 * keys[0, nkeys) (the others are checked, not stored), and refusing (NULL,
 * with a message) a tree that would hold more than `budget` bytes. */
Json *json_parse_keys(const char *text, size_t len, const char *const *keys, size_t nkeys,
                      size_t budget, char *err, size_t errlen);
void json_free(Json *j);
/* The member `key` of an object, or NULL. */
const Json *json_get(const Json *obj, const char *key);
#endif
