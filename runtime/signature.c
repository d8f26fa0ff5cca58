/*===- runtime/signature.c - Read a compiled block's JSON signature -------===*
 *
 * This file implements htp_signature_parse, htp_signature_free and
 * htp_signature_balancer_config (runtime/htp_entry.h) with jansson. The
 * signature comes from a shared object anyone may hand to htp-run, so it is
 * read as hostile input: every field's type and range is checked, and every
 * size derived from it is computed with overflow checks against the limits of
 * htp_entry.h, before a caller sizes anything from it.
 *===----------------------------------------------------------------------===*/
#include "runtime/htp_entry.h"

#include <jansson.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one parse carries around: the message buffer. */
typedef struct reader {
  char *err;
  size_t err_size;
} reader;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static htp_result invalid(reader *in, const char *format, ...) {
  if (in->err && in->err_size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(in->err, in->err_size, format, args);
    va_end(args);
  }
  return HTP_ERR_INVALID;
}

static htp_result out_of_memory(reader *in) {
  if (in->err && in->err_size > 0)
    snprintf(in->err, in->err_size, "out of memory reading the signature");
  return HTP_ERR_NOMEM;
}

/* a * b when it is at most limit (both >= 0). */
static int product_within(int64_t a, int64_t b, int64_t limit, int64_t *out) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product) || product > limit)
    return 0;
  *out = product;
  return 1;
}

/* Well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF)
 * without C0 or C1 control characters or DEL: a name is printed in messages
 * and tables, and matched against safetensors keys. */
static int is_clean_utf8(const unsigned char *text, size_t length) {
  for (size_t i = 0; i < length;) {
    unsigned c = text[i];
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f)
        return 0;
      i++;
      continue;
    }
    int extra = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3
                                                                                                 : -1;
    if (extra < 0 || length - i <= (size_t)extra)
      return 0;
    uint32_t code = c & (0x3fu >> extra);
    for (int k = 1; k <= extra; k++) {
      if ((text[i + k] & 0xc0) != 0x80)
        return 0;
      code = code << 6 | (text[i + k] & 0x3fu);
    }
    static const uint32_t smallest[4] = {0, 0x80, 0x800, 0x10000};
    if (code < smallest[extra] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff) ||
        (code >= 0x80 && code <= 0x9f))
      return 0;
    i += (size_t)extra + 1;
  }
  return 1;
}

/* A copy of the name in value, which must be a clean string of 1 to
 * HTP_ENTRY_MAX_NAME bytes. what names the field in messages. */
static htp_result read_name(reader *in, json_t *value, const char *what, char **out) {
  if (!json_is_string(value))
    return invalid(in, "%s must be a string", what);
  const char *text = json_string_value(value);
  size_t length = json_string_length(value);
  if (length == 0 || length > HTP_ENTRY_MAX_NAME)
    return invalid(in, "%s must be 1 to %d bytes long, not %zu", what, HTP_ENTRY_MAX_NAME, length);
  if (memchr(text, '\0', length))
    return invalid(in, "%s contains a NUL character", what);
  if (!is_clean_utf8((const unsigned char *)text, length))
    return invalid(in, "%s is not valid UTF-8 without control characters", what);
  if (!(*out = malloc(length + 1)))
    return out_of_memory(in);
  memcpy(*out, text, length + 1);
  return HTP_OK;
}

/* An integer in [min, max]. */
static htp_result read_integer(reader *in, json_t *value, const char *what, int64_t min,
                               int64_t max, int64_t *out) {
  if (!json_is_integer(value))
    return invalid(in, "%s must be an integer", what);
  json_int_t number = json_integer_value(value);
  if (number < min || number > max)
    return invalid(in, "%s is %lld, not in [%lld, %lld]", what, (long long)number, (long long)min,
                   (long long)max);
  *out = (int64_t)number;
  return HTP_OK;
}

/* Member key of object (required), or NULL with a message. */
static json_t *member(reader *in, json_t *object, const char *key, const char *where) {
  json_t *value = json_object_get(object, key);
  if (!value)
    invalid(in, "%s has no \"%s\"", where, key);
  return value;
}

#define CHECK(expression)                                                                      \
  do {                                                                                         \
    htp_result check_result_ = (expression);                                                   \
    if (check_result_ != HTP_OK)                                                               \
      return check_result_;                                                                    \
  } while (0)

/* An uneven shard's "units" (one count per part) and "unit": the counts
 * are allocated into tensor->shard_units (freed with the signature). */
static htp_result read_units(reader *in, json_t *shard, const char *where,
                             htp_sig_tensor *tensor) {
  json_t *units = json_object_get(shard, "units"), *unit = json_object_get(shard, "unit");
  if (!units && !unit)
    return HTP_OK;
  char what[128];
  if (!units || !unit)
    return invalid(in, "%s: an uneven shard has both \"units\" and \"unit\"", where);
  if (!json_is_array(units) || json_array_size(units) != (size_t)tensor->shard_parts)
    return invalid(in, "%s: shard units must be an array of one count per part (%d)", where,
                   tensor->shard_parts);
  if (!(tensor->shard_units = malloc((size_t)tensor->shard_parts * sizeof *tensor->shard_units)))
    return out_of_memory(in);
  for (int part = 0; part < tensor->shard_parts; part++) {
    int64_t count = 0;
    snprintf(what, sizeof what, "%s: shard units[%d]", where, part);
    CHECK(read_integer(in, json_array_get(units, (size_t)part), what, 1,
                       HTP_ENTRY_MAX_SHARD_UNITS, &count));
    tensor->shard_units[part] = (int32_t)count;
  }
  snprintf(what, sizeof what, "%s: shard unit", where);
  return read_integer(in, unit, what, 1, HTP_ENTRY_MAX_DIM, &tensor->shard_unit);
}

/* "shard": {"dim", "parts", "layout"} of tensor, then its global shape. */
static htp_result read_shard(reader *in, json_t *shard, const char *where, int tp,
                             htp_sig_tensor *tensor) {
  char what[96];
  if (!json_is_object(shard))
    return invalid(in, "%s: \"shard\" must be an object", where);
  json_t *dim = member(in, shard, "dim", where), *parts = member(in, shard, "parts", where),
         *layout = member(in, shard, "layout", where);
  if (!dim || !parts || !layout)
    return HTP_ERR_INVALID;
  int64_t value = 0;
  if (tensor->rank == 0)
    return invalid(in, "%s: a scalar cannot be sharded", where);
  snprintf(what, sizeof what, "%s: shard dim", where);
  CHECK(read_integer(in, dim, what, 0, tensor->rank - 1, &value));
  tensor->shard_dim = (int)value;
  snprintf(what, sizeof what, "%s: shard parts", where);
  CHECK(read_integer(in, parts, what, 1, HTP_ENTRY_MAX_TP, &value));
  if (value != tp)
    return invalid(in, "%s is split in %lld parts but the block is for tp %d", where,
                   (long long)value, tp);
  tensor->shard_parts = (int)value;
  const char *name = json_is_string(layout) ? json_string_value(layout) : NULL;
  if (name && strcmp(name, "blocks") == 0 && json_string_length(layout) == 6) {
    tensor->shard_layout = HTP_SHARD_BLOCKS;
  } else if (name && strcmp(name, "qkv") == 0 && json_string_length(layout) == 3) {
    if (tensor->shard_dim != 0 || tensor->dims[0] % 3 != 0)
      return invalid(in, "%s: a qkv shard must be of dim 0 with a multiple of 3 rows (dim %d, "
                     "%lld rows)", where, tensor->shard_dim, (long long)tensor->dims[0]);
    tensor->shard_layout = HTP_SHARD_QKV;
  } else {
    return invalid(in, "%s: shard layout must be \"blocks\" or \"qkv\"", where);
  }
  return read_units(in, shard, where, tensor);
}

/* The global dim of a shard: dim x parts, or for an uneven one sum(units) x
 * unit (x 3 for qkv) after checking that the local dim is room x unit (x 3)
 * for a whole room from max(units) to HTP_ENTRY_MAX_SHARD_UNITS units (above
 * max(units): spare slots). Counts are <= 2^20 and parts <= 2^10, so the
 * sums cannot overflow. */
static htp_result global_dim(reader *in, const char *where, const htp_sig_tensor *tensor,
                             int64_t *global) {
  const int64_t local = tensor->dims[tensor->shard_dim];
  if (!tensor->shard_units) {
    if (!product_within(local, tensor->shard_parts, HTP_ENTRY_MAX_DIM, global))
      return invalid(in, "%s: the global dim %d is larger than %lld", where, tensor->shard_dim,
                     (long long)HTP_ENTRY_MAX_DIM);
    return HTP_OK;
  }
  const int64_t blocks = tensor->shard_layout == HTP_SHARD_QKV ? 3 : 1;
  int64_t total = 0, most = 0, least = 0, rows = 0;
  for (int part = 0; part < tensor->shard_parts; part++) {
    total += tensor->shard_units[part];
    if (tensor->shard_units[part] > most)
      most = tensor->shard_units[part];
  }
  /* unit <= 2^31 - 1: rows and least cannot overflow, but are kept within
   * a dim as every extent is. */
  if (!product_within(blocks, tensor->shard_unit, HTP_ENTRY_MAX_DIM, &rows) ||
      !product_within(most, rows, HTP_ENTRY_MAX_DIM, &least) || local < least ||
      local % rows != 0 || local / rows > HTP_ENTRY_MAX_SHARD_UNITS)
    return invalid(in, "%s: an uneven shard's dim %d (%lld) must be room for whole units "
                   "(%sroom x %lld), at least the most units of any rank (%lld) and at most "
                   "%lld", where, tensor->shard_dim, (long long)local, blocks == 3 ? "3 x " : "",
                   (long long)tensor->shard_unit, (long long)most,
                   (long long)HTP_ENTRY_MAX_SHARD_UNITS);
  if (!product_within(total * blocks, tensor->shard_unit, HTP_ENTRY_MAX_DIM, global))
    return invalid(in, "%s: the global dim %d is larger than %lld", where, tensor->shard_dim,
                   (long long)HTP_ENTRY_MAX_DIM);
  return HTP_OK;
}

/* "dtype": "f32" or "bf16" (exactly: the JSON string may hold a NUL). */
static htp_result read_dtype(reader *in, json_t *dtype, const char *where,
                             htp_sig_tensor *tensor) {
  const char *text = json_is_string(dtype) ? json_string_value(dtype) : "";
  size_t length = json_is_string(dtype) ? json_string_length(dtype) : 0;
  if (length == 3 && strcmp(text, "f32") == 0) {
    tensor->dtype = HTP_SIG_F32;
    tensor->element_size = 4;
  } else if (length == 4 && strcmp(text, "bf16") == 0) {
    tensor->dtype = HTP_SIG_BF16;
    tensor->element_size = 2;
  } else {
    return invalid(in, "%s: dtype must be \"f32\" or \"bf16\"", where);
  }
  return HTP_OK;
}

/* One entry of "args" or "results" into tensor; index and list for messages.
 * The name is read last among the required fields, so a tensor whose shape
 * or shard is bad is named only by its index (its name may be the problem). */
static htp_result read_tensor(reader *in, json_t *object, const char *list, int index, int tp,
                              htp_sig_tensor *tensor) {
  char where[64], what[128];
  snprintf(where, sizeof where, "%s[%d]", list, index);
  if (!json_is_object(object))
    return invalid(in, "%s must be an object", where);
  json_t *name = member(in, object, "name", where), *dtype = member(in, object, "dtype", where),
         *shape = member(in, object, "shape", where);
  if (!name || !dtype || !shape)
    return HTP_ERR_INVALID;
  json_t *role = json_object_get(object, "role");
  if (tensor->role != HTP_SIG_RESULT) {
    if (!role)
      return invalid(in, "%s has no \"role\"", where);
    const char *text = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(text, "input") == 0 && json_string_length(role) == 5)
      tensor->role = HTP_SIG_INPUT;
    else if (strcmp(text, "param") == 0 && json_string_length(role) == 5)
      tensor->role = HTP_SIG_PARAM;
    else
      return invalid(in, "%s: role must be \"input\" or \"param\"", where);
  } else if (role) {
    const char *text = json_is_string(role) ? json_string_value(role) : "";
    size_t length = json_is_string(role) ? json_string_length(role) : 0;
    if (length == 4 && strcmp(text, "grad") == 0)
      tensor->role = HTP_SIG_GRAD;
    else if (!(length == 6 && strcmp(text, "result") == 0))
      return invalid(in, "%s: a result's role, when given, must be \"result\" or \"grad\"",
                     where);
  }
  /* A gradient names its parameter; nothing else may (checked against the
   * arguments once all are read: check_gradients). */
  json_t *grad_of = json_object_get(object, "grad_of");
  if (tensor->role == HTP_SIG_GRAD && !grad_of)
    return invalid(in, "%s: a result of role \"grad\" needs \"grad_of\" (the parameter it "
                   "is the gradient of)", where);
  if (tensor->role != HTP_SIG_GRAD && grad_of)
    return invalid(in, "%s: \"grad_of\" is allowed only on a result of role \"grad\"", where);
  if (grad_of) {
    snprintf(what, sizeof what, "%s: grad_of", where);
    CHECK(read_name(in, grad_of, what, &tensor->grad_of));
  }
  CHECK(read_dtype(in, dtype, where, tensor));
  if (!json_is_array(shape) || json_array_size(shape) > HTP_ENTRY_MAX_RANK)
    return invalid(in, "%s: shape must be an array of at most %d dims", where,
                   HTP_ENTRY_MAX_RANK);
  tensor->rank = (int)json_array_size(shape);
  /* The limits are in bytes: a bf16 tensor may hold twice the elements. */
  const int64_t max_count = HTP_ENTRY_MAX_TENSOR_BYTES / (int64_t)tensor->element_size;
  tensor->count = 1;
  for (int d = 0; d < tensor->rank; d++) {
    snprintf(what, sizeof what, "%s: shape[%d]", where, d);
    CHECK(read_integer(in, json_array_get(shape, (size_t)d), what, 1, HTP_ENTRY_MAX_DIM,
                       &tensor->dims[d]));
    if (!product_within(tensor->count, tensor->dims[d], max_count, &tensor->count))
      return invalid(in, "%s is larger than %lld bytes", where,
                     (long long)HTP_ENTRY_MAX_TENSOR_BYTES);
  }
  tensor->bytes = (size_t)tensor->count * tensor->element_size;
  memcpy(tensor->global_dims, tensor->dims, sizeof tensor->dims);
  tensor->global_count = tensor->count;
  json_t *shard = json_object_get(object, "shard");
  if (shard && !json_is_null(shard)) {
    if (tensor->role == HTP_SIG_RESULT)
      return invalid(in, "%s: a result cannot be sharded (results are complete on every rank; "
                     "only a gradient, with \"grad_of\", carries its parameter's shard)", where);
    CHECK(read_shard(in, shard, where, tp, tensor));
    int64_t *global = &tensor->global_dims[tensor->shard_dim];
    CHECK(global_dim(in, where, tensor, global));
    /* count / local dim is exact: the other dims' product. */
    if (!product_within(tensor->count / tensor->dims[tensor->shard_dim], *global, max_count,
                        &tensor->global_count))
      return invalid(in, "%s: the global tensor is larger than %lld bytes", where,
                     (long long)HTP_ENTRY_MAX_TENSOR_BYTES);
  }
  tensor->global_bytes = (size_t)tensor->global_count * tensor->element_size;
  snprintf(what, sizeof what, "%s: name", where);
  return read_name(in, name, what, &tensor->name);
}

/* Whether two shards of the same parts own the same units (both even, or
 * both uneven alike). */
static int same_units(const htp_sig_tensor *a, const htp_sig_tensor *b) {
  if (!a->shard_units || !b->shard_units)
    return !a->shard_units && !b->shard_units;
  return a->shard_unit == b->shard_unit &&
         memcmp(a->shard_units, b->shard_units, (size_t)a->shard_parts * sizeof *a->shard_units) ==
             0;
}

/* Each gradient against the arguments: grad_of names a parameter, at most
 * one gradient per parameter, with the parameter's dtype, local shape and
 * shard (dim, parts, layout), or no shard when the parameter has none. */
/* Each argument binds one tensor by its name within its role (--weights
 * binds parameters by name), as the dialect's verifier has it: a
 * signature edited to repeat one is refused. */
static htp_result check_unique_names(reader *in, const htp_signature *sig) {
  for (int i = 0; i < sig->num_args; i++)
    for (int j = 0; j < i; j++)
      if (sig->args[i].role == sig->args[j].role &&
          strcmp(sig->args[i].name, sig->args[j].name) == 0)
        return invalid(in, "args[%d] and args[%d] are both %s '%s': each names one tensor", j, i,
                       sig->args[i].role == HTP_SIG_PARAM ? "parameter" : "input",
                       sig->args[i].name);
  return HTP_OK;
}

static htp_result check_gradients(reader *in, htp_signature *sig) {
  for (int k = 0; k < sig->num_results; k++) {
    htp_sig_tensor *grad = &sig->results[k];
    if (grad->role != HTP_SIG_GRAD)
      continue;
    int found = -1;
    for (int i = 0; i < sig->num_args && found < 0; i++)
      if (strcmp(sig->args[i].name, grad->grad_of) == 0)
        found = i;
    if (found < 0)
      return invalid(in, "results[%d] ('%s'): grad_of '%s' is not an argument of %s", k,
                     grad->name, grad->grad_of, sig->entry);
    const htp_sig_tensor *param = &sig->args[found];
    if (param->role != HTP_SIG_PARAM)
      return invalid(in, "results[%d] ('%s'): grad_of '%s' is a data input, not a parameter", k,
                     grad->name, grad->grad_of);
    for (int j = 0; j < k; j++)
      if (sig->results[j].role == HTP_SIG_GRAD && sig->results[j].grad_arg == found)
        return invalid(in, "results[%d] ('%s'): '%s' already has a gradient (results[%d])", k,
                       grad->name, grad->grad_of, j);
    int same_shape = grad->rank == param->rank && grad->dtype == param->dtype;
    for (int d = 0; same_shape && d < grad->rank; d++)
      same_shape = grad->dims[d] == param->dims[d];
    if (!same_shape)
      return invalid(in, "results[%d] ('%s'): its dtype or shape differs from parameter '%s'",
                     k, grad->name, grad->grad_of);
    if (grad->shard_layout != param->shard_layout ||
        (param->shard_layout != HTP_SHARD_NONE &&
         (grad->shard_dim != param->shard_dim || grad->shard_parts != param->shard_parts ||
          !same_units(grad, param))))
      return invalid(in, "results[%d] ('%s'): its shard must be that of parameter '%s' (%s)", k,
                     grad->name, grad->grad_of,
                     param->shard_layout == HTP_SHARD_NONE
                         ? "none: it is replicated"
                         : "the same dim, parts, layout, units and unit");
    grad->grad_arg = found;
  }
  return HTP_OK;
}

static htp_result read_tensors(reader *in, json_t *root, const char *key, int min, int tp,
                               htp_sig_role role, htp_sig_tensor **tensors, int *count) {
  json_t *list = member(in, root, key, "the signature");
  if (!list)
    return HTP_ERR_INVALID;
  if (!json_is_array(list))
    return invalid(in, "\"%s\" must be an array", key);
  size_t size = json_array_size(list);
  if (size < (size_t)min || size > HTP_ENTRY_MAX_TENSORS)
    return invalid(in, "\"%s\" has %zu entries, not %d to %d", key, size, min,
                   HTP_ENTRY_MAX_TENSORS);
  if (size && !(*tensors = calloc(size, sizeof **tensors)))
    return out_of_memory(in);
  for (size_t i = 0; i < size; i++) {
    (*tensors)[i].role = role;
    *count = (int)i + 1; /* so free sees the names read so far */
    CHECK(read_tensor(in, json_array_get(list, i), key, (int)i, tp, &(*tensors)[i]));
  }
  return HTP_OK;
}

/* "balance": every count >= 1; the per-rank widths and one unit's weights
 * fit the limits, so the balancer and the migration can size from them. */
/* "heads_owned" and "mlp_units_owned" (uneven shares or spare room): tp
 * counts, each 1 to the slots of its kind (the room); both or neither. */
static htp_result read_owned(reader *in, json_t *object, int tp, htp_sig_balance *balance) {
  json_t *lists[2] = {json_object_get(object, "heads_owned"),
                      json_object_get(object, "mlp_units_owned")};
  if (!lists[0] && !lists[1])
    return HTP_OK;
  if (!lists[0] || !lists[1])
    return invalid(in, "balance: an uneven split has both \"heads_owned\" and "
                   "\"mlp_units_owned\"");
  static const char *const keys[2] = {"heads_owned", "mlp_units_owned"};
  const int slots[2] = {balance->heads, balance->mlp_units};
  int32_t **owned[2] = {&balance->heads_owned, &balance->mlp_units_owned};
  for (int k = 0; k < 2; k++) {
    if (!json_is_array(lists[k]) || json_array_size(lists[k]) != (size_t)tp)
      return invalid(in, "balance.%s must be an array of one count per rank (%d)", keys[k], tp);
    if (!(*owned[k] = malloc((size_t)tp * sizeof **owned[k])))
      return out_of_memory(in);
    for (int r = 0; r < tp; r++) {
      char what[64];
      int64_t count = 0;
      snprintf(what, sizeof what, "balance.%s[%d]", keys[k], r);
      CHECK(read_integer(in, json_array_get(lists[k], (size_t)r), what, 1, slots[k], &count));
      (*owned[k])[r] = (int32_t)count;
    }
  }
  return HTP_OK;
}

static htp_result read_balance(reader *in, json_t *object, int tp, htp_sig_balance *balance) {
  if (!json_is_object(object))
    return invalid(in, "\"balance\" must be an object");
  static const struct {
    const char *key;
    int64_t max;
  } fields[] = {{"layers", HTP_ENTRY_MAX_LAYERS},   {"model_dim", HTP_ENTRY_MAX_DIM},
                {"heads", HTP_ENTRY_MAX_UNITS},     {"head_dim", HTP_ENTRY_MAX_DIM},
                {"head_flops", INT64_MAX},          {"mlp_units", HTP_ENTRY_MAX_UNITS},
                {"mlp_unit_width", HTP_ENTRY_MAX_DIM}, {"mlp_unit_flops", INT64_MAX}};
  int64_t value[8];
  for (int i = 0; i < 8; i++) {
    char what[64];
    json_t *field = member(in, object, fields[i].key, "\"balance\"");
    if (!field)
      return HTP_ERR_INVALID;
    snprintf(what, sizeof what, "balance.%s", fields[i].key);
    CHECK(read_integer(in, field, what, 1, fields[i].max, &value[i]));
  }
  int64_t width, floats, part;
  const int64_t max_floats = HTP_ENTRY_MAX_TENSOR_BYTES / (int64_t)sizeof(float);
  if (!product_within(value[2], value[3], HTP_ENTRY_MAX_DIM, &width) ||
      !product_within(value[5], value[6], HTP_ENTRY_MAX_DIM, &width))
    return invalid(in, "balance: heads x head_dim and mlp_units x mlp_unit_width must be at most "
                   "%lld", (long long)HTP_ENTRY_MAX_DIM);
  /* One head's weights (4 head_dim x model_dim + 3 head_dim floats) and one
   * MLP unit's (2 width x model_dim + width): at most a tensor's limit. */
  if (!product_within(value[3], value[1], max_floats / 4 - 1, &part) ||
      !product_within(part, 4, max_floats - 3 * value[3], &floats) ||
      !product_within(value[6], value[1], max_floats / 2 - 1, &part) ||
      !product_within(part, 2, max_floats - value[6], &floats))
    return invalid(in, "balance: one unit's weights are larger than %lld bytes",
                   (long long)HTP_ENTRY_MAX_TENSOR_BYTES);
  balance->present = 1;
  balance->layers = (int)value[0];
  balance->model_dim = value[1];
  balance->heads = (int)value[2];
  balance->head_dim = value[3];
  balance->head_flops = value[4];
  balance->mlp_units = (int)value[5];
  balance->mlp_unit_width = value[6];
  balance->mlp_unit_flops = value[7];
  return read_owned(in, object, tp, balance);
}

static htp_result read_signature(reader *in, json_t *root, htp_signature *sig) {
  if (!json_is_object(root))
    return invalid(in, "the signature must be a JSON object");
  int64_t value = 0;
  json_t *version = member(in, root, "htp_entry", "the signature");
  if (!version)
    return HTP_ERR_INVALID;
  if (!json_is_integer(version) || json_integer_value(version) != HTP_ENTRY_FORMAT_VERSION)
    return invalid(in, "\"htp_entry\" is not %d: the block was compiled by another version of "
                   "htp (recompile it with this one)", HTP_ENTRY_FORMAT_VERSION);
  json_t *entry = member(in, root, "entry", "the signature");
  if (!entry)
    return HTP_ERR_INVALID;
  CHECK(read_name(in, entry, "\"entry\"", &sig->entry));
  json_t *tp = json_object_get(root, "tp");
  if (tp) {
    CHECK(read_integer(in, tp, "\"tp\"", 1, HTP_ENTRY_MAX_TP, &value));
    sig->tp = (int)value;
  }
  CHECK(read_tensors(in, root, "args", 0, sig->tp, HTP_SIG_INPUT, &sig->args, &sig->num_args));
  CHECK(read_tensors(in, root, "results", 1, sig->tp, HTP_SIG_RESULT, &sig->results,
                     &sig->num_results));
  CHECK(check_unique_names(in, sig));
  CHECK(check_gradients(in, sig));
  json_t *workspace = member(in, root, "workspace_bytes", "the signature");
  if (!workspace)
    return HTP_ERR_INVALID;
  CHECK(read_integer(in, workspace, "\"workspace_bytes\"", 0, HTP_ENTRY_MAX_WORKSPACE_BYTES,
                     &value));
  sig->workspace_bytes = (size_t)value;
  json_t *kernel_memory = json_object_get(root, "kernel_memory_bytes");
  if (kernel_memory) {
    CHECK(read_integer(in, kernel_memory, "\"kernel_memory_bytes\"", 0,
                       HTP_ENTRY_MAX_WORKSPACE_BYTES, &value));
    sig->kernel_memory_bytes = value;
  }
  json_t *balancer_memory = json_object_get(root, "balancer_memory_bytes");
  if (balancer_memory) {
    CHECK(read_integer(in, balancer_memory, "\"balancer_memory_bytes\"", 0,
                       HTP_ENTRY_MAX_WORKSPACE_BYTES, &value));
    sig->balancer_memory_bytes = value;
  }
  json_t *flops = json_object_get(root, "flops");
  if (flops) {
    /* The whole block's FLOPs are flops x tp: that must fit too. */
    CHECK(read_integer(in, flops, "\"flops\"", 0, INT64_MAX / sig->tp, &value));
    sig->flops = value;
  }
  json_t *balance = json_object_get(root, "balance");
  if (balance && !json_is_null(balance))
    CHECK(read_balance(in, balance, sig->tp, &sig->balance));
  return HTP_OK;
}

static void empty(htp_signature *sig) {
  memset(sig, 0, sizeof *sig);
  sig->tp = 1;
  sig->kernel_memory_bytes = -1;
  sig->balancer_memory_bytes = -1;
}

htp_result htp_signature_parse(const char *text, size_t length, htp_signature *sig, char *err,
                               size_t err_size) {
  reader in = {err, err_size};
  if (err && err_size > 0)
    err[0] = '\0';
  if (!sig)
    return invalid(&in, "htp_signature_parse: sig is NULL");
  empty(sig);
  if (!text)
    return invalid(&in, "no signature");
  const char *nul = memchr(text, '\0', length);
  if (nul)
    return invalid(&in, "the signature holds a NUL byte at offset %zu", (size_t)(nul - text));
  json_error_t error;
  errno = 0; /* jansson says "invalid token" or nothing when memory runs short */
  json_t *root = json_loadb(text, length, JSON_REJECT_DUPLICATES, &error);
  if (!root && (errno == ENOMEM || json_error_code(&error) == json_error_out_of_memory))
    return out_of_memory(&in);
  if (!root)
    return invalid(&in, "the signature is not valid JSON (line %d, column %d): %s", error.line,
                   error.column, error.text);
  htp_result result = read_signature(&in, root, sig);
  json_decref(root);
  if (result != HTP_OK)
    htp_signature_free(sig);
  return result;
}

void htp_signature_free(htp_signature *sig) {
  if (!sig)
    return;
  for (int i = 0; i < sig->num_args; i++) {
    free(sig->args[i].name);
    free(sig->args[i].shard_units);
  }
  for (int i = 0; i < sig->num_results; i++) {
    free(sig->results[i].name);
    free(sig->results[i].grad_of);
    free(sig->results[i].shard_units);
  }
  free(sig->args);
  free(sig->results);
  free(sig->entry);
  free(sig->balance.heads_owned);
  free(sig->balance.mlp_units_owned);
  empty(sig);
}

htp_result htp_signature_balancer_config(const htp_signature *sig, htp_balancer_config *config) {
  if (!sig || !config || !sig->balance.present)
    return HTP_ERR_INVALID;
  const htp_sig_balance *balance = &sig->balance;
  config->planner.world_size = sig->tp;
  config->planner.num_layers = balance->layers;
  config->planner.units_per_rank[HTP_PAIR_ATTENTION] = balance->heads;
  config->planner.units_per_rank[HTP_PAIR_MLP] = balance->mlp_units;
  /* Relative costs from the units' FLOPs: a head costs 1. Clamped into
   * the planner's range: FLOPs can put the ratio anywhere in
   * [1 / INT64_MAX, INT64_MAX], and past 1e9 the lighter kind's work is
   * noise to the planner anyway (a ViT-B/16 block's is of order 1). */
  const double mlp_cost = (double)balance->mlp_unit_flops / (double)balance->head_flops;
  config->planner.unit_cost[HTP_PAIR_ATTENTION] = 1.0;
  config->planner.unit_cost[HTP_PAIR_MLP] =
      mlp_cost < HTP_UNIT_COST_MIN   ? HTP_UNIT_COST_MIN
      : mlp_cost > HTP_UNIT_COST_MAX ? HTP_UNIT_COST_MAX
                                     : mlp_cost;
  config->model_dim = balance->model_dim;
  config->head_dim = balance->head_dim;
  config->mlp_unit_width = balance->mlp_unit_width;
  /* Uneven shares: the signature's arrays (a balancer copies them). */
  config->planner.owned[HTP_PAIR_ATTENTION] = balance->heads_owned;
  config->planner.owned[HTP_PAIR_MLP] = balance->mlp_units_owned;
  /* The compiler gives a block's tensors one dtype (htp_entry.h); the hooks
   * check theirs against it. */
  config->element_bytes = sig->num_args > 0 ? (int32_t)sig->args[0].element_size : 4;
  return HTP_OK;
}
