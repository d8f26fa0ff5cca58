/*===- tools/htp-run/options.h - htp-run's command line ------------------===*
 *
 * Parses htp-run's flags (DESIGN §7) into htp_run_options and prints the
 * --help text; the one place that lists the flags and their defaults.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_OPTIONS_H
#define HTP_RUN_OPTIONS_H

#include "runtime/htp.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Limits of the command line. --iters and --warmup are bounded because the
 * executor keeps a time per iteration and rank; --tp by HTP_ENTRY_MAX_TP. */
enum { HTP_RUN_MAX_FILES = 64, HTP_RUN_MAX_INJECTIONS = 16, HTP_RUN_MAX_ITERS = 10000000 };

/* --slow R:F[@K]: rank R's compute stretched by factor F from iteration K. */
typedef struct htp_run_slow {
  int rank;
  double factor;
  long from_iteration;
} htp_run_slow;

/* --fault KIND:R@K: an htp_fault (runtime/htp.h) of kind delay|hang|die. */
typedef enum htp_run_fault_kind { HTP_RUN_FAULT_DELAY, HTP_RUN_FAULT_HANG, HTP_RUN_FAULT_DIE } htp_run_fault_kind;
typedef struct htp_run_fault {
  htp_run_fault_kind kind;
  int rank;
  long iteration;
  double seconds; /* delay: --fault delay=S:R@K, default 1 s; hang/die: 0 */
} htp_run_fault;

typedef enum htp_report_kind { HTP_REPORT_TABLE, HTP_REPORT_JSON } htp_report_kind;

typedef struct htp_run_options {
  const char *path;              /* FILE.mlir or FILE.so */
  const char *entry;             /* NULL: the default entry */
  long iters, warmup;
  uint64_t seed;
  const char *weights;
  const char *inputs[HTP_RUN_MAX_FILES];
  int num_inputs;
  const char *outputs[HTP_RUN_MAX_FILES];
  int num_outputs;
  htp_report_kind report;
  long tp;
  int tp_given;                  /* --tp was on the command line */
  const char *backend, *device;
  htp_policy policy;             /* what the ranks do about stragglers */
  htp_impute impute;             /* values of pruned units */
  htp_select selection;          /* which units are shed */
  const char *slow, *trace;      /* NULL when not given (slow: the last --slow) */
  int check;
  double timeout_s;              /* deadline of every collective */
  htp_run_slow slows[HTP_RUN_MAX_INJECTIONS];
  int num_slows;
  htp_run_fault faults[HTP_RUN_MAX_INJECTIONS];
  int num_faults;
  int help;
} htp_run_options;

/* Parses argv into *options (which it initialises with the defaults).
 * Returns 0, or non-zero with a usage error in err: an unknown flag, a
 * missing or bad value, a single-valued flag given twice. Uses getopt_long
 * (its globals), so it is not thread safe; argv is left as it is. */
int htp_run_parse_options(int argc, char **argv, htp_run_options *options, char *err,
                          size_t err_size);

/* Returns non-zero with a message in err for a request this build parses
 * but cannot carry out yet (nccl, CUDA, ...). Whether a block can take a
 * balancing policy depends on its signature: the executor checks that. */
int htp_run_check_implemented(const htp_run_options *options, char *err, size_t err_size);

void htp_run_print_help(FILE *stream);

#endif /* HTP_RUN_OPTIONS_H */
