/*===- tools/htp-run/check.c - htp-run --check ----------------------------===*
 *
 * This file implements the --check half of executor.h: the tp-1 build of
 * the block runs on the same global data as the split one, and each result
 * (rank 0's; a sharded gradient gathered from every rank) is compared with
 * it (max |y_tp - y_1| / max |y_1|). A plan that pruned units makes the
 * split output approximate by design: then the error is reported, not
 * failed. The reference runs on the CPU (no context: the ops' CPU table),
 * at the run's matmul precision, whatever --device is, so on a GPU --check
 * compares the device with the CPU; a tp-1 .so from htp-compile (--device
 * cuda only) is its own tp-1 build. A bf16 block is compared with the tp-1
 * build of the same bf16 block, in f32, under the bf16 tolerance (its error
 * against an f32 reference is the e2e tests' job, with NumPy).
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/executor.h"

#include "kernels/htp_bf16.h"
#include "kernels/htp_kernel_table.h"
#include "tools/htp-run/errors.h"

#include <math.h>
#include <string.h>

/* Fills the tp-1 build's argument i from the split block's global data:
 * the argument of the same name and global size. */
static int bind_check_argument(const htp_run_state *state, const htp_sig_tensor *arg,
                               void *buffer, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig;
  for (int j = 0; j < sig->num_args; j++)
    if (strcmp(sig->args[j].name, arg->name) == 0 && sig->args[j].global_count == arg->count &&
        sig->args[j].dtype == arg->dtype) {
      memcpy(buffer, state->global[j], arg->bytes);
      return 0;
    }
  return htp_set_error(err, err_size, "--check: argument '%s' of the tp-1 build has no "
                       "counterpart of the same size and dtype in the tp-%d build", arg->name,
                       state->tp);
}

/* Element k of a result buffer of dtype, as a double. */
static double element(const void *data, htp_sig_dtype dtype, int64_t k) {
  if (dtype == HTP_SIG_BF16)
    return (double)htp_bf16_to_f32(((const htp_bf16 *)data)[k]);
  return (double)((const float *)data)[k];
}

/* max |split - reference| / max |reference| (the absolute error when the
 * reference is all zero); NaN propagates. */
static double relative_error(const void *reference, const void *split, htp_sig_dtype dtype,
                             int64_t count) {
  double largest = 0, difference = 0;
  for (int64_t k = 0; k < count; k++) {
    double y = element(reference, dtype, k);
    double a = fabs(y), d = fabs(element(split, dtype, k) - y);
    if (!(a <= largest))
      largest = a;
    if (!(d <= difference))
      difference = d;
  }
  return largest > 0 ? difference / largest : difference;
}

int htp_run_check(const htp_run_options *options, const htp_compiler *jit,
                  htp_run_state *state, char *err, size_t err_size) {
  const htp_signature *sig = &state->sig, *one = &state->check_sig;
  htp_entry_fn reference = NULL;
  if (state->shared) {
    one = sig;
    reference = state->compiled.fn;
  } else {
    htp_compile_options compile = {.tp = 1};
    if (jit->load(options->path, options->entry, &compile, &state->check_compiled, err,
                  err_size))
      return 1;
    state->check_loader = jit;
    char reason[1024];
    const char *text = state->check_compiled.signature;
    if (htp_signature_parse(text, text ? strlen(text) : 0, &state->check_sig, reason,
                            sizeof reason) != HTP_OK)
      return htp_set_error(err, err_size, "--check: %s at tp 1: bad entry signature: %s",
                           options->path, reason);
    reference = state->check_compiled.fn;
  }
  if (one->tp != 1 || one->num_results != sig->num_results)
    return htp_set_error(err, err_size, "--check: the tp-1 build of %s has tp %d and %d "
                         "results, the tp-%d build %d results", options->path, one->tp,
                         one->num_results, state->tp, sig->num_results);
  for (int r = 0; r < sig->num_results; r++)
    if (one->results[r].count != sig->results[r].global_count ||
        one->results[r].dtype != sig->results[r].dtype)
      return htp_set_error(err, err_size, "--check: result %d has %lld %s values at tp 1 and "
                           "%lld %s at tp %d", r, (long long)one->results[r].count,
                           one->results[r].dtype == HTP_SIG_BF16 ? "bf16" : "f32",
                           (long long)sig->results[r].global_count,
                           sig->results[r].dtype == HTP_SIG_BF16 ? "bf16" : "f32", state->tp);
  /* What the run holds (its global arguments and every rank's buffers) stays
   * allocated while the tp-1 block runs beside it: counted too. */
  uint64_t total;
  if (htp_run_check_memory("--check's tp-1 build", state->held_bytes, one, 1, 0, &total, err,
                           err_size))
    return 1;
  int count = one->num_args + one->num_results + 1;
  void **buffers = calloc((size_t)count, sizeof *buffers);
  if (!buffers)
    return htp_set_error(err, err_size, "out of memory");
  int status = 0;
  for (int i = 0; i < count && !status; i++) {
    size_t bytes = i < one->num_args ? one->args[i].bytes
                   : i < count - 1  ? one->results[i - one->num_args].bytes
                                    : one->workspace_bytes;
    if (!(buffers[i] = htp_aligned_buffer(bytes)))
      status = htp_set_error(err, err_size, "out of memory");
    else if (i < one->num_args)
      status = bind_check_argument(state, &one->args[i], buffers[i], err, err_size);
  }
  if (!status) {
    /* At the run's matmul precision: the CPU's is process-wide, set by the
     * ranks' contexts on the CPU and the checked device, but not by a GPU
     * run's (its precision is each CUDA environment's). */
    char message[128];
    htp_kernel_env env;
    htp_kernel_env_init(&env, message, sizeof message);
    if (htp_cpu_kernel_table()->set_matmul_precision(&env, state->matmul_precision) !=
        HTP_KERNEL_OK)
      status = htp_set_error(err, err_size, "--check: %s", message);
  }
  if (!status) {
    int32_t code = reference(NULL, buffers); /* no context: the CPU */
    if (code != 0)
      status = htp_set_error(err, err_size, "--check: the tp-1 block returned %d (%s)", (int)code,
                             htp_strerror((htp_result)code));
  }
  if (!status && !(state->check_errors = calloc((size_t)sig->num_results, sizeof(double))))
    status = htp_set_error(err, err_size, "out of memory");
  for (int r = 0; r < sig->num_results && !status; r++)
    state->check_errors[r] = relative_error(buffers[one->num_args + r],
                                            state->outputs[r], sig->results[r].dtype,
                                            sig->results[r].global_count);
  htp_free_buffers(buffers, count);
  return status;
}

int64_t htp_pruned_units(const htp_run_state *state) {
  if (!state->balance)
    return 0;
  int64_t units = 0;
  for (int k = 0; k < HTP_PAIR_KINDS * state->tp; k++)
    units += state->outcome.last_plan.pruned[k];
  return units * state->sig.balance.layers;
}

double htp_check_tolerance(const htp_run_state *state) {
  for (int r = 0; r < state->sig.num_results; r++)
    if (state->sig.results[r].dtype == HTP_SIG_BF16)
      return HTP_CHECK_TOLERANCE_BF16;
  if (state->matmul_precision == HTP_MATMUL_BF16) return ldexp(1.0, -8);
  if (state->matmul_precision == HTP_MATMUL_TF32) return ldexp(1.0, -11);
  return HTP_CHECK_TOLERANCE;
}

int htp_check_failed(const htp_run_state *state, int result) {
  return !(state->check_errors[result] <= htp_check_tolerance(state)) &&
         htp_pruned_units(state) == 0;
}
