/*===- tools/htp-run/signature.h - Parse an entry point's __htp_sig text ===*
 *
 * The text format is defined in tools/htp-run/entry.h. Parsing is strict
 * about what the executor relies on (records in order, indices dense from 0,
 * non-negative dims, sizes that fit in memory, "end" present) and ignores
 * unknown record kinds, so later issues can add records.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_SIGNATURE_H
#define HTP_RUN_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

enum { HTP_SIG_MAX_RANK = 8 };

typedef enum htp_sig_role { HTP_SIG_INPUT, HTP_SIG_PARAM, HTP_SIG_RESULT } htp_sig_role;

/* How a sharded argument is cut out of its global tensor (entry.h). */
typedef enum htp_shard_layout {
  HTP_SHARD_NONE = 0,   /* not sharded: the same on every rank */
  HTP_SHARD_BLOCKS = 1, /* slice r of dim `dim` */
  HTP_SHARD_QKV = 2     /* dim 0 is q | k | v; slice r of each of the three */
} htp_shard_layout;

typedef struct htp_sig_tensor {
  htp_sig_role role;
  char *name;
  int rank;
  int64_t dims[HTP_SIG_MAX_RANK];
  int64_t count;  /* prod(dims) */
  size_t bytes;   /* count * sizeof(float) */
  /* From a "shard INDEX DIM PARTS LAYOUT" record; HTP_SHARD_NONE without. */
  htp_shard_layout shard_layout;
  int shard_dim, shard_parts;
} htp_sig_tensor;

/* From a "balance LAYERS DIM HEADS HEAD_DIM HEAD_FLOPS MLP_UNITS MLP_WIDTH
 * MLP_UNIT_FLOPS" record (entry.h): the work units the block's balance hooks
 * split each layer into, per rank. present is 0 without the record (tp 1,
 * or a block compiled without hooks): it has no units to balance. */
typedef struct htp_sig_balance {
  int present;
  int layers;                 /* attention + MLP pairs */
  int64_t model_dim;
  int heads;                  /* per rank */
  int64_t head_dim;
  int64_t head_flops;         /* per head per call */
  int mlp_units;              /* per rank */
  int64_t mlp_unit_width;     /* neurons per unit */
  int64_t mlp_unit_flops;     /* per unit per call */
} htp_sig_balance;

typedef struct htp_signature {
  char *entry;
  int num_args;
  htp_sig_tensor *args;     /* inputs and params, in buffer order */
  int num_results;
  htp_sig_tensor *results;
  size_t workspace_bytes;
  int64_t flops;            /* per call; 0 when the record is absent */
  int tp;                   /* 1 when the record is absent */
  htp_sig_balance balance;  /* balance.present == 0 when the record is absent */
} htp_signature;

/* Parses text into *sig. On failure returns non-zero, leaves *sig empty and
 * writes a message naming the line to err. */
int htp_signature_parse(const char *text, htp_signature *sig, char *err, size_t err_size);

/* Frees what parse allocated; accepts an empty *sig. */
void htp_signature_free(htp_signature *sig);

/* The global shape of an argument: its local dims with dims[shard_dim]
 * times shard_parts (the local dims when it is not sharded). */
void htp_sig_global_dims(const htp_sig_tensor *tensor, int64_t *dims);

/* Writes "[2, 5, 12]" into out. */
void htp_format_shape(char *out, size_t size, int rank, const int64_t *dims);

#endif /* HTP_RUN_SIGNATURE_H */
