/*===- runtime/balance_hooks.c - the balance hooks, forward and backward ---===*
 *
 * The hooks that compiled blocks call in place of the plain attention and
 * MLP kernels (DESIGN §4), and their adjoints (DESIGN §11). A forward hook
 * asks the unit table which units to compute, computes those with the
 * work-unit kernels of the context's kernel table (kernels/htp_kernel_table.h;
 * on the CPU kernels/cpu/units.c), imputes the pruned ones, and adds the
 * migrated-in units from packed blocks of their weights (unit_weights.c).
 * No forward hook talks to other ranks: the block's own all-reduce completes
 * the sum, and the migration transfers happen once per plan change, in
 * htp_balancer_end_iteration. Both forward hooks run one body (run_pair),
 * both backward hooks another (run_pair_backward); what differs between a
 * head and an MLP unit is how many row blocks of the first weight a unit
 * spans (q, k, v: 3; fc1: 1) and the kernels: the activation of listed
 * units (a row of pair_ops) forward, shard_backward's branch backward.
 *
 * With zero imputation a forward hook that prunes, hands off or takes in
 * units computes its kept units and its packed in-units as one compact
 * shard (compute_compact): one activation call and one row-parallel GEMM in
 * all, on the CPU and on a device (the shard gathered there with the
 * table's 2-D copies). Otherwise (average or same imputation) the hook
 * runs its own units in place and each packed block as one head or
 * hidden-units call and one row-parallel linear.
 *
 * The bf16 hooks (htp_rt_attention_bf16, htp_rt_mlp_bf16) run the same
 * bodies with the kernel table's bf16 unit kernels: shards, packed blocks
 * and the compact activations hold elements of the block's dtype (the
 * shape's elem bytes), so bf16 units prune, migrate and run compact alike;
 * the scores read bf16 activations widened, and the imputer, which keeps
 * f32 values, gets them widened and gives them back rounded once.
 *
 * In training, htp-grad writes the adjoint of a hooked attention or MLP pair
 * as a call of htp_rt_attention_grad_f32 / htp_rt_mlp_grad_f32, which
 * follows the plan the forward hook of the same pair ran under:
 *   - kept units are differentiated together: their weights are gathered
 *     into a compact shard (the layout of the packed blocks), the
 *     kernel table's backward runs on it, and its weight gradient is
 *     scattered back; a rank that keeps every unit runs on its own shard;
 *   - pruned units get no weight gradient, and their part of dx is imputed
 *     as their activation was: zero (nothing), average (the kept units'
 *     mean part: dx scaled by units / kept), same (the part stored the last
 *     time the unit was computed, while config.same_max_age allows: its
 *     gradient at its first matrix's output (d(pre-activation), dq/dk/dv),
 *     projected through its current first-matrix rows, as the forward
 *     projects a stored activation);
 *   - migrated-in units: the helper differentiates them with its kept units
 *     as one compact shard (after its kept units under same), so their part
 *     of dx is in its dx (the block's all-reduce then sums it as the owner's
 *     would have been), and returns each unit's weight gradient to its owner
 *     at the end of the hook, one message per flow, in the plan's flow
 *     order (every rank walks the same list, so blocking sends cannot
 *     deadlock, as in migrate.c); the owner writes it into its gradient.
 * So migration is exact in training too, at the price of moving each
 * migrated unit's weights twice per step (its weight gradient back here,
 * and its updated weights out again: htp_balancer_weights_updated). The
 * alternative, handing the helper the unit's optimizer state and moving
 * weights back only at plan changes, would halve that traffic but split a
 * parameter's optimizer across ranks; at these unit sizes the per-step
 * traffic is small next to the block's all-reduces.
 *
 * Unit scores (importance, variation, displacement): unit_scores.c.
 *
 * On a device the shards are its memory: the backward hooks gather and
 * scatter units with the table's 2-D copies (unit_shard.c's movers), a
 * helper copies its in-units' gradients down in one piece to send them and
 * an owner uploads what it receives, and the hook is timed on the device's
 * clock. The same imputation and average's scaling read dx and stored
 * gradients with host loops: CPU only (the config check refuses them on a
 * device, as it refuses the priority selections).
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"
#include "runtime/profile.h"
#include "runtime/htp_ops.h"

#include "kernels/htp_kernel_table.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define TAG_GRADIENTS 0x4F00 /* + kind: migrated units' weight gradients, helper to owner */

/* Shards (balance_internal.h) under short names. */
typedef htp__shard shard;
typedef htp__unit_shape unit_shape;

/* ===== One hook call =================================================== */

/* One forward hook call, as both forward hooks describe it to their body
 * (run_pair). */
typedef struct pair_call {
  htp_pair_kind kind;
  int32_t pair;
  /* The tensors, of the block's dtype: float, or htp_bf16 where bf16 is set
   * (a bf16 call runs run_all_units or run_in_place without imputation or
   * in-units: the paths that dispatch on it). */
  int bf16;
  const char *hook;      /* the hook's name, for messages */
  const void *x;
  const void *first;     /* wqkv / w1: [parts * units * width, d] */
  const void *bias;      /* bqkv / b1 (may be NULL) */
  const void *second;    /* wproj / w2: [d, units * width] */
  void *y;               /* [rows, d] partial sum */
  void *act;             /* [rows, units * width]: this rank's units' activations */
  float *migrated;       /* [rows, width]: one migrated unit's (one_by_one, f32) */
  float *kernel_scratch; /* the head kernel's own scratch (attention; f32 in both) */
  int64_t batch, tokens, rows, model_dim;
  int64_t units, width;  /* this rank's share: units of width columns */
  int32_t tanh_approx;   /* MLP: GELU's tanh approximation */
  const htp_kernel_table *kernels; /* the context's table (ops.c) and its environment */
  const htp_kernel_env *env;
} pair_call;

/* One backward hook call, as both backward hooks describe it to theirs
 * (run_pair_backward): the same pair, with dy in and dx and the weight
 * gradient out. */
typedef struct grad_call {
  htp_pair_kind kind;
  int32_t pair;
  const char *hook;
  const float *x, *dy;   /* [rows, d] each */
  shard w;               /* the rank's weights (read only) */
  float *dx;             /* [rows, d], written */
  shard dw;              /* the rank's weight gradient, written (bias NULL: none) */
  unit_shape shape;
  int64_t batch, tokens, rows, d, units, width;
  int32_t tanh_approx;
  /* scratch (kernels/htp_scratch.h's order): */
  float *compact_w, *compact_dw; /* units' floats each */
  float *part;                   /* [rows, d] */
  float *kernel_scratch;         /* attention: the backward kernel's; MLP: pre, act, dact */
  int64_t kernel_scratch_floats;
  const htp_kernel_table *kernels;
  const htp_kernel_env *env;
  htp__unit_mover memory; /* where the shards are (run_pair_backward sets it) */
} grad_call;

/* ===== What differs between a head and an MLP unit ===================== */

/* out[:, unit columns] = activation of the listed units of a block of
 * `units` units whose weights are first / bias; list NULL: every unit. */
typedef htp_kernel_status (*activate_fn)(const pair_call *call, const void *first,
                                         const void *bias, int64_t units, const int32_t *list,
                                         int64_t count, void *out);

/* What differs between the kinds in forward (in backward: shard_backward). */
typedef struct pair_ops {
  const char *unit;      /* what a unit is called, for messages */
  activate_fn activate;
} pair_ops;

/* The listed heads of the table's kernel for the call's dtype. */
static htp_kernel_status heads(const pair_call *c, const void *wqkv, const void *bqkv,
                               int64_t count_heads, const int32_t *list, int64_t count,
                               void *out) {
  return c->bf16 ? c->kernels->attention_heads_bf16(c->env, c->x, wqkv, bqkv, out,
                                                    c->kernel_scratch, c->batch, c->tokens,
                                                    c->model_dim, count_heads, c->width, list,
                                                    count)
                 : c->kernels->attention_heads_f32(c->env, c->x, wqkv, bqkv, out,
                                                   c->kernel_scratch, c->batch, c->tokens,
                                                   c->model_dim, count_heads, c->width, list,
                                                   count);
}

/* list NULL: every head, as one list (a device runs the whole attention's
 * context for it: kernels/cuda/units.cu). */
static htp_kernel_status attention_activate(const pair_call *c, const void *wqkv,
                                            const void *bqkv, int64_t units,
                                            const int32_t *list, int64_t count, void *out) {
  if (list) return heads(c, wqkv, bqkv, units, list, count, out);
  int32_t on_stack[256]; /* no allocation per call for any usual head count */
  int32_t *every = units <= 256 ? on_stack : malloc((size_t)units * sizeof *every);
  if (!every) return HTP_KERNEL_ERR_NOMEM;
  for (int32_t h = 0; h < units; ++h) every[h] = h;
  htp_kernel_status status = heads(c, wqkv, bqkv, units, every, units, out);
  if (every != on_stack) free(every);
  return status;
}

static htp_kernel_status mlp_activate(const pair_call *c, const void *w1, const void *b1,
                                      int64_t units, const int32_t *list, int64_t count,
                                      void *out) {
  const int64_t hidden = units * c->width;
  const int32_t everything = 0; /* every neuron as one unit: one GEMM */
  const int64_t width = list ? c->width : hidden;
  if (!list) list = &everything, count = 1;
  return c->bf16 ? c->kernels->mlp_hidden_units_bf16(c->env, c->x, w1, b1, out, c->rows,
                                                     c->model_dim, hidden, width, list, count,
                                                     c->tanh_approx)
                 : c->kernels->mlp_hidden_units_f32(c->env, c->x, w1, b1, out, c->rows,
                                                    c->model_dim, hidden, width, list, count,
                                                    c->tanh_approx);
}

/* y (+)= act's listed units (of `width` columns, of a row of `inner`) times
 * second's columns: the table's row-parallel linear for the call's dtype. */
static htp_kernel_status project(const pair_call *c, const void *act, const void *second,
                                 int64_t inner, int64_t width, const int32_t *list,
                                 int64_t count, int32_t accumulate) {
  return c->bf16 ? c->kernels->linear_units_bf16(c->env, act, second, c->y, c->rows, inner,
                                                 c->model_dim, width, list, count, accumulate)
                 : c->kernels->linear_units_f32(c->env, act, second, c->y, c->rows, inner,
                                                c->model_dim, width, list, count, accumulate);
}

/* y (+)= act's first `inner` columns, as one block, times second's: a rank
 * left with no unit (all pruned or handed away) projects an empty list of
 * units of its own width (the kernels take a unit width >= 1), y zeroed or,
 * accumulating, left as it is. */
static htp_kernel_status project_block(const pair_call *c, const void *act, const void *second,
                                       int64_t inner, int32_t accumulate) {
  const int32_t zero = 0;
  return inner > 0 ? project(c, act, second, inner, inner, &zero, 1, accumulate)
                   : project(c, act, second, 0, c->width, &zero, 0, accumulate);
}

static const pair_ops PAIR_OPS[HTP_PAIR_KINDS] = {
    [HTP_PAIR_ATTENTION] = {"head", attention_activate},
    [HTP_PAIR_MLP] = {"MLP unit", mlp_activate},
};

/* The MLP's backward as far as its hidden layer: x · fc1ᵀ + b and GELU
 * recomputed, fc2's gradient added into dw, and d(pre-activation)
 * [rows, w->units * width] left in the scratch, at *dpre. The scratch's
 * first rows * units * width floats (pre) are free again after it. */
static htp_kernel_status mlp_backward_to_hidden(const grad_call *c, const shard *w,
                                                const shard *dw, float **dpre) {
  const htp_kernel_table *k = c->kernels;
  const int64_t hidden = w->units * c->width, n = c->rows * hidden;
  float *pre = c->kernel_scratch, *act = pre + c->rows * c->units * c->width;
  float *dact = act + c->rows * c->units * c->width;
  *dpre = dact;
  htp_kernel_status s = k->linear_f32(c->env, c->x, w->first, w->bias, pre, c->rows, c->d, hidden);
  if (s == HTP_KERNEL_OK) s = k->gelu_f32(c->env, pre, act, n, c->tanh_approx);
  /* fc2 [d, hidden]: d(act) = dy · fc2, d(fc2) += dyᵀ · act. */
  if (s == HTP_KERNEL_OK)
    s = k->linear_backward_f32(c->env, act, w->second, c->dy, dact, dw->second, NULL, c->rows,
                               hidden, c->d);
  if (s == HTP_KERNEL_OK) s = k->gelu_backward_f32(c->env, pre, dact, dact, n, c->tanh_approx);
  return s;
}

/* dx (written) and dw (accumulated) of the `w->units` units of shard w.
 * With g non-NULL, *g is the gradient at the first matrix's output, left
 * in the scratch: [rows, parts * w->units * width], unit i's columns at
 * p * w->units * width + i * width for each part p (MLP: d(pre-activation);
 * attention: dqkv, where the CPU kernel leaves it). Only the same
 * imputation asks for g, on the CPU only. */
static htp_kernel_status shard_backward(const grad_call *c, const shard *w, float *dx,
                                        const shard *dw, const float **g) {
  const htp_kernel_table *k = c->kernels;
  if (c->kind == HTP_PAIR_ATTENTION) {
    if (g)
      *g = c->kernel_scratch + htp_cpu_attention_backward_dqkv_at(c->rows, w->units * c->width);
    return k->attention_backward_f32(c->env, c->x, w->first, w->bias, w->second, NULL, c->dy, dx,
                                     dw->first, dw->bias, dw->second, NULL, c->kernel_scratch,
                                     c->kernel_scratch_floats, c->batch, c->tokens, c->d,
                                     w->units, c->width);
  }
  float *dpre;
  htp_kernel_status s = mlp_backward_to_hidden(c, w, dw, &dpre);
  if (g) *g = dpre;
  if (s == HTP_KERNEL_OK)
    s = k->linear_backward_f32(c->env, c->x, w->first, dpre, dx, dw->first, dw->bias, c->rows,
                               c->d, w->units * c->width);
  return s;
}

/* ===== Checks ========================================================== */

/* A hook's pair and shapes against the balancer's config (HTP__INVALID_IF's
 * error otherwise). */
static htp_result check_pair(htp_ctx *ctx, const htp_balancer *b, htp_pair_kind kind,
                             int32_t pair, int64_t units, int64_t width, int64_t model_dim,
                             const char *hook) {
  const htp_balancer_config *c = &b->config;
  const int config_units = c->planner.units_per_rank[kind];
  const char *unit = kind == HTP_PAIR_ATTENTION ? "head" : "MLP unit";
  HTP__INVALID_IF(ctx, pair < 0 || pair >= b->num_pairs,
                  "%s: pair %d is out of range [0, %d) (2 * layers of the balancer's config)", hook,
                  (int)pair, b->num_pairs);
  HTP__INVALID_IF(ctx, htp_pair_kind_of(pair) != kind,
                  "%s: pair %d is %s pair (pairs of this hook are %s)", hook, (int)pair,
                  kind == HTP_PAIR_ATTENTION ? "an MLP" : "an attention",
                  kind == HTP_PAIR_ATTENTION ? "even" : "odd");
  HTP__INVALID_IF(
      ctx, units != config_units || width != htp__unit_width(c, kind) || model_dim != c->model_dim,
      "%s: pair %d: %lld %ss of width %lld, model_dim %lld disagree with the "
      "balancer's %d of %lld, %lld",
      hook, (int)pair, (long long)units, unit, (long long)width, (long long)model_dim, config_units,
      (long long)htp__unit_width(c, kind), (long long)c->model_dim);
  return HTP_OK;
}

/* The checks both backward hooks share, after which c is complete but for
 * its scratch layout. */
static htp_result check_grad_call(htp_ctx *ctx, const grad_call *c) {
  HTP__INVALID_IF(ctx,
                  !c->x || !c->w.first || !c->w.second || !c->dy || !c->dx || !c->dw.first ||
                      !c->dw.second || !c->compact_w,
                  "%s: pair %d: x, a weight, dy, dx, a weight gradient or scratch is NULL", c->hook,
                  (int)c->pair);
  HTP__INVALID_IF(ctx, c->tanh_approx != 0 && c->tanh_approx != 1,
                  "%s: pair %d: tanh_approx %d must be 0 or 1", c->hook, (int)c->pair,
                  (int)c->tanh_approx);
  HTP__INVALID_IF(ctx, (c->w.bias == NULL) != (c->dw.bias == NULL),
                  "%s: pair %d: a bias gradient is wanted exactly when there is a bias", c->hook,
                  (int)c->pair);
  HTP__INVALID_IF(ctx, c->batch < 1 || c->tokens < 1 || c->d < 1 || c->units < 1 || c->width < 1,
                  "%s: pair %d: batch %lld, tokens %lld, model_dim %lld, units %lld, width %lld "
                  "must all be >= 1",
                  c->hook, (int)c->pair, (long long)c->batch, (long long)c->tokens, (long long)c->d,
                  (long long)c->units, (long long)c->width);
  HTP__INVALID_IF(ctx,
                  c->batch > INT_MAX / c->tokens || c->d > INT_MAX ||
                      c->units > INT_MAX / c->shape.parts / c->width,
                  "%s: pair %d: a dimension exceeds BLAS's int range", c->hook, (int)c->pair);
  return HTP_OK;
}

/* ===== Forward: run_pair =============================================== */

/* Whether the context's kernels run on a device: the hook computes its own
 * units in place and times itself on the device's clock
 * (htp__balancer_end_site says why). */
static int on_device(const pair_call *call) {
  return call->kernels->device != HTP_KERNEL_DEVICE_CPU;
}

/* Ends a forward hook's timing: the units it ran are its kept and
 * migrated-in ones. */
static htp_result finish_site(htp_ctx *ctx, htp_balancer *b, const pair_call *call,
                              const htp_unit_sets *s, double started) {
  return htp__balancer_end_site(ctx, b, call->kind, on_device(call),
                                (double)(s->num_kept + s->num_in), started);
}

/* kept plus pruned units in ascending order (both lists are ascending). */
static int merge_units(const htp_unit_sets *s, int32_t *out) {
  int i = 0, j = 0, n = 0;
  while (i < s->num_kept || j < s->num_pruned) {
    if (j == s->num_pruned || (i < s->num_kept && s->kept[i] < s->pruned[j])) out[n++] = s->kept[i++];
    else out[n++] = s->pruned[j++];
  }
  return n;
}

/* Adds the migrated-in units' contributions to call->y from the packed
 * blocks: per block of n units, one activation call over all n (unit list
 * 0 .. n-1 of an n-unit shard) into call->act, which the rank's own units
 * no longer need once projected and which holds n <= units_per_rank units'
 * columns, then one row-parallel linear over the n units (one GEMM). */
static htp_kernel_status add_in_units_packed(const htp_balancer *b, const pair_call *call) {
  const htp__packed_pair *pk = &b->packed[call->pair];
  const htp__unit_shape u = {htp__unit_parts(call->kind), call->width, call->model_dim,
                             htp__element_bytes(&b->config)};
  const int64_t per_unit = htp__unit_floats(&b->config, call->kind);
  /* the device's copy on a device */
  unsigned char *block = pk->device ? (unsigned char *)pk->device : pk->data;
  htp_kernel_status status = HTP_KERNEL_OK;
  for (int i0 = 0; i0 < pk->count && status == HTP_KERNEL_OK; i0 += (int)call->units) {
    const int64_t n = pk->count - i0 < call->units ? pk->count - i0 : call->units;
    const int64_t inner = n * call->width;
    const htp__shard packed = htp__shard_at(block, n, &u);
    status = PAIR_OPS[call->kind].activate(call, packed.first, packed.bias, n, b->iota, n,
                                           call->act);
    if (status == HTP_KERNEL_OK) /* the n units' columns are contiguous: one block of inner */
      status = project_block(call, call->act, packed.second, inner, 1);
    block += n * per_unit * u.elem;
  }
  return status;
}

/* The same from the cached one-unit shards, one unit at a time (tests:
 * htp__balancer_set_one_by_one). */
static htp_kernel_status add_in_units_one_by_one(const htp_balancer *b, const pair_call *call,
                                                 const htp_unit_sets *s) {
  const htp__unit_shape u = {htp__unit_parts(call->kind), call->width, call->model_dim,
                             htp__element_bytes(&b->config)};
  const int32_t zero = 0;
  htp_kernel_status status = HTP_KERNEL_OK;
  if (on_device(call)) return HTP_KERNEL_ERR_UNSUPPORTED; /* the cached shards are host memory */
  for (int i = 0; i < s->num_in && status == HTP_KERNEL_OK; ++i) {
    const void *cached = htp_migration_weights(b->migration, call->pair, s->in_src[i],
                                               s->in_unit[i]);
    if (!cached) return HTP_KERNEL_ERR_INVALID; /* packing found them all at the apply */
    const htp__shard one = htp__shard_at((void *)cached, 1, &u);
    status = PAIR_OPS[call->kind].activate(call, one.first, one.bias, 1, &zero, 1, call->migrated);
    if (status == HTP_KERNEL_OK)
      status = project_block(call, call->migrated, one.second, call->width, 1);
  }
  return status;
}

/* The kept and migrated-in units as one compact shard (htp__shard) in
 * balancer memory: the kept units' weights gathered, the packed in-units'
 * copied after them, one activation call over all of them and one
 * row-parallel GEMM. A straggler whose kept units are scattered (pruning
 * picks units by score, not position) would otherwise run one GEMM per run
 * of consecutive units, each reading and writing all of y, and a helper
 * one more activation and GEMM per packed block: at small units those
 * fixed costs outweigh the units' own work, so shedding units saved little
 * and a helper's first migrated unit cost it a third more. Copying the
 * weights costs a fraction 1 / rows of the GEMMs. On a device the gather
 * is the table's 2-D copies (htp__balancer_compact_weights): on an H200 a
 * helper's head computed as a separate block cost it ~0.7 ms more than an
 * owned one (bench/RESULTS.md). Only where no pruned unit is imputed
 * (zero, or same with no recent value: average and same project imputed
 * columns of the rank's own layout). */
static htp_kernel_status compute_compact(htp_balancer *b, const pair_call *call,
                                         const htp_unit_sets *s) {
  const htp__unit_shape u = {htp__unit_parts(call->kind), call->width, call->model_dim,
                             htp__element_bytes(&b->config)};
  const int64_t total = s->num_kept + b->packed[call->pair].count, inner = total * call->width;
  const htp__shard mine = {(void *)call->first, (void *)call->bias, (void *)call->second,
                           call->units};
  htp__shard w;
  if (htp__balancer_compact_weights(b, call->pair, &mine, s->kept, s->num_kept, &u, &w) ||
      htp__balancer_reserve(b, &b->compact_scratch, &b->compact_scratch_capacity,
                            htp_balancer_activation_words(call->rows, total, call->width, u.elem)))
    return HTP_KERNEL_ERR_NOMEM;
  void *act = b->compact_scratch; /* activations of the block's dtype */
  htp_kernel_status status = HTP_KERNEL_OK;
  if (total > 0)
    status = PAIR_OPS[call->kind].activate(call, w.first, w.bias, total, NULL, 0, act);
  if (status != HTP_KERNEL_OK) return status;
  htp__scores_observe(b, call->pair, s, act, call->rows, call->width, inner, 1);
  return project_block(call, act, w.second, inner, 0);
}

/* The body both forward hooks share, after each checked its own arguments:
 * the plain split block without a (hooked) balancer; otherwise check the
 * pair and shapes against the balancer, register the weights, compute the
 * kept units, score them, impute the pruned ones, project, add the
 * migrated-in units from their packed blocks, and book the time (slowdown
 * included). */
/* The plain split block (no balancer, a hookless one, or suspended):
 * every unit. */
static htp_result run_all_units(htp_ctx *ctx, const pair_call *call) {
  const pair_ops *ops = &PAIR_OPS[call->kind];
  const int64_t inner = call->units * call->width;
  htp_kernel_status status =
      ops->activate(call, call->first, call->bias, call->units, NULL, 0, call->act);
  if (status == HTP_KERNEL_OK)
    status = project_block(call, call->act, call->second, inner, 0);
  return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, call->hook);
}

/* The call checked against the pair's registration, its weights noted (the
 * migration packs from them), and the unit sets the plan gives it. */
static htp_result register_call(htp_ctx *ctx, htp_balancer *b, const pair_call *call,
                                htp_unit_sets *s) {
  const pair_ops *ops = &PAIR_OPS[call->kind];
  const int32_t pair = call->pair;
  htp_result checked = check_pair(ctx, b, call->kind, pair, call->units, call->width,
                                  call->model_dim, call->hook);
  if (checked != HTP_OK) return checked;
  htp__registered_pair *w = &b->pairs[pair];
  w->first = call->first;
  w->bias = call->bias;
  w->second = call->second;
  w->seen = 1;
  if (b->norm && w->normed != call->second)
    htp__scores_norms(b, call->pair, call->second, call->units, call->width, call->model_dim);
  if (htp_unit_table_get(b->table, pair, s) != HTP_OK)
    return htp__fail(ctx, HTP_ERR_INTERNAL, "%s: no unit sets for pair %d", call->hook, (int)pair);
  HTP__INVALID_IF(ctx, b->packed[pair].count != s->num_in,
                  "%s: pair %d: %d migrated-in %ss packed, the unit table has %d", call->hook,
                  (int)pair, b->packed[pair].count, ops->unit, s->num_in);
  return HTP_OK;
}

/* The pruned units given a value: all of them (average), those with a
 * recent stored value (same), none (zero). */
static htp_unit_sets imputed_units(htp_balancer *b, int32_t pair, const htp_unit_sets *s) {
  const htp_balancer_config *c = &b->config;
  htp_unit_sets imputed = *s;
  if (c->impute == HTP_IMPUTE_ZERO) imputed.num_pruned = 0;
  if (c->impute == HTP_IMPUTE_SAME) {
    imputed.num_pruned = 0;
    imputed.pruned = b->imputed;
    for (int i = 0; i < s->num_pruned; ++i)
      if (htp_same_usable(htp_imputer_stored_at(b->imputer, pair, s->pruned[i]), b->steps,
                          c->same_max_age))
        b->imputed[imputed.num_pruned++] = s->pruned[i];
  }
  return imputed;
}

/* The imputer (unit_table.c) keeps f32 values: the n elements of act as
 * floats, act itself in an f32 block, else widened into b->act_f32 (the
 * same and average imputations run on the host: the CPU). NULL: no memory. */
static float *imputer_view(htp_balancer *b, const pair_call *call, void *act, int64_t n) {
  if (!call->bf16) return act;
  if (htp__reserve_floats(&b->act_f32, &b->act_f32_capacity, (size_t)n)) return NULL;
  htp_bf16_to_f32_n(act, b->act_f32, n);
  return b->act_f32;
}

/* The compact path: kept and migrated-in units as one shard (the CPU,
 * zero imputation, or same imputation that has nothing to fill). */
static htp_result run_compact(htp_ctx *ctx, htp_balancer *b, const pair_call *call,
                              const htp_unit_sets *s, double started) {
  if (on_device(call)) { /* the device's clock starts with the hook's first kernel */
    htp_result r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 0);
    if (r != HTP_OK) return r;
  }
  htp_kernel_status status = compute_compact(b, call, s);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, call->hook);
  /* The kept units' activations lead the compact ones; a rank that keeps
   * none (all pruned or handed off) has nothing to store. */
  if (b->config.impute == HTP_IMPUTE_SAME && s->num_kept > 0) {
    const int64_t inner = (s->num_kept + s->num_in) * call->width;
    const float *kept = imputer_view(b, call, b->compact_scratch, call->rows * inner);
    htp_result r = kept ? htp_imputer_store_listed(b->imputer, call->pair, kept,
                                                   (size_t)call->rows, (size_t)inner, s->units,
                                                   (size_t)call->width, s->kept, s->num_kept,
                                                   b->steps)
                        : HTP_ERR_NOMEM;
    if (r != HTP_OK)
      return htp__fail(ctx, r, "%s: pair %d: imputation failed", call->hook, (int)call->pair);
  }
  return finish_site(ctx, b, call, s, started);
}

/* The in-place path (a device, average or same imputation): the kept
 * units' activations where the whole block would put them, the pruned
 * ones imputed, the listed ones projected, then the migrated-in units. */
static htp_result run_in_place(htp_ctx *ctx, htp_balancer *b, const pair_call *call,
                               const htp_unit_sets *s, const htp_unit_sets *imputed,
                               double started) {
  const pair_ops *ops = &PAIR_OPS[call->kind];
  const htp_balancer_config *c = &b->config;
  const int64_t inner = call->units * call->width;
  if (on_device(call)) { /* the device's clock starts with the hook's first kernel */
    htp_result r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 0);
    if (r != HTP_OK) return r;
  }
  htp_kernel_status status = ops->activate(call, call->first, call->bias, call->units, s->kept,
                                           s->num_kept, call->act);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, call->hook);
  htp__scores_observe(b, call->pair, s, call->act, call->rows, call->width,
                      call->units * call->width, 0);
  const int32_t *projected = s->kept;
  int num_projected = s->num_kept;
  if (c->impute != HTP_IMPUTE_ZERO) {
    float *act = imputer_view(b, call, call->act, call->rows * inner);
    htp_result r = act ? HTP_OK : HTP_ERR_NOMEM;
    if (r == HTP_OK && c->impute == HTP_IMPUTE_SAME)
      r = htp_imputer_store(b->imputer, call->pair, act, (size_t)call->rows, (size_t)inner,
                            s->units, (size_t)call->width, s, b->steps);
    if (r == HTP_OK)
      r = htp_impute_fill(b->imputer, call->pair, c->impute, act, (size_t)call->rows,
                          (size_t)inner, s->units, (size_t)call->width, imputed, b->steps,
                          c->same_max_age);
    /* bf16: the filled values back, rounded once (the kept ones unchanged) */
    if (r == HTP_OK && call->bf16) htp_bf16_from_f32_n(act, call->act, call->rows * inner);
    if (r != HTP_OK)
      return htp__fail(ctx, r, "%s: pair %d: imputation failed", call->hook, (int)call->pair);
    num_projected = merge_units(imputed, b->listed);
    projected = b->listed;
  }
  status = project(call, call->act, call->second, inner, call->width, projected, num_projected, 0);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, call->hook);
  /* Migrated-in units: packed blocks (or one at a time, tests). The apply
   * packed exactly the table's in-units, each cached here. */
  status = b->one_by_one ? add_in_units_one_by_one(b, call, s) : add_in_units_packed(b, call);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, call->hook);
  return finish_site(ctx, b, call, s, started);
}

static htp_result run_pair(htp_ctx *ctx, const pair_call *call, double started) {
  htp_balancer *b = ctx ? ctx->balancer : NULL;
  if (!b || b->hookless || b->suspended) return run_all_units(ctx, call);
  HTP__INVALID_IF(ctx, (htp__element_bytes(&b->config) == 2) != call->bf16,
                  "%s: pair %d: a %s call, but the balancer is configured for %s units "
                  "(htp_balancer_config.element_bytes %d)",
                  call->hook, (int)call->pair, call->bf16 ? "bf16" : "f32",
                  call->bf16 ? "f32" : "bf16", (int)htp__element_bytes(&b->config));
  htp_unit_sets s;
  htp_result r = register_call(ctx, b, call, &s);
  if (r != HTP_OK) return r;
  const htp_unit_sets imputed = imputed_units(b, call->pair, &s);
  if (!b->one_by_one && imputed.num_pruned == 0 && (s.num_kept < call->units || s.num_in > 0))
    return run_compact(ctx, b, call, &s, started);
  return run_in_place(ctx, b, call, &s, &imputed, started);
}

/* ===== Backward: run_pair_backward ===================================== */

static void add_into(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

/* Every unit, on the rank's own shard: without a balancer, or a plan that
 * keeps them all. The gradients are zeroed through the table (device
 * memory on a device). */
static htp_kernel_status backward_all(const grad_call *c) {
  const htp_kernel_table *k = c->kernels;
  const unit_shape *u = &c->shape;
  const int64_t rows = u->parts * c->units * u->width;
  htp_kernel_status s = k->zero(c->env, c->dw.first, (size_t)(rows * u->d) * sizeof(float));
  if (s == HTP_KERNEL_OK && c->dw.bias) s = k->zero(c->env, c->dw.bias, (size_t)rows * sizeof(float));
  if (s == HTP_KERNEL_OK)
    s = k->zero(c->env, c->dw.second, (size_t)(u->d * c->units * u->width) * sizeof(float));
  return s == HTP_KERNEL_OK ? shard_backward(c, &c->w, c->dx, &c->dw, NULL) : s;
}

/* The listed units compacted: dx (written) and their weight gradients
 * scattered into c->dw; g as shard_backward's (the compact units' order). */
static htp_kernel_status backward_listed(const grad_call *c, const int32_t *list, int64_t count,
                                         float *dx, const float **g) {
  const shard w = htp__shard_at(c->compact_w, count, &c->shape);
  const shard dw = htp__shard_at(c->compact_dw, count, &c->shape);
  htp_kernel_status s = htp__gather_units_on(&c->memory, &c->w, list, count, &w, 0, &c->shape);
  if (s == HTP_KERNEL_OK) s = htp__zero_shard_on(&c->memory, &dw, &c->shape);
  if (s == HTP_KERNEL_OK) s = shard_backward(c, &w, dx, &dw, g);
  if (s == HTP_KERNEL_OK) s = htp__scatter_units_on(&c->memory, &dw, 0, list, count, &c->dw,
                                                    &c->shape);
  return s;
}

/* HTP_IMPUTE_SAME. What a unit stores is its gradient at its first
 * matrix's output (MLP: d(pre-activation) [rows, width]; a head: its dq,
 * dk, dv [rows, 3 * width]): the backward's counterpart of the activation
 * the forward stores. The kept units run as one compact backward, as under
 * zero, and leave theirs; a pruned unit with a value config.same_max_age
 * allows adds that value through its current first-matrix rows to dx, as
 * the forward projects a stored activation through its second matrix.
 * stored is laid out as g is when every unit is kept: [rows][parts][units
 * * width], so a run of kept units is one copy per row and part. */
static htp_result backward_same(htp_ctx *ctx, htp_balancer *b, const grad_call *c,
                                const htp_unit_sets *s) {
  const htp_kernel_table *k = c->kernels;
  const int64_t parts = c->shape.parts, width = c->width, cols = parts * width;
  const int64_t row_floats = parts * c->units * width; /* a row of stored */
  const size_t need = (size_t)(c->rows * row_floats);
  int64_t *stored_at = b->same_stored_at + (size_t)c->pair * (size_t)b->max_units;
  if (b->same_floats[c->pair] != need) {
    free(b->same_part[c->pair]);
    b->same_part[c->pair] = malloc(need * sizeof(float));
    b->same_floats[c->pair] = b->same_part[c->pair] ? need : 0;
    for (int i = 0; i < b->max_units; ++i) stored_at[i] = -1;
    if (!b->same_part[c->pair])
      return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory for the same imputation",
                       c->hook, (int)c->pair);
  }
  float *stored = b->same_part[c->pair];
  htp_kernel_status status = HTP_KERNEL_OK;
  if (s->num_kept == 0) memset(c->dx, 0, (size_t)(c->rows * c->d) * sizeof(float));
  if (s->num_kept > 0) {
    const float *g;
    status = s->num_kept == c->units ? shard_backward(c, &c->w, c->dx, &c->dw, &g)
                                     : backward_listed(c, s->kept, s->num_kept, c->dx, &g);
    if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
    const int64_t inner = s->num_kept * width;
    for (int64_t r = 0; r < c->rows; ++r)
      for (int64_t p = 0; p < parts; ++p)
        for (int i = 0, n; i < s->num_kept; i += n) {
          n = htp_unit_run(s->kept, i, s->num_kept);
          memcpy(stored + r * row_floats + p * c->units * width + s->kept[i] * width,
                 g + r * parts * inner + p * inner + i * width,
                 (size_t)(n * width) * sizeof(float));
        }
    for (int i = 0; i < s->num_kept; ++i) stored_at[s->kept[i]] = b->steps;
  }
  for (int i = 0; status == HTP_KERNEL_OK && i < s->num_pruned; ++i) {
    const int32_t unit = s->pruned[i];
    if (!htp_same_usable(stored_at[unit], b->steps, b->config.same_max_age)) continue;
    /* Its first-matrix rows [parts * width, d] into compact_w (free now),
     * its stored values [rows, parts * width] into unit_staging. */
    float *rows_of_unit = c->compact_w;
    if (htp__reserve_floats(&b->unit_staging, &b->unit_staging_capacity,
                            (size_t)(c->rows * cols)))
      return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory", c->hook, (int)c->pair);
    for (int64_t p = 0; p < parts; ++p)
      memcpy(rows_of_unit + p * width * c->d,
             (const float *)c->w.first + (p * c->units + unit) * width * c->d,
             (size_t)(width * c->d) * sizeof(float));
    for (int64_t r = 0; r < c->rows; ++r)
      for (int64_t p = 0; p < parts; ++p)
        memcpy(b->unit_staging + r * cols + p * width,
               stored + r * row_floats + p * c->units * width + unit * width,
               (size_t)width * sizeof(float));
    status = k->linear_backward_f32(c->env, NULL, rows_of_unit, b->unit_staging, c->part, NULL,
                                    NULL, c->rows, c->d, cols);
    if (status == HTP_KERNEL_OK) add_into(c->dx, c->part, c->rows * c->d);
  }
  return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, c->hook);
}

/* The migrated-in units, after the kept ones unless `kept` is 0, as one
 * compact shard in balancer-owned memory (it may hold more units than the
 * hook's scratch): one backward for all of them, so a helper pays a block's
 * fixed costs (dx, its all-reduce input) once, not once more per packed
 * block. dx is written (kept) or added to (not kept: `same` did the kept
 * units), the kept units' gradients go into c->dw, the in-units' into
 * b->grad_out (host memory: they travel), one-unit shards in in-list order.
 * A helper prunes nothing (a rank that receives has action help), so no
 * imputation enters here. */
static htp_result backward_with_in_units(htp_ctx *ctx, htp_balancer *b, const grad_call *c,
                                         const htp_unit_sets *s, int kept) {
  const htp__packed_pair *pk = &b->packed[c->pair];
  const int64_t own = kept ? s->num_kept : 0, total = own + pk->count;
  const int64_t per_unit = htp__unit_floats(&b->config, c->kind);
  const size_t out_floats = (size_t)pk->count * (size_t)per_unit;
  const int device = c->memory.table != NULL;
  grad_call all = *c;
  all.units = total;
  all.kernel_scratch_floats =
      c->kind == HTP_PAIR_ATTENTION
          ? c->kernels->attention_backward_scratch_floats(c->batch, c->tokens, c->d, total,
                                                          c->width)
          : htp_mlp_compact_backward_scratch_floats(c->rows, total, c->width);
  shard w;
  if (all.kernel_scratch_floats < 0 ||
      htp__balancer_compact_weights(b, c->pair, &c->w, s->kept, own, &c->shape, &w) ||
      htp__balancer_reserve(b, &b->compact_dw, &b->compact_dw_capacity,
                            htp_balancer_shard_words(total, c->shape.parts, c->shape.width,
                                                     c->shape.d, 4)) ||
      htp__balancer_reserve(b, &b->compact_scratch, &b->compact_scratch_capacity,
                            all.kernel_scratch_floats) ||
      htp__reserve_floats(&b->grad_out, &b->grad_out_capacity, out_floats) ||
      (device && htp__balancer_reserve(b, &b->unit_device, &b->unit_device_capacity,
                                       htp_balancer_shard_words(pk->count, c->shape.parts,
                                                                c->shape.width, c->shape.d, 4))))
    return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory for %lld units' weights "
                     "and gradients", c->hook, (int)c->pair, (long long)total);
  all.kernel_scratch = b->compact_scratch;
  const shard dw = htp__shard_at(b->compact_dw, total, &c->shape);
  htp_kernel_status status = htp__zero_shard_on(&c->memory, &dw, &c->shape);
  if (status == HTP_KERNEL_OK)
    status = shard_backward(&all, &w, kept ? c->dx : c->part, &dw, NULL);
  if (status == HTP_KERNEL_OK && !kept) status = c->kernels->add_f32(c->env, c->dx, c->part, c->dx,
                                                                     c->rows * c->d);
  if (status == HTP_KERNEL_OK && kept)
    status = htp__scatter_units_on(&c->memory, &dw, 0, s->kept, own, &c->dw, &c->shape);
  /* One-unit shards back to back, where they are computed, then (a
   * device) down in one copy. */
  float *out = device ? b->unit_device : b->grad_out;
  for (int i = 0; status == HTP_KERNEL_OK && i < pk->count; ++i) {
    const shard one = htp__shard_at(out + (size_t)i * (size_t)per_unit, 1, &c->shape);
    status = htp__move_units(&c->memory, &dw, own + i, &one, 0, 1, &c->shape);
  }
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
  if (device && out_floats > 0)
    return htp_mem_download(ctx, b->grad_out, b->unit_device, out_floats * sizeof(float));
  return HTP_OK;
}

/* The gradient return: per flow of this pair's kind, in the plan's order, a
 * helper sends its in-units' gradients of that flow to the owner, which
 * writes them into its own gradient at the handed-off units. */
static htp_result return_gradients(htp_ctx *ctx, htp_balancer *b, const grad_call *c,
                                   const htp_unit_sets *s) {
  const htp_plan *plan = htp_planner_plan(b->planner);
  if (s->num_in == 0 && s->num_out == 0) return HTP_OK; /* in no flow of the applied plan */
  if (plan->version != b->applied_version)
    return htp__fail(ctx, HTP_ERR_INTERNAL, "%s: pair %d: the plan in force (version %lld) is "
                     "not the one applied (%lld)", c->hook, (int)c->pair,
                     (long long)plan->version, (long long)b->applied_version);
  const int rank = ctx->rank;
  const int64_t per_unit = htp__unit_floats(&b->config, c->kind);
  int in_index = 0;
  for (int f = 0; f < plan->num_flows[c->kind]; ++f) {
    const htp_flow *flow = &plan->flows[c->kind][f];
    const size_t floats = (size_t)flow->count * (size_t)per_unit;
    htp_result r = HTP_OK;
    if (flow->dst == rank) {
      HTP__INVALID_IF(ctx, in_index + flow->count > s->num_in || s->in_src[in_index] != flow->src,
                      "%s: pair %d: the migrated-in units do not follow the plan's flow %d",
                      c->hook, (int)c->pair, f);
      r = htp_send_host(ctx, b->grad_out + (size_t)in_index * (size_t)per_unit,
                         floats * sizeof(float), flow->src, TAG_GRADIENTS + c->kind);
      in_index += flow->count;
    } else if (flow->src == rank) {
      /* Received in host memory; on a device uploaded, then each unit put
       * in place there. */
      const int device = c->memory.table != NULL;
      if (htp__reserve_floats(&b->unit_staging, &b->unit_staging_capacity, floats) ||
          (device && htp__balancer_reserve(b, &b->unit_device, &b->unit_device_capacity,
                                           htp_balancer_shard_words(flow->count, c->shape.parts,
                                                                    c->shape.width, c->shape.d,
                                                                    4))))
        return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory", c->hook, (int)c->pair);
      r = htp_recv_host(ctx, b->unit_staging, floats * sizeof(float), flow->dst,
                   TAG_GRADIENTS + c->kind);
      if (r == HTP_OK && device)
        r = htp_mem_upload(ctx, b->unit_device, b->unit_staging, floats * sizeof(float));
      float *staged = device ? b->unit_device : b->unit_staging;
      int at = 0;
      for (int i = 0; r == HTP_OK && i < s->num_out; ++i) {
        if (s->out_dst[i] != flow->dst) continue;
        HTP__INVALID_IF(ctx, at == flow->count,
                        "%s: pair %d: more units handed to rank %d than "
                        "its flow carries",
                        c->hook, (int)c->pair, flow->dst);
        const shard one = htp__shard_at(staged + (size_t)at++ * (size_t)per_unit, 1, &c->shape);
        htp_kernel_status status =
            htp__move_units(&c->memory, &one, 0, &c->dw, s->out_unit[i], 1, &c->shape);
        if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
      }
    }
    if (r != HTP_OK) return r;
  }
  return HTP_OK;
}

/* The body both backward hooks share, after each checked its own arguments
 * (check_grad_call): every unit without a (hooked) balancer; otherwise check
 * the pair and shapes against the balancer, differentiate the kept and
 * migrated-in units, impute the pruned ones' part of dx, book the time
 * (backward counts twice) and return the in-units' weight gradients to
 * their owners. */
static htp_result run_pair_backward(htp_ctx *ctx, grad_call *c, double started) {
  htp_balancer *b = ctx ? ctx->balancer : NULL;
  htp_kernel_status status;
  if (!b || b->hookless || b->suspended) {
    status = backward_all(c);
    return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, c->hook);
  }
  htp_result r = check_pair(ctx, b, c->kind, c->pair, c->units, c->width, c->d, c->hook);
  if (r != HTP_OK) return r;
  htp_unit_sets s;
  if (htp_unit_table_get(b->table, c->pair, &s) != HTP_OK)
    return htp__fail(ctx, HTP_ERR_INTERNAL, "%s: no unit sets for pair %d", c->hook, (int)c->pair);
  HTP__INVALID_IF(ctx, b->packed[c->pair].count != s.num_in,
                  "%s: pair %d: %d migrated-in units packed, the unit table has %d", c->hook,
                  (int)c->pair, b->packed[c->pair].count, s.num_in);
  /* On a device the shards are its memory and the hook is timed on its
   * clock; the same imputation and average's scaling read dx and stored
   * gradients with host loops (the balancer refuses them there). */
  c->memory = htp__balancer_memory(b);
  const int device = c->memory.table != NULL;
  HTP__INVALID_IF(ctx, device && b->config.impute != HTP_IMPUTE_ZERO,
                  "%s: pair %d: only zero imputation runs on the %s device", c->hook, (int)c->pair,
                  c->kernels->name);
  if (device) {
    r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 0);
    if (r != HTP_OK) return r;
  }
  status = htp__zero_shard_on(&c->memory, &c->dw, &c->shape);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
  if (b->config.impute == HTP_IMPUTE_SAME) {
    r = backward_same(ctx, b, c, &s);
    if (r == HTP_OK && s.num_in > 0) r = backward_with_in_units(ctx, b, c, &s, 0);
    if (r != HTP_OK) return r;
  } else if (s.num_in > 0) {
    r = backward_with_in_units(ctx, b, c, &s, 1);
    if (r != HTP_OK) return r;
  } else {
    if (s.num_kept == c->units) status = shard_backward(c, &c->w, c->dx, &c->dw, NULL);
    else if (s.num_kept > 0) status = backward_listed(c, s.kept, s.num_kept, c->dx, NULL);
    else status = c->kernels->zero(c->env, c->dx, (size_t)(c->rows * c->d) * sizeof(float));
    if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
    if (b->config.impute == HTP_IMPUTE_AVERAGE && s.num_kept > 0 && s.num_pruned > 0) {
      const float scale = (float)(s.num_kept + s.num_pruned) / (float)s.num_kept;
      for (int64_t i = 0; i < c->rows * c->d; ++i) c->dx[i] *= scale;
    }
  }
  r = htp__balancer_end_site(ctx, b, c->kind, device, 2.0 * (double)(s.num_kept + s.num_in),
                             started);
  if (r != HTP_OK) return r;
  return return_gradients(ctx, b, c, &s);
}

/* ===== The hooks, attention then MLP, each forward then backward ======= */

/* The attention hook's body for either dtype (its tensors' type: bf16). */
static htp_result attention_hook(htp_ctx *ctx, int bf16, int32_t pair, const void *x,
                                 const void *wqkv, const void *bqkv, const void *wproj, void *y,
                                 float *scratch, int64_t batch, int64_t tokens,
                                 int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const char *what = bf16 ? "htp_rt_attention_bf16" : "htp_rt_attention_f32";
  HTP__PROFILED(ctx, what);
  const double started = htp__hook_now(ctx);
  HTP__INVALID_IF(ctx, !x || !wqkv || !wproj || !y || !scratch,
                  "%s: pair %d: x, wqkv, wproj, y or scratch is NULL", what, (int)pair);
  HTP__INVALID_IF(ctx, batch < 1 || tokens < 1 || model_dim < 1 || num_heads < 1 || head_dim < 1,
                  "%s: pair %d: batch %lld, tokens %lld, model_dim %lld, num_heads %lld, head_dim "
                  "%lld must all be >= 1",
                  what, (int)pair, (long long)batch, (long long)tokens, (long long)model_dim,
                  (long long)num_heads, (long long)head_dim);
  HTP__INVALID_IF(ctx,
                  batch > INT_MAX / tokens || tokens > INT_MAX / tokens || model_dim > INT_MAX ||
                      num_heads > INT_MAX / 3 / head_dim,
                  "%s: pair %d: a dimension exceeds BLAS's int range", what, (int)pair);
  const int64_t rows = batch * tokens, inner = num_heads * head_dim;
  /* scratch (floats, whatever the dtype): context [rows, inner], one
   * migrated head [rows, head_dim], then the head kernel's own
   * (htp_rt_attention_scratch_floats). */
  const pair_call call = {
      .kind = HTP_PAIR_ATTENTION, .pair = pair, .bf16 = bf16, .hook = what, .x = x,
      .first = wqkv, .bias = bqkv, .second = wproj, .y = y, .act = scratch,
      .migrated = scratch + rows * inner,
      .kernel_scratch = scratch + rows * inner + rows * head_dim, .batch = batch,
      .tokens = tokens, .rows = rows, .model_dim = model_dim, .units = num_heads,
      .width = head_dim, .tanh_approx = 0, .kernels = htp__kernel_table(ctx),
      .env = htp__kernel_env(ctx)};
  return run_pair(ctx, &call, started);
}

htp_result htp_rt_attention_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *wqkv,
                                const float *bqkv, const float *wproj, float *y, float *scratch,
                                int64_t batch, int64_t tokens, int64_t model_dim,
                                int64_t num_heads, int64_t head_dim) {
  return attention_hook(ctx, 0, pair, x, wqkv, bqkv, wproj, y, scratch, batch, tokens,
                        model_dim, num_heads, head_dim);
}

htp_result htp_rt_attention_bf16(htp_ctx *ctx, int32_t pair, const uint16_t *x,
                                 const uint16_t *wqkv, const uint16_t *bqkv,
                                 const uint16_t *wproj, uint16_t *y, float *scratch,
                                 int64_t batch, int64_t tokens, int64_t model_dim,
                                 int64_t num_heads, int64_t head_dim) {
  return attention_hook(ctx, 1, pair, x, wqkv, bqkv, wproj, y, scratch, batch, tokens,
                        model_dim, num_heads, head_dim);
}

htp_result htp_rt_attention_grad_f32(htp_ctx *ctx, int32_t pair, const float *x,
                                     const float *wqkv, const float *bqkv, const float *wproj,
                                     const float *dy, float *dx, float *dwqkv, float *dbqkv,
                                     float *dwproj, float *scratch, int64_t batch, int64_t tokens,
                                     int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  HTP__PROFILED(ctx, "htp_rt_attention_grad_f32");
  const double started = htp__hook_now(ctx);
  grad_call c = {.kind = HTP_PAIR_ATTENTION, .pair = pair, .hook = "htp_rt_attention_grad_f32",
                 .x = x, .dy = dy, .dx = dx,
                 .w = {(float *)wqkv, (float *)bqkv, (float *)wproj, num_heads},
                 .dw = {dwqkv, dbqkv, dwproj, num_heads},
                 .shape = {3, head_dim, model_dim, sizeof(float)}, .batch = batch, .tokens = tokens,
                 .d = model_dim, .units = num_heads, .width = head_dim,
                 .compact_w = scratch, .kernels = htp__kernel_table(ctx),
                 .env = htp__kernel_env(ctx)};
  htp_result r = check_grad_call(ctx, &c);
  if (r != HTP_OK) return r;
  HTP__INVALID_IF(ctx, !bqkv, "%s: pair %d: bqkv is NULL", c.hook, (int)pair);
  c.rows = batch * tokens;
  const int64_t weights = htp__units_floats(num_heads, 3, head_dim, model_dim);
  c.compact_dw = scratch + weights;
  c.part = c.compact_dw + weights;
  c.kernel_scratch = c.part + c.rows * model_dim;
  c.kernel_scratch_floats = htp_cpu_attention_backward_scratch_floats(batch, tokens, model_dim,
                                                                      num_heads, head_dim);
  HTP__INVALID_IF(ctx, weights < 0 || c.kernel_scratch_floats < 0,
                  "%s: pair %d: the scratch's size overflows", c.hook, (int)pair);
  return run_pair_backward(ctx, &c, started);
}

/* The MLP hook's body for either dtype (its tensors' type: bf16). */
static htp_result mlp_hook(htp_ctx *ctx, int bf16, int32_t pair, const void *x, const void *w1,
                           const void *b1, const void *w2, void *y, float *scratch,
                           int64_t rows, int64_t model_dim, int64_t hidden_dim,
                           int64_t unit_width, int32_t tanh_approx) {
  const char *what = bf16 ? "htp_rt_mlp_bf16" : "htp_rt_mlp_f32";
  HTP__PROFILED(ctx, what);
  const double started = htp__hook_now(ctx);
  HTP__INVALID_IF(ctx, !x || !w1 || !w2 || !y || !scratch,
                  "%s: pair %d: x, w1, w2, y or scratch is NULL", what, (int)pair);
  HTP__INVALID_IF(ctx, rows < 1 || model_dim < 1 || hidden_dim < 1 || unit_width < 1,
                  "%s: pair %d: rows %lld, model_dim %lld, hidden_dim %lld, unit_width %lld must "
                  "all be >= 1",
                  what, (int)pair, (long long)rows, (long long)model_dim, (long long)hidden_dim,
                  (long long)unit_width);
  HTP__INVALID_IF(ctx, hidden_dim % unit_width != 0,
                  "%s: pair %d: hidden_dim %lld is not a multiple of unit_width %lld", what,
                  (int)pair, (long long)hidden_dim, (long long)unit_width);
  HTP__INVALID_IF(ctx, tanh_approx != 0 && tanh_approx != 1,
                  "%s: pair %d: tanh_approx %d must be 0 or 1", what, (int)pair, (int)tanh_approx);
  HTP__INVALID_IF(ctx, rows > INT_MAX || model_dim > INT_MAX || hidden_dim > INT_MAX,
                  "%s: pair %d: a dimension exceeds BLAS's int range", what, (int)pair);
  /* scratch (floats, whatever the dtype): hidden [rows, hidden_dim], one
   * migrated unit [rows, unit_width]. */
  const pair_call call = {.kind = HTP_PAIR_MLP,
                          .pair = pair,
                          .bf16 = bf16,
                          .hook = what,
                          .x = x,
                          .first = w1,
                          .bias = b1,
                          .second = w2,
                          .y = y,
                          .act = scratch,
                          .migrated = scratch + rows * hidden_dim,
                          .kernel_scratch = NULL,
                          .batch = 1,
                          .tokens = rows,
                          .rows = rows,
                          .model_dim = model_dim,
                          .units = hidden_dim / unit_width,
                          .width = unit_width,
                          .tanh_approx = tanh_approx,
                          .kernels = htp__kernel_table(ctx),
                          .env = htp__kernel_env(ctx)};
  return run_pair(ctx, &call, started);
}

htp_result htp_rt_mlp_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *w1,
                          const float *b1, const float *w2, float *y, float *scratch,
                          int64_t rows, int64_t model_dim, int64_t hidden_dim,
                          int64_t unit_width, int32_t tanh_approx) {
  return mlp_hook(ctx, 0, pair, x, w1, b1, w2, y, scratch, rows, model_dim, hidden_dim,
                  unit_width, tanh_approx);
}

htp_result htp_rt_mlp_bf16(htp_ctx *ctx, int32_t pair, const uint16_t *x, const uint16_t *w1,
                           const uint16_t *b1, const uint16_t *w2, uint16_t *y, float *scratch,
                           int64_t rows, int64_t model_dim, int64_t hidden_dim,
                           int64_t unit_width, int32_t tanh_approx) {
  return mlp_hook(ctx, 1, pair, x, w1, b1, w2, y, scratch, rows, model_dim, hidden_dim,
                  unit_width, tanh_approx);
}

htp_result htp_rt_mlp_grad_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *w1,
                               const float *b1, const float *w2, const float *dy, float *dx,
                               float *dw1, float *db1, float *dw2, float *scratch, int64_t rows,
                               int64_t model_dim, int64_t hidden_dim, int64_t unit_width,
                               int32_t tanh_approx) {
  HTP__PROFILED(ctx, "htp_rt_mlp_grad_f32");
  const double started = htp__hook_now(ctx);
  const char *hook = "htp_rt_mlp_grad_f32";
  HTP__INVALID_IF(ctx, unit_width < 1 || hidden_dim < 1 || hidden_dim % unit_width != 0,
                  "%s: pair %d: hidden_dim %lld is not a positive multiple of unit_width %lld",
                  hook, (int)pair, (long long)hidden_dim, (long long)unit_width);
  const int64_t units = hidden_dim / unit_width;
  grad_call c = {.kind = HTP_PAIR_MLP,
                 .pair = pair,
                 .hook = hook,
                 .x = x,
                 .dy = dy,
                 .dx = dx,
                 .w = {(float *)w1, (float *)b1, (float *)w2, units},
                 .dw = {dw1, db1, dw2, units},
                 .shape = {1, unit_width, model_dim, sizeof(float)},
                 .batch = 1,
                 .tokens = rows,
                 .rows = rows,
                 .d = model_dim,
                 .units = units,
                 .width = unit_width,
                 .tanh_approx = tanh_approx,
                 .compact_w = scratch,
                 .kernels = htp__kernel_table(ctx),
                 .env = htp__kernel_env(ctx)};
  htp_result r = check_grad_call(ctx, &c);
  if (r != HTP_OK) return r;
  HTP__INVALID_IF(ctx, hidden_dim > INT_MAX, "%s: pair %d: a dimension exceeds BLAS's int range",
                  hook, (int)pair);
  const int64_t weights = htp__units_floats(units, 1, unit_width, model_dim);
  c.compact_dw = scratch + weights;
  c.part = c.compact_dw + weights;
  c.kernel_scratch = c.part + rows * model_dim;
  c.kernel_scratch_floats = 3 * rows * hidden_dim;
  return run_pair_backward(ctx, &c, started);
}
