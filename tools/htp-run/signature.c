/*===- tools/htp-run/signature.c - Parse an entry point's __htp_sig text ===*
 *
 * This file implements signature.h: a line-by-line reader of the records
 * that passes/LowerToRuntime.cpp writes.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/signature.h"

#include "tools/htp-run/errors.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_FIELDS = 6 + HTP_SIG_MAX_RANK + 2 };

/* Splits line (modified in place) at single spaces. Returns the field count,
 * or -1 for more fields than fit, an empty field or a stray blank; fields[0]
 * is set whenever the line is not empty. */
static int split_fields(char *line, char **fields) {
  int count = 0, malformed = 0;
  if (*line == '\0')
    return 0;
  for (char *field = line;;) {
    if (count == MAX_FIELDS)
      return -1;
    fields[count++] = field;
    char *space = strchr(field, ' ');
    if (!space)
      break;
    *space = '\0';
    malformed |= *field == '\0';
    field = space + 1;
  }
  return (malformed || fields[count - 1][0] == '\0') ? -1 : count;
}

/* A decimal integer in [min, max], the whole field. */
static int parse_int(const char *field, int64_t min, int64_t max, int64_t *out) {
  const char *p = field;
  int negative = 0;
  if (*p == '-') {
    negative = 1;
    p++;
  }
  if (*p < '0' || *p > '9')
    return 1;
  int64_t value = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (value > (INT64_MAX - 9) / 10)
      return 1;
    value = value * 10 + (*p - '0');
  }
  if (*p != '\0')
    return 1;
  if (negative)
    value = -value;
  if (value < min || value > max)
    return 1;
  *out = value;
  return 0;
}

static char *copy_string(const char *text) {
  size_t length = strlen(text);
  char *copy = malloc(length + 1);
  if (copy)
    memcpy(copy, text, length + 1);
  return copy;
}

/* Reads "NAME DTYPE RANK D0 ..." from fields into tensor. */
static int parse_tensor(char **fields, int count, htp_sig_tensor *tensor, int line, char *err,
                        size_t err_size) {
  if (count < 3)
    return htp_set_error(err, err_size, "signature line %d: expected NAME DTYPE RANK DIMS...",
                         line);
  if (strcmp(fields[1], "f32") != 0)
    return htp_set_error(err, err_size, "signature line %d: tensor '%s' has dtype '%s'; only f32 "
                         "is supported", line, fields[0], fields[1]);
  int64_t rank;
  if (parse_int(fields[2], 0, HTP_SIG_MAX_RANK, &rank))
    return htp_set_error(err, err_size, "signature line %d: bad rank '%s' (0 to %d)", line,
                         fields[2], HTP_SIG_MAX_RANK);
  if (count != 3 + rank)
    return htp_set_error(err, err_size, "signature line %d: rank %lld but %d dims", line,
                         (long long)rank, count - 3);
  tensor->rank = (int)rank;
  tensor->count = 1;
  for (int d = 0; d < rank; d++) {
    int64_t dim;
    if (parse_int(fields[3 + d], 0, INT64_MAX, &dim))
      return htp_set_error(err, err_size, "signature line %d: bad dim '%s'", line, fields[3 + d]);
    if (dim != 0 && tensor->count > (int64_t)(SIZE_MAX / 2 / sizeof(float)) / dim)
      return htp_set_error(err, err_size, "signature line %d: tensor '%s' is too large", line,
                           fields[0]);
    tensor->dims[d] = dim;
    tensor->count *= dim;
  }
  tensor->bytes = (size_t)tensor->count * sizeof(float);
  tensor->name = copy_string(fields[0]);
  if (!tensor->name)
    return htp_set_error(err, err_size, "out of memory");
  return 0;
}

/* Appends a zeroed tensor to *array. */
static htp_sig_tensor *append(htp_sig_tensor **array, int *count) {
  htp_sig_tensor *grown = realloc(*array, (size_t)(*count + 1) * sizeof **array);
  if (!grown)
    return NULL;
  *array = grown;
  memset(&grown[*count], 0, sizeof **array);
  return &grown[(*count)++];
}

/* "shard INDEX DIM PARTS LAYOUT": argument INDEX (declared above) is a slice. */
static int parse_shard(char **fields, int count, htp_signature *sig, int line, char *err,
                       size_t err_size) {
  int64_t index, dim, parts;
  if (count != 5)
    return htp_set_error(err, err_size, "signature line %d: expected 'shard INDEX DIM PARTS "
                         "LAYOUT'", line);
  if (parse_int(fields[1], 0, INT32_MAX, &index) || index >= sig->num_args)
    return htp_set_error(err, err_size, "signature line %d: shard of argument '%s', but %d "
                         "arguments are declared before it", line, fields[1], sig->num_args);
  htp_sig_tensor *arg = &sig->args[index];
  if (arg->shard_layout != HTP_SHARD_NONE)
    return htp_set_error(err, err_size, "signature line %d: argument %lld has two shard records",
                         line, (long long)index);
  if (parse_int(fields[2], 0, HTP_SIG_MAX_RANK - 1, &dim) || dim >= arg->rank)
    return htp_set_error(err, err_size, "signature line %d: shard dim '%s' of argument %lld, "
                         "which has rank %d", line, fields[2], (long long)index, arg->rank);
  if (parse_int(fields[3], 1, 1 << 20, &parts))
    return htp_set_error(err, err_size, "signature line %d: bad shard parts '%s'", line,
                         fields[3]);
  if (arg->dims[dim] != 0 && parts > INT64_MAX / 2 / arg->dims[dim])
    return htp_set_error(err, err_size, "signature line %d: shard of argument %lld is too large",
                         line, (long long)index);
  if (strcmp(fields[4], "blocks") == 0) {
    arg->shard_layout = HTP_SHARD_BLOCKS;
  } else if (strcmp(fields[4], "qkv") == 0) {
    if (dim != 0 || arg->dims[0] % 3 != 0)
      return htp_set_error(err, err_size, "signature line %d: a qkv shard must be of dim 0 with "
                           "a multiple of 3 rows (argument %lld: dim %lld, %lld rows)", line,
                           (long long)index, (long long)dim, (long long)arg->dims[0]);
    arg->shard_layout = HTP_SHARD_QKV;
  } else {
    return htp_set_error(err, err_size, "signature line %d: unknown shard layout '%s' (this "
                         "htp-run knows blocks and qkv)", line, fields[4]);
  }
  arg->shard_dim = (int)dim;
  arg->shard_parts = (int)parts;
  return 0;
}

/* "balance LAYERS DIM HEADS HEAD_DIM HEAD_FLOPS MLP_UNITS MLP_WIDTH
 * MLP_UNIT_FLOPS": every count >= 1; unit counts fit the planner's int. */
static int parse_balance(char **fields, int count, htp_signature *sig, int line, char *err,
                         size_t err_size) {
  static const char *const names[] = {"LAYERS",     "DIM",       "HEADS",     "HEAD_DIM",
                                      "HEAD_FLOPS", "MLP_UNITS", "MLP_WIDTH", "MLP_UNIT_FLOPS"};
  static const int64_t limits[] = {1 << 20, INT32_MAX, 1 << 20, INT32_MAX,
                                   INT64_MAX, 1 << 24,  INT32_MAX, INT64_MAX};
  int64_t value[8];
  if (count != 9)
    return htp_set_error(err, err_size, "signature line %d: expected 'balance LAYERS DIM HEADS "
                         "HEAD_DIM HEAD_FLOPS MLP_UNITS MLP_WIDTH MLP_UNIT_FLOPS'", line);
  if (sig->balance.present)
    return htp_set_error(err, err_size, "signature line %d: a second 'balance' record", line);
  for (int i = 0; i < 8; i++)
    if (parse_int(fields[1 + i], 1, limits[i], &value[i]))
      return htp_set_error(err, err_size, "signature line %d: balance %s '%s' is not an integer "
                           "in [1, %lld]", line, names[i], fields[1 + i], (long long)limits[i]);
  sig->balance.present = 1;
  sig->balance.layers = (int)value[0];
  sig->balance.model_dim = value[1];
  sig->balance.heads = (int)value[2];
  sig->balance.head_dim = value[3];
  sig->balance.head_flops = value[4];
  sig->balance.mlp_units = (int)value[5];
  sig->balance.mlp_unit_width = value[6];
  sig->balance.mlp_unit_flops = value[7];
  return 0;
}

static int parse_lines(char *text, htp_signature *sig, char *err, size_t err_size) {
  char *fields[MAX_FIELDS];
  int line = 0, have_workspace = 0, ended = 0;
  char *next = text;
  while (next && !ended) {
    char *current = next;
    char *newline = strchr(current, '\n');
    next = newline ? newline + 1 : NULL;
    if (newline)
      *newline = '\0';
    line++;
    if (line == 1) {
      if (strcmp(current, "htp-entry 1") != 0)
        return htp_set_error(err, err_size, "signature line 1: expected 'htp-entry 1', found "
                             "'%.40s' (an htp-compile from another version?)", current);
      continue;
    }
    int count = split_fields(current, fields);
    if (count == 0)
      continue;
    const char *kind = fields[0];
    int known = strcmp(kind, "end") == 0 || strcmp(kind, "entry") == 0 ||
                strcmp(kind, "arg") == 0 || strcmp(kind, "result") == 0 ||
                strcmp(kind, "workspace") == 0 || strcmp(kind, "flops") == 0 ||
                strcmp(kind, "tp") == 0 || strcmp(kind, "shard") == 0 ||
                strcmp(kind, "balance") == 0;
    if (!known)
      continue; /* unknown record kinds are skipped (entry.h) */
    if (count < 0)
      return htp_set_error(err, err_size, "signature line %d: malformed '%s' record", line, kind);
    int64_t value;
    if (strcmp(kind, "end") == 0) {
      ended = 1;
    } else if (strcmp(kind, "entry") == 0) {
      if (count != 2 || sig->entry)
        return htp_set_error(err, err_size, "signature line %d: bad or repeated 'entry'", line);
      if (!(sig->entry = copy_string(fields[1])))
        return htp_set_error(err, err_size, "out of memory");
    } else if (strcmp(kind, "arg") == 0 || strcmp(kind, "result") == 0) {
      int is_arg = kind[0] == 'a';
      int expected = is_arg ? sig->num_args : sig->num_results;
      if (count < 2 || parse_int(fields[1], 0, INT32_MAX, &value) || value != expected)
        return htp_set_error(err, err_size, "signature line %d: %s index '%s', expected %d",
                             line, kind, count < 2 ? "" : fields[1], expected);
      htp_sig_role role = HTP_SIG_RESULT;
      int first = 2;
      if (is_arg) {
        if (sig->num_results > 0)
          return htp_set_error(err, err_size, "signature line %d: 'arg' after 'result'", line);
        if (count < 3 || (strcmp(fields[2], "input") != 0 && strcmp(fields[2], "param") != 0))
          return htp_set_error(err, err_size, "signature line %d: arg kind must be 'input' or "
                               "'param'", line);
        role = fields[2][0] == 'i' ? HTP_SIG_INPUT : HTP_SIG_PARAM;
        first = 3;
      }
      htp_sig_tensor *tensor = is_arg ? append(&sig->args, &sig->num_args)
                                      : append(&sig->results, &sig->num_results);
      if (!tensor)
        return htp_set_error(err, err_size, "out of memory");
      tensor->role = role;
      if (parse_tensor(fields + first, count - first, tensor, line, err, err_size))
        return 1;
    } else if (strcmp(kind, "workspace") == 0) {
      if (count != 2 || parse_int(fields[1], 0, INT64_MAX, &value) ||
          (uint64_t)value > SIZE_MAX / 2)
        return htp_set_error(err, err_size, "signature line %d: bad workspace size", line);
      sig->workspace_bytes = (size_t)value;
      have_workspace = 1;
    } else if (strcmp(kind, "flops") == 0) {
      if (count != 2 || parse_int(fields[1], 0, INT64_MAX, &value))
        return htp_set_error(err, err_size, "signature line %d: bad flops count", line);
      sig->flops = value;
    } else if (strcmp(kind, "tp") == 0) {
      if (count != 2 || parse_int(fields[1], 1, 1 << 20, &value))
        return htp_set_error(err, err_size, "signature line %d: bad tp", line);
      sig->tp = (int)value;
    } else if (strcmp(kind, "shard") == 0) {
      if (parse_shard(fields, count, sig, line, err, err_size))
        return 1;
    } else if (strcmp(kind, "balance") == 0) {
      if (parse_balance(fields, count, sig, line, err, err_size))
        return 1;
    }
  }
  if (line == 0)
    return htp_set_error(err, err_size, "empty signature");
  if (!ended)
    return htp_set_error(err, err_size, "signature has no 'end' record (truncated?)");
  if (!sig->entry)
    return htp_set_error(err, err_size, "signature has no 'entry' record");
  if (!have_workspace)
    return htp_set_error(err, err_size, "signature has no 'workspace' record");
  if (sig->num_results == 0)
    return htp_set_error(err, err_size, "signature declares no results");
  for (int i = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *arg = &sig->args[i];
    if (arg->shard_layout != HTP_SHARD_NONE && arg->shard_parts != sig->tp)
      return htp_set_error(err, err_size, "signature: argument %d ('%s') is split in %d parts "
                           "but the block is for tp %d", i, arg->name, arg->shard_parts, sig->tp);
  }
  return 0;
}

int htp_signature_parse(const char *text, htp_signature *sig, char *err, size_t err_size) {
  memset(sig, 0, sizeof *sig);
  sig->tp = 1;
  if (!text)
    return htp_set_error(err, err_size, "no signature");
  char *copy = copy_string(text);
  if (!copy)
    return htp_set_error(err, err_size, "out of memory");
  int status = parse_lines(copy, sig, err, err_size);
  free(copy);
  if (status)
    htp_signature_free(sig);
  return status;
}

void htp_signature_free(htp_signature *sig) {
  if (!sig)
    return;
  for (int i = 0; i < sig->num_args; i++)
    free(sig->args[i].name);
  for (int i = 0; i < sig->num_results; i++)
    free(sig->results[i].name);
  free(sig->args);
  free(sig->results);
  free(sig->entry);
  memset(sig, 0, sizeof *sig);
  sig->tp = 1;
}

void htp_sig_global_dims(const htp_sig_tensor *tensor, int64_t *dims) {
  for (int d = 0; d < tensor->rank; d++)
    dims[d] = tensor->dims[d];
  if (tensor->shard_layout != HTP_SHARD_NONE)
    dims[tensor->shard_dim] *= tensor->shard_parts;
}

void htp_format_shape(char *out, size_t size, int rank, const int64_t *dims) {
  size_t length = (size_t)snprintf(out, size, "[");
  for (int d = 0; d < rank && length < size; d++)
    length += (size_t)snprintf(out + length, size - length, "%s%lld", d ? ", " : "",
                               (long long)dims[d]);
  if (length < size)
    snprintf(out + length, size - length, "]");
}
