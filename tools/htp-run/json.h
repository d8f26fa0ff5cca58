/*===- tools/htp-run/json.h - A small strict JSON reader ---------------===*
 *
 * Just enough JSON (RFC 8259) to read a safetensors header: a cursor over a
 * byte range, pulled token by token by the caller, with strict checks (no
 * trailing commas, no control characters in strings, bounded nesting).
 * Every function returns 0 on success, or non-zero with a message in the
 * reader's error buffer that says what was expected and at which byte.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_JSON_H
#define HTP_RUN_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct htp_json {
  const char *begin, *cursor, *end;
  char *err;
  size_t err_size;
} htp_json;

void htp_json_init(htp_json *json, const char *text, size_t length, char *err, size_t err_size);
/* The next non-blank byte without consuming it, or -1 at the end. */
int htp_json_peek(htp_json *json);
/* Consumes the next non-blank byte, which must be `c`. */
int htp_json_expect(htp_json *json, char c);
/* Reads a string; *out is malloc'ed, NUL-terminated UTF-8 (the caller frees
 * it). Strings holding a NUL (\u0000) are rejected. */
int htp_json_string(htp_json *json, char **out);
/* Reads a non-negative integer that fits in 63 bits. */
int htp_json_uint(htp_json *json, uint64_t *out);
/* Skips (and validates) any value. */
int htp_json_skip_value(htp_json *json);
/* Checks that only blanks remain. */
int htp_json_finish(htp_json *json);
/* Byte offset of the cursor, for messages. */
size_t htp_json_offset(const htp_json *json);

#endif /* HTP_RUN_JSON_H */
