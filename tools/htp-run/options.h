/*===- tools/htp-run/options.h - htp-run's command line ------------------===*
 *
 * Parses htp-run's flags (DESIGN §7) into htp_run_options and prints the
 * --help text; the one place that lists the flags and their defaults.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_OPTIONS_H
#define HTP_RUN_OPTIONS_H

#include "runtime/htp.h"
#include "runtime/htp_entry.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Limits of the command line. --iters and --warmup are bounded because the
 * executor keeps a time per iteration and rank; --tp by HTP_ENTRY_MAX_TP. */
enum { HTP_RUN_MAX_FILES = 64, HTP_RUN_MAX_INJECTIONS = 16, HTP_RUN_MAX_ITERS = 10000000 };
/* --sms: at most this many flags (one per rank), each COUNT at most
 * HTP_RUN_MAX_SM_COUNT (far above any GPU's SMs; the runtime checks the
 * device's real count and partition steps). */
enum { HTP_RUN_MAX_SMS = 64, HTP_RUN_MAX_SM_COUNT = 1 << 16 };

/* --slow R:F[@K]: rank R's compute stretched by factor F from iteration K. */
typedef struct htp_run_slow {
  int rank;
  double factor;
  long from_iteration;
} htp_run_slow;

/* --sms R:COUNT: rank R's work confined to COUNT SMs of the GPU (a green
 * context; htp_config.sm_counts). */
typedef struct htp_run_sms {
  int rank;
  int count;
} htp_run_sms;

/* --fault KIND:R@K: an htp_fault (runtime/htp.h) of kind delay|hang|die. */
/* rejoin is no runtime fault: --train --elastic brings the rank back. */
typedef enum htp_run_fault_kind {
  HTP_RUN_FAULT_DELAY,
  HTP_RUN_FAULT_HANG,
  HTP_RUN_FAULT_DIE,
  HTP_RUN_FAULT_REJOIN
} htp_run_fault_kind;
typedef struct htp_run_fault {
  htp_run_fault_kind kind;
  int rank;
  long iteration;
  double seconds; /* delay: --fault delay=S:R@K, default 1 s; hang/die: 0 */
} htp_run_fault;

typedef enum htp_report_kind { HTP_REPORT_TABLE, HTP_REPORT_JSON } htp_report_kind;

/* --train's choices. */
typedef enum htp_train_optimizer { HTP_TRAIN_ADAMW, HTP_TRAIN_SGD } htp_train_optimizer;
typedef enum htp_train_schedule { HTP_TRAIN_COSINE, HTP_TRAIN_CONSTANT } htp_train_schedule;
typedef enum htp_train_augment {
  HTP_AUGMENT_NONE, HTP_AUGMENT_FLIP, HTP_AUGMENT_FLIP_SHIFT
} htp_train_augment;
typedef enum htp_train_clock {
  HTP_TRAIN_CLOCK_WALL,
  HTP_TRAIN_CLOCK_CPU,
  HTP_TRAIN_CLOCK_UNITS
} htp_train_clock;
#define HTP_TRAIN_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
enum { HTP_TRAIN_MAX_EPOCHS = 100000 };

/* --train: htp-run trains the block's gradient entry (tools/htp-run/train/). */
typedef struct htp_train_options {
  int enabled;                   /* --train */
  const char *data;              /* --data DIR */
  long epochs;                   /* total epochs, a resumed run included */
  htp_train_optimizer optimizer;
  double lr;                     /* peak learning rate */
  double momentum;               /* SGD */
  double weight_decay;
  int weight_decay_given, lr_given, momentum_given;
  htp_train_schedule schedule;
  htp_train_augment augment;     /* of the training batches */
  double label_smoothing;        /* in [0, 1): training targets (1 - e) one-hot + e / classes */
  double random_erase;           /* in [0, 1]: probability of an erased box per image */
  htp_train_clock clock;         /* what times the hooks and the steps */
  long limit_train, limit_test;  /* 0: the whole set */
  const char *params, *checkpoint, *resume, *metrics;
  int skip_nonfinite;            /* --skip-nonfinite: skip a step with a non-finite loss */
  long elastic;                  /* --elastic K: steps between snapshots (0: chosen) */
  int elastic_given;
  long standby;                  /* --standby N: mpirun's last N processes wait to rejoin */
} htp_train_options;

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
  int64_t shares[HTP_ENTRY_MAX_TP]; /* --shares: one per rank (num_shares 0: even) */
  int num_shares;
  long spare;                    /* --spare: percent of spare room per rank, 0 to 1000 */
  const char *backend, *device;
  int matmul_precision;          /* --matmul-precision: an htp_matmul_precision */
  htp_policy policy;             /* what the ranks do about stragglers */
  htp_impute impute;             /* values of pruned units */
  int impute_given;
  long same_max_age;             /* --impute same: steps a stored value stands in (0: any) */
  htp_select selection;          /* which units are shed */
  int select_given;
  double ewma_alpha;             /* the detector's smoothing (runtime/htp.h's default) */
  long hysteresis;               /* iterations in a row to switch a rank's state */
  double repartition;            /* --repartition: the balancer's repartition_ratio */
  int repartition_given;
  const char *slow, *trace;      /* NULL when not given (slow: the last --slow) */
  int check;
  int profile;                   /* --profile: time each call of the block */
  double timeout_s;              /* deadline of every collective */
  htp_run_slow slows[HTP_RUN_MAX_INJECTIONS];
  int num_slows;
  htp_run_fault faults[HTP_RUN_MAX_INJECTIONS];
  int num_faults;
  htp_run_sms sms[HTP_RUN_MAX_SMS]; /* --sms, each rank at most once */
  int num_sms;
  htp_train_options train;
  int given_run_only;            /* a flag of the plain run (--iters, --input, ...) was given */
  const char *run_only_flag;     /* its name, for the message */
  int help;
} htp_run_options;

/* Parses argv into *options (which it initialises with the defaults).
 * Returns 0, or non-zero with a usage error in err: an unknown flag, a
 * missing or bad value, a single-valued flag given twice. Uses getopt_long
 * (its globals), so it is not thread safe; argv is left as it is. */
int htp_run_parse_options(int argc, char **argv, htp_run_options *options, char *err,
                          size_t err_size);

/* Returns non-zero with a message in err for a combination of flags that
 * cannot run (--sms without --device cuda and the local backend, --backend
 * nccl without --device cuda, a rank beyond --tp). Whether this build has
 * CUDA, whether a GPU is there and whether a block can take a balancing
 * policy are the executor's checks. */
int htp_run_check_implemented(const htp_run_options *options, char *err, size_t err_size);

/* Returns non-zero with a message in err when --slow, --fault or --sms
 * names a rank outside [0, tp); `source` says where tp came from ("--tp",
 * "the block's tp"). */
int htp_run_check_ranks(const htp_run_options *options, long tp, const char *source, char *err,
                        size_t err_size);

void htp_run_print_help(FILE *stream);

/* --matmul-precision's name of an htp_matmul_precision ("f32", "tf32",
 * "bf16"). */
const char *htp_run_matmul_precision_name(int precision);

/* --augment's and --clock's names of a choice ("none", "flip", "flip-shift";
 * "wall", "cpu"). */
const char *htp_run_augment_name(htp_train_augment augment);
const char *htp_run_clock_name(htp_train_clock clock);
const char *htp_run_optimizer_name(htp_train_optimizer optimizer);

#endif /* HTP_RUN_OPTIONS_H */
