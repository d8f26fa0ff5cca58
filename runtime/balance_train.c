/*===- runtime/balance_train.c - the balancer in training: backward hooks ===*
 *
 * The training half of the balance hooks (DESIGN §11). htp-grad writes the
 * adjoint of a hooked attention or MLP pair as a call of
 * htp_rt_attention_grad_f32 / htp_rt_mlp_grad_f32, which follows the plan
 * the forward hook of the same pair ran under:
 *   - kept units are differentiated together: their weights are gathered
 *     into a compact shard (the layout of balance.c's packed blocks), the
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
 * Unit scores (variation, displacement): unit_scores.c.
 *
 * Balanced backward hooks gather and scatter with host loops: they run on
 * the CPU only for now (the config check refuses variation, and the hook
 * refuses a balancer on a device). Without a balancer they use only the
 * kernel table, on either device.
 *===----------------------------------------------------------------------===*/
#include "runtime/balance_internal.h"
#include "runtime/comm_internal.h"
#include "runtime/htp_ops.h"

#include "kernels/htp_kernel_table.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG_GRADIENTS 0x4F00 /* + kind: migrated units' weight gradients, helper to owner */

/* Shards (balance_internal.h) under short names. */
typedef htp__shard shard;
typedef htp__unit_shape unit_shape;

/* ===== One backward hook call ========================================== */

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
} grad_call;

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
 * attention: dqkv, where the CPU kernel leaves it: the balanced backward
 * runs on the CPU only). */
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
  htp__gather_units(&c->w, list, count, &w, 0, &c->shape);
  htp__zero_shard(&dw, &c->shape);
  htp_kernel_status s = shard_backward(c, &w, dx, &dw, g);
  if (s == HTP_KERNEL_OK) htp__scatter_units(&dw, 0, list, count, &c->dw, &c->shape);
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
      memcpy(rows_of_unit + p * width * c->d, c->w.first + (p * c->units + unit) * width * c->d,
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
 * b->grad_out, one-unit shards in in-list order. A helper prunes nothing
 * (a rank that receives has action help), so no imputation enters here. */
static htp_result backward_with_in_units(htp_ctx *ctx, htp_balancer *b, const grad_call *c,
                                         const htp_unit_sets *s, int kept) {
  const htp__packed_pair *pk = &b->packed[c->pair];
  const int64_t own = kept ? s->num_kept : 0, total = own + pk->count;
  const int64_t per_unit = htp__unit_floats(&b->config, c->kind);
  grad_call all = *c;
  all.units = total;
  all.kernel_scratch_floats =
      c->kind == HTP_PAIR_ATTENTION
          ? htp_cpu_attention_backward_scratch_floats(c->batch, c->tokens, c->d, total, c->width)
          : 3 * c->rows * total * c->width;
  shard w;
  if (all.kernel_scratch_floats < 0 ||
      htp__balancer_compact_weights(b, c->pair, &c->w, s->kept, own, &c->shape, &w) ||
      htp__reserve_floats(&b->compact_dw, &b->compact_dw_capacity,
                          (size_t)total * (size_t)per_unit) ||
      htp__reserve_floats(&b->compact_scratch, &b->compact_scratch_capacity,
                          (size_t)all.kernel_scratch_floats) ||
      htp__reserve_floats(&b->grad_out, &b->grad_out_capacity,
                          (size_t)pk->count * (size_t)per_unit))
    return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory for %lld units' weights "
                     "and gradients", c->hook, (int)c->pair, (long long)total);
  all.kernel_scratch = b->compact_scratch;
  const shard dw = htp__shard_at(b->compact_dw, total, &c->shape);
  htp__zero_shard(&dw, &c->shape);
  htp_kernel_status status = shard_backward(&all, &w, kept ? c->dx : c->part, &dw, NULL);
  if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
  if (!kept) add_into(c->dx, c->part, c->rows * c->d);
  if (kept) htp__scatter_units(&dw, 0, s->kept, own, &c->dw, &c->shape);
  for (int i = 0; i < pk->count; ++i) {
    const shard one = htp__shard_at(b->grad_out + (size_t)i * (size_t)per_unit, 1, &c->shape);
    htp__copy_unit(&dw, own + i, &one, 0, &c->shape);
  }
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
      r = htp__host_send(ctx, b->grad_out + (size_t)in_index * (size_t)per_unit,
                         floats * sizeof(float), flow->src, TAG_GRADIENTS + c->kind);
      in_index += flow->count;
    } else if (flow->src == rank) {
      if (htp__reserve_floats(&b->unit_staging, &b->unit_staging_capacity, floats))
        return htp__fail(ctx, HTP_ERR_NOMEM, "%s: pair %d: out of memory", c->hook, (int)c->pair);
      r = htp__host_recv(ctx, b->unit_staging, floats * sizeof(float), flow->dst,
                   TAG_GRADIENTS + c->kind);
      int at = 0;
      for (int i = 0; r == HTP_OK && i < s->num_out; ++i) {
        if (s->out_dst[i] != flow->dst) continue;
        HTP__INVALID_IF(ctx, at == flow->count,
                        "%s: pair %d: more units handed to rank %d than "
                        "its flow carries",
                        c->hook, (int)c->pair, flow->dst);
        const shard one =
            htp__shard_at(b->unit_staging + (size_t)at++ * (size_t)per_unit, 1, &c->shape);
        htp__copy_unit(&one, 0, &c->dw, s->out_unit[i], &c->shape);
      }
    }
    if (r != HTP_OK) return r;
  }
  return HTP_OK;
}

static htp_result run_pair_backward(htp_ctx *ctx, const grad_call *c, double started) {
  htp_balancer *b = ctx ? ctx->balancer : NULL;
  htp_kernel_status status;
  if (!b || b->hookless || b->suspended) {
    status = backward_all(c);
    return status == HTP_KERNEL_OK ? HTP_OK : htp__kernel_failed(ctx, status, c->hook);
  }
  htp_result r = htp__balancer_check_pair(ctx, b, c->kind, c->pair, c->units, c->width, c->d,
                                          c->hook);
  if (r != HTP_OK) return r;
  htp_unit_sets s;
  if (htp_unit_table_get(b->table, c->pair, &s) != HTP_OK)
    return htp__fail(ctx, HTP_ERR_INTERNAL, "%s: no unit sets for pair %d", c->hook, (int)c->pair);
  if (c->kernels->device != HTP_KERNEL_DEVICE_CPU) {
    /* On a device the backward runs whole, on the device's clock, while the
     * plan keeps every unit at home (policy none, or no straggler yet): the
     * pruned and migrated paths below still read shards with the host's
     * loops. */
    HTP__INVALID_IF(ctx, s.num_kept != c->units || s.num_in > 0 || s.num_out > 0,
                    "%s: pair %d: balancing in backward (pruned or migrated units) runs on the CPU "
                    "only for now; on the %s device train with --policy none",
                    c->hook, (int)c->pair, c->kernels->name);
    r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 0);
    if (r != HTP_OK) return r;
    status = backward_all(c);
    if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
    double elapsed = 0.0;
    r = htp__ctx_mark_timer(ctx, HTP_KERNEL_TIMER_HOOKS, 1);
    if (r == HTP_OK) r = htp__ctx_elapsed_timer(ctx, HTP_KERNEL_TIMER_HOOKS, &elapsed);
    if (r == HTP_OK) htp__balancer_book_site(b, c->kind, elapsed, 2.0 * (double)c->units);
    return r;
  }
  HTP__INVALID_IF(ctx, b->packed[c->pair].count != s.num_in,
                  "%s: pair %d: %d migrated-in units packed, the unit table has %d", c->hook,
                  (int)c->pair, b->packed[c->pair].count, s.num_in);

  htp__zero_shard(&c->dw, &c->shape);
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
    else status = (memset(c->dx, 0, (size_t)(c->rows * c->d) * sizeof(float)), HTP_KERNEL_OK);
    if (status != HTP_KERNEL_OK) return htp__kernel_failed(ctx, status, c->hook);
    if (b->config.impute == HTP_IMPUTE_AVERAGE && s.num_kept > 0 && s.num_pruned > 0) {
      const float scale = (float)(s.num_kept + s.num_pruned) / (float)s.num_kept;
      for (int64_t i = 0; i < c->rows * c->d; ++i) c->dx[i] *= scale;
    }
  }
  htp__balancer_book_site(b, c->kind, htp__hook_now(ctx) - started,
                          2.0 * (double)(s.num_kept + s.num_in));
  return return_gradients(ctx, b, c, &s);
}

/* The checks both backward hooks share, after which c is complete but for
 * its scratch layout. */
static htp_result check_grad_call(htp_ctx *ctx, const grad_call *c) {
  HTP__INVALID_IF(ctx,
                  !c->x || !c->w.first || !c->w.second || !c->dy || !c->dx || !c->dw.first ||
                      !c->dw.second || !c->compact_w,
                  "%s: pair %d: x, a weight, dy, dx, a weight gradient or scratch is NULL", c->hook,
                  (int)c->pair);
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

htp_result htp_rt_attention_grad_f32(htp_ctx *ctx, int32_t pair, const float *x,
                                     const float *wqkv, const float *bqkv, const float *wproj,
                                     const float *dy, float *dx, float *dwqkv, float *dbqkv,
                                     float *dwproj, float *scratch, int64_t batch, int64_t tokens,
                                     int64_t model_dim, int64_t num_heads, int64_t head_dim) {
  const double started = htp__hook_now(ctx);
  grad_call c = {.kind = HTP_PAIR_ATTENTION, .pair = pair, .hook = "htp_rt_attention_grad_f32",
                 .x = x, .dy = dy, .dx = dx,
                 .w = {(float *)wqkv, (float *)bqkv, (float *)wproj, num_heads},
                 .dw = {dwqkv, dbqkv, dwproj, num_heads},
                 .shape = {3, head_dim, model_dim}, .batch = batch, .tokens = tokens,
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

htp_result htp_rt_mlp_grad_f32(htp_ctx *ctx, int32_t pair, const float *x, const float *w1,
                               const float *b1, const float *w2, const float *dy, float *dx,
                               float *dw1, float *db1, float *dw2, float *scratch, int64_t rows,
                               int64_t model_dim, int64_t hidden_dim, int64_t unit_width,
                               int32_t tanh_approx) {
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
                 .shape = {1, unit_width, model_dim},
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

/* ===== Weights the optimizer changed ===================================== */

