/*===- tools/htp-run/data.c - Bind inputs and parameters of a block -----===*
 *
 * This file implements data.h. Normals are Box-Muller over tools/rng.h's
 * generator, identical on every machine, so the same seed gives the same
 * data everywhere. bf16
 * arguments get the same f32 draws rounded once (kernels/htp_bf16.h), so an
 * f32 and a bf16 build of one block see the same data up to that rounding.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/data.h"

#include "kernels/htp_bf16.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/npy.h"
#include "tools/htp-run/safetensors.h"
#include "tools/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Element i of out, in tensor's dtype: f32 as is, bf16 rounded. */
static void store(const htp_sig_tensor *tensor, void *out, int64_t i, float value) {
  if (tensor->dtype == HTP_SIG_BF16)
    ((htp_bf16 *)out)[i] = htp_bf16_from_f32(value);
  else
    ((float *)out)[i] = value;
}

void htp_fill_random(const htp_sig_tensor *tensor, int index, uint64_t seed, void *out) {
  const char *name = tensor->name;
  size_t length = strlen(name);
  int is_norm = tensor->role == HTP_SIG_PARAM && strstr(name, "norm") != NULL;
  if (is_norm && length >= 7 && strcmp(name + length - 7, ".weight") == 0) {
    for (int64_t i = 0; i < tensor->count; i++)
      store(tensor, out, i, 1.0f);
    return;
  }
  if (is_norm && length >= 5 && strcmp(name + length - 5, ".bias") == 0) {
    memset(out, 0, tensor->bytes); /* +0 in f32 and bf16 alike */
    return;
  }
  double std = tensor->role == HTP_SIG_INPUT ? 1.0 : 0.02;
  uint64_t mix = seed ^ (UINT64_C(0xd1b54a32d192ed03) * (uint64_t)(index + 1));
  htp_rng r = htp_rng_seeded(mix);
  for (int64_t i = 0; i < tensor->count; i += 2) {
    double radius = sqrt(-2.0 * log(htp_rng_unit(&r))), angle = 6.283185307179586 * htp_rng_unit(&r);
    store(tensor, out, i, (float)(std * radius * cos(angle)));
    if (i + 1 < tensor->count)
      store(tensor, out, i + 1, (float)(std * radius * sin(angle)));
  }
}

static int same_shape(int rank_a, const int64_t *dims_a, int rank_b, const int64_t *dims_b) {
  if (rank_a != rank_b)
    return 0;
  for (int d = 0; d < rank_a; d++)
    if (dims_a[d] != dims_b[d])
      return 0;
  return 1;
}

int htp_bind_weights(const char *path, const htp_signature *sig, void *const *buffers, char *err,
                     size_t err_size) {
  char reason[512];
  htp_safetensors st;
  if (htp_safetensors_open(path, &st, reason, sizeof reason))
    return htp_set_error(err, err_size, "%s: %s", path, reason);

  int status = 0, missing = 0, rounded = 0, widened = 0;
  const char *first_missing = NULL, *first_rounded = NULL, *first_widened = NULL;
  char shape[128];
  for (int i = 0; i < sig->num_args && !status; i++) {
    const htp_sig_tensor *param = &sig->args[i];
    if (param->role != HTP_SIG_PARAM)
      continue;
    const htp_st_tensor *tensor = htp_safetensors_find(&st, param->name);
    if (!tensor) {
      if (!missing++)
        first_missing = param->name;
      continue;
    }
    if (!same_shape(tensor->rank, tensor->dims, param->rank, param->dims)) {
      char expected[128];
      htp_format_shape(shape, sizeof shape, tensor->rank, tensor->dims);
      htp_format_shape(expected, sizeof expected, param->rank, param->dims);
      status = htp_set_error(err, err_size, "%s: tensor '%s' has shape %s but the block expects %s",
                             path, param->name, shape, expected);
      break;
    }
    /* bf16 arguments take BF16 byte for byte or F32 rounded; f32 arguments
     * widen BF16 exactly (and F16, F64 as before). Conversions are noted. */
    int failed;
    if (param->dtype == HTP_SIG_BF16) {
      failed = htp_safetensors_read_bf16(&st, tensor, buffers[i], reason, sizeof reason);
      if (!failed && strcmp(tensor->dtype, "F32") == 0 && !rounded++)
        first_rounded = param->name;
    } else {
      failed = htp_safetensors_read_f32(&st, tensor, buffers[i], reason, sizeof reason);
      if (!failed && strcmp(tensor->dtype, "BF16") == 0 && !widened++)
        first_widened = param->name;
    }
    if (failed)
      status = htp_set_error(err, err_size, "%s: %s", path, reason);
  }
  if (!status && rounded)
    fprintf(stderr, "htp-run: note: %s: %d F32 tensor%s rounded to bf16 on load for the bf16 "
            "block (e.g. '%s')\n", path, rounded, rounded == 1 ? "" : "s", first_rounded);
  if (!status && widened)
    fprintf(stderr, "htp-run: note: %s: %d BF16 tensor%s widened to f32 on load (exact) for the "
            "f32 block (e.g. '%s')\n", path, widened, widened == 1 ? "" : "s", first_widened);
  if (!status && missing) {
    for (int i = 0; i < sig->num_args; i++)
      if (sig->args[i].name == first_missing)
        htp_format_shape(shape, sizeof shape, sig->args[i].rank, sig->args[i].dims);
    if (missing > 1)
      status = htp_set_error(err, err_size,
                             "%s: missing tensor '%s' (a parameter of shape %s), and %d more "
                             "parameters", path, first_missing, shape, missing - 1);
    else
      status = htp_set_error(err, err_size, "%s: missing tensor '%s' (a parameter of shape %s)",
                             path, first_missing, shape);
  }
  if (!status) {
    int unused = 0;
    const char *first_unused = NULL;
    for (int t = 0; t < st.count; t++) {
      int used = 0;
      for (int i = 0; i < sig->num_args && !used; i++)
        used = sig->args[i].role == HTP_SIG_PARAM && strcmp(sig->args[i].name, st.tensors[t].name) == 0;
      if (!used && !unused++)
        first_unused = st.tensors[t].name;
    }
    if (unused)
      fprintf(stderr, "htp-run: warning: %s: %d tensor%s not used by the block, e.g. '%s'\n",
              path, unused, unused == 1 ? " is" : "s are", first_unused);
  }
  htp_safetensors_close(&st);
  return status;
}

int htp_bind_input(const char *path, const htp_sig_tensor *tensor, void *out, char *err,
                   size_t err_size) {
  char reason[512];
  htp_array array;
  if (htp_npy_read(path, &array, reason, sizeof reason))
    return htp_set_error(err, err_size, "%s: %s", path, reason);
  int status = 0;
  if (!same_shape(array.rank, array.dims, tensor->rank, tensor->dims)) {
    char shape[128], expected[128];
    htp_format_shape(shape, sizeof shape, array.rank, array.dims);
    htp_format_shape(expected, sizeof expected, tensor->rank, tensor->dims);
    status = htp_set_error(err, err_size, "%s: array of shape %s, but input '%s' has shape %s",
                           path, shape, tensor->name, expected);
  } else if (tensor->dtype == HTP_SIG_BF16) {
    /* NumPy has no bf16: the file is <f4 (or <f8), rounded once here. */
    htp_bf16_from_f32_n(array.data, out, tensor->count);
    fprintf(stderr, "htp-run: note: %s: input '%s' rounded to bf16 on load\n", path,
            tensor->name);
  } else {
    memcpy(out, array.data, tensor->bytes);
  }
  htp_array_free(&array);
  return status;
}
