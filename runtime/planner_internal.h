/*===- runtime/planner_internal.h - the planner's private state -----------===*
 *
 * Private to libhtprt. The planner object (plan.c) owns the detector state
 * (detect.c) and every array a plan points into, all allocated at create so
 * that observing and planning allocate nothing. trace.c writes the per-rank
 * JSON line from it; units.c and migrate.c read plans through htp.h only.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_PLANNER_INTERNAL_H
#define HTP_PLANNER_INTERNAL_H

#include "runtime/htp.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define HTP__PLANNER_MESSAGE_SIZE 256

/* Detector state: identical on every rank that saw the same samples. */
typedef struct htp__detector {
  double *ewma;          /* [world] smoothed absolute speed (work / s) */
  double *relative;      /* [world] ewma / max ewma */
  uint8_t *straggler;    /* [world] current classification */
  int32_t *streak;       /* [world] consecutive iterations past the switch threshold */
  int64_t samples;       /* iterations observed */
} htp__detector;

/* A rank and its sort key (deficit or remainder), largest key first. */
typedef struct htp__rank_key {
  double key;
  int32_t rank;
} htp__rank_key;

/* Scratch and output of one planning pass. */
typedef struct htp__plan_storage {
  double *speed, *gamma;         /* [world] */
  uint8_t *straggler, *action;   /* [world] */
  int32_t *pruned, *sent, *received, *absorb; /* [kinds * world] */
  htp_flow *flows[HTP_PAIR_KINDS];            /* [world] each: flows <= world */
} htp__plan_storage;

struct htp_planner {
  htp_planner_config config;
  htp__detector detector;
  htp__plan_storage storage;
  htp_plan plan;
  /* scratch, [world] each */
  int32_t *order;        /* stragglers by deficit, helpers by rank */
  int32_t *helpers;
  double *spare;         /* helper spare capacity (work fraction) */
  htp__rank_key *keys;   /* stragglers by deficit, then helpers by remainder */
  int32_t *need;         /* units a migrator hands off (one kind) */
  double *last_seconds;  /* [world] last gathered compute seconds */
  double *last_sites;    /* [world * kinds] last gathered site seconds (may be -1) */
  double *gather;        /* [world * (1 + kinds)] htp_balancer_step's all-gather */
  int64_t iteration;
  int replanned_last;
  uint64_t moved_bytes;
  FILE *trace;
  char message[HTP__PLANNER_MESSAGE_SIZE];
};

/* detect.c */
int htp__detector_init(htp__detector *detector, int world_size);
void htp__detector_free(htp__detector *detector);
/* Feeds one sample per rank (work done / seconds) and updates the
 * classification with hysteresis. Returns 1 if the straggler set changed. */
int htp__detector_update(htp__detector *detector, const htp_planner_config *config,
                         const double *work, const double *seconds);

/* plan.c */
/* Plans from relative speeds and straggler flags into planner->plan. */
void htp__plan_compute(htp_planner *planner, const double *speeds, const uint8_t *stragglers);
htp_result htp__planner_error(htp_planner *planner, htp_result code, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* trace.c */
void htp__trace_write(htp_planner *planner, int rank, double seconds, const double *sites);

/* units.c: shared by migrate.c */
uint64_t htp__splitmix64(uint64_t *state);

#endif /* HTP_PLANNER_INTERNAL_H */
