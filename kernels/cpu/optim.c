/*===- kernels/cpu/optim.c - Optimizer steps: SGD with momentum, AdamW ----===*
 *
 * The CPU table's optimizer entries (cpu/train.h), in place over n
 * parameters, elementwise and threaded (each element's update depends on
 * that element alone, so results do not depend on the thread count). The
 * arithmetic is PyTorch's (torch.optim.SGD with dampening 0 and no
 * Nesterov; torch.optim.AdamW's single-tensor path), in f32, with the bias
 * corrections computed once in double.
 *===----------------------------------------------------------------------===*/
#include "kernels/cpu/train.h"

#include "kernels/cpu/cpu_internal.h"

#include <math.h>

struct sgd_job {
  float *w, *m;
  const float *g;
  float lr, momentum, weight_decay;
  int first; /* step 1: the buffer starts as the gradient */
};

HTP_VECTOR_CLONES
static void sgd_range(float *w, const float *g, float *m, int64_t n, float lr, float momentum,
                      float weight_decay, int first) {
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + weight_decay * w[i];
    if (m) {
      d = first ? d : momentum * m[i] + d;
      m[i] = d;
    }
    w[i] -= lr * d;
  }
}

static void sgd_chunk(void *ctx, int64_t begin, int64_t end) {
  const struct sgd_job *job = ctx;
  sgd_range(job->w + begin, job->g + begin, job->m ? job->m + begin : NULL, end - begin,
            job->lr, job->momentum, job->weight_decay, job->first);
}

htp_kernel_status htp__cpu_sgd_momentum_f32(const htp_kernel_env *env, float *w, const float *g,
                                            float *m, int64_t n, float lr, float momentum,
                                            float weight_decay, int64_t step) {
  if (n < 0 || step < 1)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "sgd: needs n >= 0 and step >= 1, got n %lld, step %lld",
                           (long long)n, (long long)step);
  if (!m && momentum != 0.0f)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "sgd: momentum %g needs a momentum buffer", (double)momentum);
  /* momentum 0 keeps no buffer (as PyTorch): m, when given, just gets g'. */
  struct sgd_job job = {w, m, g, lr, momentum, weight_decay, step == 1};
  htp__parallel(n, HTP_GRAIN, sgd_chunk, &job);
  return HTP_KERNEL_OK;
}

struct adamw_job {
  float *w, *m, *v;
  const float *g;
  float decay;          /* 1 - lr weight_decay */
  float beta1, beta2;
  float step_size;      /* lr / (1 - beta1^step) */
  float bc2_sqrt;       /* sqrt(1 - beta2^step) */
  float epsilon;
};

HTP_VECTOR_CLONES
static void adamw_range(const struct adamw_job *job, int64_t begin, int64_t end) {
  float *w = job->w, *m = job->m, *v = job->v;
  const float *g = job->g;
  for (int64_t i = begin; i < end; ++i) {
    w[i] *= job->decay;
    m[i] = job->beta1 * m[i] + (1.0f - job->beta1) * g[i];
    v[i] = job->beta2 * v[i] + (1.0f - job->beta2) * g[i] * g[i];
    const float denom = sqrtf(v[i]) / job->bc2_sqrt + job->epsilon;
    w[i] -= job->step_size * m[i] / denom;
  }
}

static void adamw_chunk(void *ctx, int64_t begin, int64_t end) {
  adamw_range(ctx, begin, end);
}

htp_kernel_status htp__cpu_adamw_f32(const htp_kernel_env *env, float *w, const float *g,
                                     float *m, float *v, int64_t n, float lr, float beta1,
                                     float beta2, float epsilon, float weight_decay,
                                     int64_t step) {
  if (n < 0 || step < 1)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "adamw: needs n >= 0 and step >= 1, got n %lld, step %lld",
                           (long long)n, (long long)step);
  if (!(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f))
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "adamw: betas must lie in [0, 1), got %g and %g", (double)beta1,
                           (double)beta2);
  const double bc1 = 1.0 - pow((double)beta1, (double)step);
  const double bc2 = 1.0 - pow((double)beta2, (double)step);
  struct adamw_job job = {w,
                          m,
                          v,
                          g,
                          (float)(1.0 - (double)lr * (double)weight_decay),
                          beta1,
                          beta2,
                          (float)((double)lr / bc1),
                          (float)sqrt(bc2),
                          epsilon};
  htp__parallel(n, HTP_GRAIN, adamw_chunk, &job);
  return HTP_KERNEL_OK;
}
