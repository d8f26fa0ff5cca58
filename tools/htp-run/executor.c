/*===- tools/htp-run/executor.c - The executor half of htp-run -----------===*
 *
 * This file implements htp_run_main (tools/htp-run/entry.h): parse the
 * command line, get an entry point from the JIT or from a shared object,
 * read its signature, bind data, run warm-up and timed iterations, write the
 * outputs and report. Only unsharded blocks on the CPU for now: the flags of
 * later issues are parsed and refused (options.c).
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L
#include "tools/htp-run/entry.h"

#include "tools/htp-run/data.h"
#include "tools/htp-run/errors.h"
#include "tools/htp-run/npy.h"
#include "tools/htp-run/options.h"
#include "tools/htp-run/signature.h"
#include "tools/htp-run/so_loader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_ERROR = 1, EXIT_USAGE = 2, TABLE_ROWS = 20 };

/* Names of the htp_result codes (runtime/htp.h), kept here so that the
 * executor does not link the runtime only for error text. */
static const char *result_name(int32_t code) {
  static const char *const names[] = {"HTP_OK",          "HTP_ERR_INVALID", "HTP_ERR_NOMEM",
                                      "HTP_ERR_TIMEOUT", "HTP_ERR_REMOTE",  "HTP_ERR_SYSTEM",
                                      "HTP_ERR_UNSUPPORTED", "HTP_ERR_INTERNAL"};
  if (code >= 0 && code < (int32_t)(sizeof names / sizeof names[0]))
    return names[code];
  return "unknown error code";
}

/* Prints an error; control characters that came from a corrupt file's
 * names are shown as '?' rather than sent to the terminal. */
static int fail(const char *message) {
  fputs("htp-run: error: ", stderr);
  for (const unsigned char *p = (const unsigned char *)message; *p; p++)
    fputc((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f ? '?' : *p, stderr);
  fputc('\n', stderr);
  return EXIT_ERROR;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* An ELF file is a shared object from htp-compile; anything else goes to the
 * JIT. Returns -1 (with err) when the file cannot be read. */
static int is_shared_object(const char *path, char *err, size_t err_size) {
  FILE *file = fopen(path, "rb");
  if (!file) {
    htp_set_error(err, err_size, "cannot open '%s': %s", path, strerror(errno));
    return -1;
  }
  unsigned char magic[4] = {0};
  size_t got = fread(magic, 1, sizeof magic, file);
  fclose(file);
  return got == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0;
}

static void *aligned_buffer(size_t bytes) {
  size_t size = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, size ? size : 64);
}

/* JSON string literal (the names come from user files). */
static void json_string(FILE *out, const char *text) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

static void json_tensors(FILE *out, const htp_sig_tensor *tensors, int count, int role) {
  fputc('[', out);
  int first = 1;
  for (int i = 0; i < count; i++) {
    if (role >= 0 && tensors[i].role != (htp_sig_role)role)
      continue;
    fputs(first ? "{\"name\": " : ", {\"name\": ", out);
    first = 0;
    json_string(out, tensors[i].name);
    fputs(", \"shape\": [", out);
    for (int d = 0; d < tensors[i].rank; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)tensors[i].dims[d]);
    fputs("]}", out);
  }
  fputc(']', out);
}

/* Finite JSON number (inf and nan are not JSON). */
static void json_number(FILE *out, double value) {
  if (isfinite(value))
    fprintf(out, "%.9g", value);
  else
    fputs("null", out);
}

typedef struct timing {
  double median, min, mean, max, gflops;
} timing;

static timing summarise(const double *times, long count, int64_t flops) {
  double *sorted = malloc((size_t)count * sizeof *sorted);
  timing t = {0, 0, 0, 0, 0};
  if (!sorted)
    return t;
  memcpy(sorted, times, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_double);
  t.median = count % 2 ? sorted[count / 2] : 0.5 * (sorted[count / 2 - 1] + sorted[count / 2]);
  t.min = sorted[0];
  t.max = sorted[count - 1];
  for (long i = 0; i < count; i++)
    t.mean += times[i] / (double)count;
  t.gflops = t.median > 0 ? (double)flops / (t.median * 1e6) : 0;
  free(sorted);
  return t;
}

static void report_json(const htp_run_options *options, const htp_signature *sig,
                        const double *times, timing t) {
  FILE *out = stdout;
  fputs("{\"entry\": ", out);
  json_string(out, sig->entry);
  fputs(", \"file\": ", out);
  json_string(out, options->path);
  fprintf(out, ", \"iters\": %ld, \"warmup\": %ld, \"seed\": %llu, \"tp\": %ld, ",
          options->iters, options->warmup, (unsigned long long)options->seed, options->tp);
  fprintf(out, "\"backend\": \"%s\", \"device\": \"%s\", \"policy\": \"%s\", \"flops\": %lld",
          options->backend, options->device, options->policy, (long long)sig->flops);
  fputs(", \"median_ms\": ", out);
  json_number(out, t.median);
  fputs(", \"min_ms\": ", out);
  json_number(out, t.min);
  fputs(", \"mean_ms\": ", out);
  json_number(out, t.mean);
  fputs(", \"max_ms\": ", out);
  json_number(out, t.max);
  fputs(", \"gflops\": ", out);
  json_number(out, t.gflops);
  fputs(", \"times_ms\": [", out);
  for (long i = 0; i < options->iters; i++) {
    if (i)
      fputs(", ", out);
    json_number(out, times[i]);
  }
  fputs("], \"inputs\": ", out);
  json_tensors(out, sig->args, sig->num_args, HTP_SIG_INPUT);
  fputs(", \"params\": ", out);
  json_tensors(out, sig->args, sig->num_args, HTP_SIG_PARAM);
  fputs(", \"outputs\": ", out);
  json_tensors(out, sig->results, sig->num_results, -1);
  fprintf(out, ", \"workspace_bytes\": %zu}\n", sig->workspace_bytes);
}

static void report_table(const htp_run_options *options, const htp_signature *sig,
                         const double *times, timing t) {
  char shape[128];
  size_t param_bytes = 0;
  int params = 0;
  printf("%s (%s)\n", sig->entry, options->path);
  for (int i = 0; i < sig->num_args; i++) {
    if (sig->args[i].role == HTP_SIG_PARAM) {
      params++;
      param_bytes += sig->args[i].bytes;
      continue;
    }
    htp_format_shape(shape, sizeof shape, sig->args[i].rank, sig->args[i].dims);
    printf("  input  %s %s\n", sig->args[i].name, shape);
  }
  printf("  params %d tensors, %.3f MB\n", params, (double)param_bytes / 1e6);
  for (int i = 0; i < sig->num_results; i++) {
    htp_format_shape(shape, sizeof shape, sig->results[i].rank, sig->results[i].dims);
    printf("  output %s %s\n", sig->results[i].name, shape);
  }
  printf("  tp %ld, backend %s, device %s, policy %s; %ld warm-up + %ld timed iterations, "
         "%.4g GFLOP per call\n",
         options->tp, options->backend, options->device, options->policy, options->warmup,
         options->iters, (double)sig->flops / 1e9);
  printf("  %6s %12s %10s\n", "iter", "ms", "GFLOP/s");
  for (long i = 0; i < options->iters && i < TABLE_ROWS; i++)
    printf("  %6ld %12.4f %10.2f\n", i + 1, times[i],
           times[i] > 0 ? (double)sig->flops / (times[i] * 1e6) : 0.0);
  if (options->iters > TABLE_ROWS)
    printf("  ... %ld more iterations\n", options->iters - TABLE_ROWS);
  printf("median %.4f ms, min %.4f ms, mean %.4f ms, max %.4f ms, %.2f GFLOP/s at the median\n",
         t.median, t.min, t.mean, t.max, t.gflops);
}

/* Warns about NaN or inf in a result: a wrong block, or bad weights. */
static void check_finite(const htp_sig_tensor *result, const float *data) {
  int64_t bad = 0;
  for (int64_t i = 0; i < result->count; i++)
    bad += !isfinite(data[i]);
  if (bad)
    fprintf(stderr, "htp-run: warning: result '%s' holds %lld non-finite values\n", result->name,
            (long long)bad);
}

/* Everything a run owns, released in one place. */
typedef struct run_state {
  const htp_compiler *loader;
  htp_compiled compiled;
  htp_signature sig;
  void **buffers;
  int num_buffers;
  double *times;
} run_state;

static void release(run_state *state) {
  if (state->buffers)
    for (int i = 0; i < state->num_buffers; i++)
      free(state->buffers[i]);
  free(state->buffers);
  free(state->times);
  htp_signature_free(&state->sig);
  if (state->loader && state->compiled.handle)
    state->loader->unload(&state->compiled);
}

static int run(const htp_run_options *options, const htp_compiler *jit, run_state *state) {
  char err[16384];
  int shared = is_shared_object(options->path, err, sizeof err);
  if (shared < 0)
    return fail(err);
  if (!shared && !jit) {
    htp_set_error(err, sizeof err,
                  "%s: this htp-run was built without MLIR, so it cannot compile .mlir files; "
                  "compile with htp-compile elsewhere and run the .so",
                  options->path);
    return fail(err);
  }
  state->loader = shared ? htp_so_loader() : jit;
  htp_compile_options compile = {(int)options->tp, NULL};
  if (state->loader->load(options->path, options->entry, &compile, &state->compiled, err,
                          sizeof err)) {
    state->loader = NULL;
    return fail(err);
  }

  char reason[1024];
  if (htp_signature_parse(state->compiled.signature, &state->sig, reason, sizeof reason)) {
    htp_set_error(err, sizeof err, "%s: bad entry signature: %s", options->path, reason);
    return fail(err);
  }
  const htp_signature *sig = &state->sig;
  if (sig->tp > 1) {
    htp_set_error(err, sizeof err, "%s: the block was split for tp %d; tensor-parallel execution "
                  "is not implemented yet", options->path, sig->tp);
    return fail(err);
  }

  int num_inputs = 0;
  for (int i = 0; i < sig->num_args; i++)
    num_inputs += sig->args[i].role == HTP_SIG_INPUT;
  if (options->num_inputs && options->num_inputs != num_inputs) {
    htp_set_error(err, sizeof err, "%s takes %d data input%s but --input was given %d time%s",
                  sig->entry, num_inputs, num_inputs == 1 ? "" : "s", options->num_inputs,
                  options->num_inputs == 1 ? "" : "s");
    return fail(err);
  }
  if (options->num_outputs > sig->num_results) {
    htp_set_error(err, sizeof err, "%s returns %d result%s but --output was given %d times",
                  sig->entry, sig->num_results, sig->num_results == 1 ? "" : "s",
                  options->num_outputs);
    return fail(err);
  }

  /* buffers[]: arguments, results, workspace (entry.h). */
  state->num_buffers = sig->num_args + sig->num_results + 1;
  state->buffers = calloc((size_t)state->num_buffers, sizeof *state->buffers);
  state->times = calloc((size_t)options->iters, sizeof *state->times);
  if (!state->buffers || !state->times)
    return fail("out of memory");
  for (int i = 0; i < state->num_buffers; i++) {
    size_t bytes = i < sig->num_args      ? sig->args[i].bytes
                   : i < state->num_buffers - 1 ? sig->results[i - sig->num_args].bytes
                                               : sig->workspace_bytes;
    if (!(state->buffers[i] = aligned_buffer(bytes))) {
      htp_set_error(err, sizeof err, "out of memory allocating %zu bytes for buffer %d", bytes, i);
      return fail(err);
    }
  }

  for (int i = 0, input = 0; i < sig->num_args; i++) {
    const htp_sig_tensor *arg = &sig->args[i];
    if (arg->role == HTP_SIG_INPUT && options->num_inputs) {
      if (htp_bind_input(options->inputs[input++], arg, state->buffers[i], err, sizeof err))
        return fail(err);
    } else if (arg->role == HTP_SIG_INPUT || !options->weights) {
      htp_fill_random(arg, i, options->seed, state->buffers[i]);
    }
  }
  if (options->weights &&
      htp_bind_weights(options->weights, sig, state->buffers, err, sizeof err))
    return fail(err);

  for (long i = -options->warmup; i < options->iters; i++) {
    double start = now_ms();
    int32_t code = state->compiled.fn(NULL, state->buffers);
    double elapsed = now_ms() - start;
    if (code != 0) {
      htp_set_error(err, sizeof err, "%s returned %d (%s) in %s iteration %ld", sig->entry,
                    (int)code, result_name(code), i < 0 ? "warm-up" : "timed",
                    i < 0 ? i + options->warmup + 1 : i + 1);
      return fail(err);
    }
    if (i >= 0)
      state->times[i] = elapsed;
  }

  for (int r = 0; r < sig->num_results; r++)
    check_finite(&sig->results[r], state->buffers[sig->num_args + r]);
  for (int r = 0; r < options->num_outputs; r++) {
    const htp_sig_tensor *result = &sig->results[r];
    if (htp_npy_write(options->outputs[r], result->rank, result->dims,
                      state->buffers[sig->num_args + r], reason, sizeof reason)) {
      htp_set_error(err, sizeof err, "%s: %s", options->outputs[r], reason);
      return fail(err);
    }
  }

  timing t = summarise(state->times, options->iters, sig->flops);
  if (options->report == HTP_REPORT_JSON)
    report_json(options, sig, state->times, t);
  else
    report_table(options, sig, state->times, t);
  if (fflush(stdout) != 0)
    return fail("cannot write the report to stdout");
  return 0;
}

int htp_run_main(int argc, char **argv, const htp_compiler *jit) {
  htp_run_options options;
  char err[1024];
  if (htp_run_parse_options(argc, argv, &options, err, sizeof err)) {
    fprintf(stderr, "htp-run: error: %s (see htp-run --help)\n", err);
    return EXIT_USAGE;
  }
  if (options.help) {
    htp_run_print_help(stdout);
    return 0;
  }
  if (htp_run_check_implemented(&options, err, sizeof err))
    return fail(err);
  run_state state;
  memset(&state, 0, sizeof state);
  int status = run(&options, jit, &state);
  release(&state);
  return status;
}
