/*===- tools/htp-run/json.c - A small strict JSON reader ---------------===*
 *
 * This file implements the pull reader of json.h. It never reads past
 * `end`, never recurses deeper than HTP_JSON_MAX_DEPTH, and decodes \u
 * escapes (surrogate pairs included) to UTF-8.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/json.h"

#include "tools/htp-run/errors.h"

#include <stdlib.h>
#include <string.h>

enum { HTP_JSON_MAX_DEPTH = 64 };

void htp_json_init(htp_json *json, const char *text, size_t length, char *err, size_t err_size) {
  json->begin = json->cursor = text;
  json->end = text + length;
  json->err = err;
  json->err_size = err_size;
}

size_t htp_json_offset(const htp_json *json) { return (size_t)(json->cursor - json->begin); }

static int fail(htp_json *json, const char *what) {
  if (json->cursor >= json->end)
    return htp_set_error(json->err, json->err_size, "bad JSON: %s, found the end of the text",
                         what);
  unsigned char c = (unsigned char)*json->cursor;
  if (c >= 0x20 && c < 0x7f)
    return htp_set_error(json->err, json->err_size, "bad JSON at byte %zu: %s, found '%c'",
                         htp_json_offset(json), what, c);
  return htp_set_error(json->err, json->err_size, "bad JSON at byte %zu: %s, found byte 0x%02x",
                       htp_json_offset(json), what, c);
}

static void skip_blanks(htp_json *json) {
  while (json->cursor < json->end && (*json->cursor == ' ' || *json->cursor == '\t' ||
                                      *json->cursor == '\n' || *json->cursor == '\r'))
    json->cursor++;
}

int htp_json_peek(htp_json *json) {
  skip_blanks(json);
  return json->cursor < json->end ? (unsigned char)*json->cursor : -1;
}

int htp_json_expect(htp_json *json, char c) {
  char what[32];
  if (htp_json_peek(json) != (unsigned char)c) {
    snprintf(what, sizeof what, "expected '%c'", c);
    return fail(json, what);
  }
  json->cursor++;
  return 0;
}

static int hex4(htp_json *json, unsigned *out) {
  unsigned value = 0;
  for (int i = 0; i < 4; i++) {
    if (json->cursor >= json->end)
      return fail(json, "expected 4 hex digits after \\u");
    char c = *json->cursor;
    unsigned digit;
    if (c >= '0' && c <= '9')
      digit = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      digit = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      digit = (unsigned)(c - 'A' + 10);
    else
      return fail(json, "expected 4 hex digits after \\u");
    value = value * 16 + digit;
    json->cursor++;
  }
  *out = value;
  return 0;
}

static size_t put_utf8(char *out, unsigned code) {
  if (code < 0x80) {
    out[0] = (char)code;
    return 1;
  }
  if (code < 0x800) {
    out[0] = (char)(0xc0 | (code >> 6));
    out[1] = (char)(0x80 | (code & 0x3f));
    return 2;
  }
  if (code < 0x10000) {
    out[0] = (char)(0xe0 | (code >> 12));
    out[1] = (char)(0x80 | ((code >> 6) & 0x3f));
    out[2] = (char)(0x80 | (code & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (code >> 18));
  out[1] = (char)(0x80 | ((code >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((code >> 6) & 0x3f));
  out[3] = (char)(0x80 | (code & 0x3f));
  return 4;
}

/* Reads a string; when out is NULL only validates it. */
static int read_string(htp_json *json, char **out) {
  if (htp_json_expect(json, '"'))
    return 1;
  /* Decoded text is never longer than the encoded text. */
  const char *start = json->cursor;
  char *text = NULL;
  size_t length = 0;
  if (out) {
    const char *close = start;
    while (close < json->end && *close != '"')
      close += (*close == '\\' && close + 1 < json->end) ? 2 : 1;
    text = malloc((size_t)(close - start) + 1);
    if (!text)
      return htp_set_error(json->err, json->err_size, "out of memory reading JSON");
  }
  for (;;) {
    if (json->cursor >= json->end) {
      free(text);
      return fail(json, "unterminated string");
    }
    unsigned char c = (unsigned char)*json->cursor;
    if (c == '"') {
      json->cursor++;
      break;
    }
    if (c < 0x20) {
      free(text);
      return fail(json, "control character in a string");
    }
    if (c != '\\') {
      if (text)
        text[length++] = (char)c;
      json->cursor++;
      continue;
    }
    json->cursor++;
    if (json->cursor >= json->end) {
      free(text);
      return fail(json, "unterminated escape");
    }
    char escape = *json->cursor++;
    unsigned code = 0;
    switch (escape) {
    case '"': code = '"'; break;
    case '\\': code = '\\'; break;
    case '/': code = '/'; break;
    case 'b': code = '\b'; break;
    case 'f': code = '\f'; break;
    case 'n': code = '\n'; break;
    case 'r': code = '\r'; break;
    case 't': code = '\t'; break;
    case 'u':
      if (hex4(json, &code)) {
        free(text);
        return 1;
      }
      if (code >= 0xd800 && code <= 0xdbff) {
        unsigned low = 0;
        if (json->end - json->cursor < 2 || json->cursor[0] != '\\' || json->cursor[1] != 'u') {
          free(text);
          return fail(json, "expected a low surrogate after a high surrogate");
        }
        json->cursor += 2;
        if (hex4(json, &low)) {
          free(text);
          return 1;
        }
        if (low < 0xdc00 || low > 0xdfff) {
          free(text);
          return fail(json, "expected a low surrogate after a high surrogate");
        }
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
      } else if (code >= 0xdc00 && code <= 0xdfff) {
        free(text);
        return fail(json, "lone low surrogate");
      }
      if (code == 0) {
        free(text);
        return fail(json, "\\u0000 is not allowed in names");
      }
      break;
    default:
      json->cursor--;
      free(text);
      return fail(json, "unknown escape");
    }
    if (text)
      length += put_utf8(text + length, code);
  }
  if (out) {
    text[length] = '\0';
    *out = text;
  }
  return 0;
}

int htp_json_string(htp_json *json, char **out) { return read_string(json, out); }

int htp_json_uint(htp_json *json, uint64_t *out) {
  int c = htp_json_peek(json);
  if (c < '0' || c > '9')
    return fail(json, "expected a non-negative integer");
  if (c == '0' && json->end - json->cursor > 1 && json->cursor[1] >= '0' && json->cursor[1] <= '9')
    return fail(json, "leading zeros are not allowed");
  uint64_t value = 0;
  while (json->cursor < json->end && *json->cursor >= '0' && *json->cursor <= '9') {
    unsigned digit = (unsigned)(*json->cursor - '0');
    if (value > (UINT64_C(0x7fffffffffffffff) - digit) / 10)
      return fail(json, "integer too large");
    value = value * 10 + digit;
    json->cursor++;
  }
  if (json->cursor < json->end &&
      (*json->cursor == '.' || *json->cursor == 'e' || *json->cursor == 'E'))
    return fail(json, "expected an integer");
  *out = value;
  return 0;
}

static int skip_number(htp_json *json) {
  const char *p = json->cursor;
#define DIGIT(q) ((q) < json->end && *(q) >= '0' && *(q) <= '9')
  if (p < json->end && *p == '-')
    p++;
  if (!DIGIT(p))
    return fail(json, "expected a value");
  if (*p == '0')
    p++;
  else
    while (DIGIT(p))
      p++;
  if (p < json->end && *p == '.') {
    p++;
    if (!DIGIT(p)) {
      json->cursor = p;
      return fail(json, "expected a digit after '.'");
    }
    while (DIGIT(p))
      p++;
  }
  if (p < json->end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < json->end && (*p == '+' || *p == '-'))
      p++;
    if (!DIGIT(p)) {
      json->cursor = p;
      return fail(json, "expected a digit in the exponent");
    }
    while (DIGIT(p))
      p++;
  }
#undef DIGIT
  json->cursor = p;
  return 0;
}

static int skip_literal(htp_json *json, const char *word) {
  size_t length = strlen(word);
  if ((size_t)(json->end - json->cursor) < length || memcmp(json->cursor, word, length) != 0)
    return fail(json, "expected a value");
  json->cursor += length;
  return 0;
}

static int skip_value(htp_json *json, int depth) {
  if (depth > HTP_JSON_MAX_DEPTH)
    return fail(json, "nesting too deep");
  int c = htp_json_peek(json);
  switch (c) {
  case '"':
    return read_string(json, NULL);
  case '{':
    json->cursor++;
    if (htp_json_peek(json) == '}') {
      json->cursor++;
      return 0;
    }
    for (;;) {
      if (read_string(json, NULL) || htp_json_expect(json, ':') || skip_value(json, depth + 1))
        return 1;
      c = htp_json_peek(json);
      json->cursor += (c == ',' || c == '}');
      if (c == '}')
        return 0;
      if (c != ',')
        return fail(json, "expected ',' or '}'");
    }
  case '[':
    json->cursor++;
    if (htp_json_peek(json) == ']') {
      json->cursor++;
      return 0;
    }
    for (;;) {
      if (skip_value(json, depth + 1))
        return 1;
      c = htp_json_peek(json);
      json->cursor += (c == ',' || c == ']');
      if (c == ']')
        return 0;
      if (c != ',')
        return fail(json, "expected ',' or ']'");
    }
  case 't':
    return skip_literal(json, "true");
  case 'f':
    return skip_literal(json, "false");
  case 'n':
    return skip_literal(json, "null");
  default:
    return skip_number(json);
  }
}

int htp_json_skip_value(htp_json *json) { return skip_value(json, 0); }

int htp_json_finish(htp_json *json) {
  if (htp_json_peek(json) != -1)
    return fail(json, "expected the end of the JSON text");
  return 0;
}
