/*===- kernels/cpu/embed.c - The model's ends: patches, tokens, pooling ---===*
 *
 * The CPU table's entries for a whole ViT's ends (cpu/train.h): patchify
 * (im2col of non-overlapping patches, so patch embedding is a linear), the
 * class token and position embedding, class-token pooling, the row sum
 * (bias_add's bias gradient), their adjoints, and zeroing. Copies run over
 * rows on the kernels' pool; sums over rows have an order fixed by the
 * shapes alone (row blocks of a fixed size, each column summed in double
 * within a block, then over the blocks in order), so results do not
 * depend on the thread count.
 *===----------------------------------------------------------------------===*/
#include "kernels/cpu/train.h"

#include "kernels/cpu/cpu_internal.h"

#include <stdlib.h>
#include <string.h>

/* ----- Patchify ----------------------------------------------------------- */

struct patchify_job {
  const float *images;
  float *patches;
  int64_t channels, height, width, patch, grid_h, grid_w;
};

/* One task per (image, patch row): its grid_w tokens read the same patch
 * image rows, so each image row is read once and in order. */
static void patchify_rows(void *ctx, int64_t begin, int64_t end) {
  const struct patchify_job *job = ctx;
  const int64_t P = job->patch, C = job->channels, H = job->height, W = job->width;
  const int64_t row_len = C * P * P;
  for (int64_t task = begin; task < end; ++task) {
    const int64_t b = task / job->grid_h, py = task % job->grid_h;
    float *out = job->patches + (b * job->grid_h + py) * job->grid_w * row_len;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ky = 0; ky < P; ++ky) {
        const float *in = job->images + ((b * C + c) * H + py * P + ky) * W;
        float *dst = out + (c * P + ky) * P;
        for (int64_t px = 0; px < job->grid_w; ++px)
          memcpy(dst + px * row_len, in + px * P, (size_t)P * sizeof(float));
      }
  }
}

htp_kernel_status htp__cpu_patchify_f32(const htp_kernel_env *env, const float *images,
                                        float *patches, int64_t batch, int64_t channels,
                                        int64_t height, int64_t width, int64_t patch) {
  if (batch < 0 || channels < 0 || height < 0 || width < 0 || patch < 1 ||
      height % patch != 0 || width % patch != 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "patchify: needs sizes >= 0 and height %lld, width %lld multiples "
                           "of patch %lld",
                           (long long)height, (long long)width, (long long)patch);
  struct patchify_job job = {images, patches,        channels,       height,
                             width,  patch,          height / patch, width / patch};
  const int64_t tasks = batch * job.grid_h;
  const int64_t per_task = job.grid_w * channels * patch * patch;
  if (tasks == 0 || per_task == 0)
    return HTP_KERNEL_OK;
  htp__parallel(tasks, 1 + HTP_GRAIN / per_task, patchify_rows, &job);
  return HTP_KERNEL_OK;
}

/* ----- Token embedding and pooling --------------------------------------- */

struct embed_job {
  const float *patches, *cls, *pos;
  float *y;
  int64_t patches_per_image, dim;
};

/* Output rows (b, t), t in [0, N+1): cls or a patch row, plus pos[t]. */
static void embed_rows(void *ctx, int64_t begin, int64_t end) {
  const struct embed_job *job = ctx;
  const int64_t N = job->patches_per_image, D = job->dim;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / (N + 1), t = row % (N + 1);
    const float *src = t == 0 ? job->cls : job->patches + (b * N + t - 1) * D;
    const float *pos = job->pos + t * D;
    float *y = job->y + row * D;
    for (int64_t d = 0; d < D; ++d)
      y[d] = src[d] + pos[d];
  }
}

htp_kernel_status htp__cpu_embed_tokens_f32(const htp_kernel_env *env, const float *patches,
                                            const float *cls, const float *pos, float *y,
                                            int64_t batch, int64_t patches_per_image,
                                            int64_t dim) {
  if (batch < 0 || patches_per_image < 0 || dim < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "embed tokens: negative size");
  if (dim == 0)
    return HTP_KERNEL_OK;
  struct embed_job job = {patches, cls, pos, y, patches_per_image, dim};
  htp__parallel(batch * (patches_per_image + 1), 1 + HTP_GRAIN / dim, embed_rows, &job);
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_cls_token_f32(const htp_kernel_env *env, const float *x, float *y,
                                         int64_t batch, int64_t tokens, int64_t dim) {
  if (batch < 0 || tokens < 1 || dim < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cls token: needs batch, dim >= 0 and tokens >= 1");
  for (int64_t b = 0; b < batch; ++b) /* batch rows of dim floats: too little to thread */
    memcpy(y + b * dim, x + b * tokens * dim, (size_t)dim * sizeof(float));
  return HTP_KERNEL_OK;
}

struct cls_back_job {
  const float *dy;
  float *dx;
  int64_t tokens, dim;
};

static void cls_back_images(void *ctx, int64_t begin, int64_t end) {
  const struct cls_back_job *job = ctx;
  const int64_t T = job->tokens, D = job->dim;
  for (int64_t b = begin; b < end; ++b) {
    float *dx = job->dx + b * T * D;
    memcpy(dx, job->dy + b * D, (size_t)D * sizeof(float));
    memset(dx + D, 0, (size_t)((T - 1) * D) * sizeof(float));
  }
}

htp_kernel_status htp__cpu_cls_token_backward_f32(const htp_kernel_env *env, const float *dy,
                                                  float *dx, int64_t batch, int64_t tokens,
                                                  int64_t dim) {
  if (batch < 0 || tokens < 1 || dim < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID,
                           "cls token backward: needs batch, dim >= 0 and tokens >= 1");
  if (dim == 0)
    return HTP_KERNEL_OK;
  struct cls_back_job job = {dy, dx, tokens, dim};
  htp__parallel(batch, 1 + 4 * HTP_GRAIN / (tokens * dim), cls_back_images, &job);
  return HTP_KERNEL_OK;
}

/* ----- Column sums in a fixed order -------------------------------------- */

/* out[c] (+)= Σ_r a[r*ld + c] over rows r, c in [0, cols). Rows go in
 * blocks of SUM_BLOCK (fixed: the order depends on rows alone); each
 * (row block, column chunk) task sums its block's rows in order in double;
 * then each column adds its blocks' partials in block order. Tasks cover
 * both directions, so a few long columns (a bias of 192) and many short
 * ones (dpos over a batch) both spread over the threads. */
enum { SUM_BLOCK = 256, SUM_COLS = 512 };

struct colsum_job {
  const float *a;
  float *out;
  double *partial; /* [blocks][cols]; NULL with one block */
  int64_t rows, cols, ld, blocks, col_chunks;
  int accumulate;
};

static void colsum_tasks(void *ctx, int64_t begin, int64_t end) {
  const struct colsum_job *job = ctx;
  double acc[SUM_COLS];
  for (int64_t task = begin; task < end; ++task) {
    const int64_t block = task / job->col_chunks, chunk = task % job->col_chunks;
    const int64_t c0 = chunk * SUM_COLS;
    const int64_t width = job->cols - c0 < SUM_COLS ? job->cols - c0 : SUM_COLS;
    const int64_t r0 = block * SUM_BLOCK;
    const int64_t r1 = r0 + SUM_BLOCK < job->rows ? r0 + SUM_BLOCK : job->rows;
    for (int64_t c = 0; c < width; ++c)
      acc[c] = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      const float *row = job->a + r * job->ld + c0;
      for (int64_t c = 0; c < width; ++c)
        acc[c] += row[c];
    }
    if (job->partial) {
      memcpy(job->partial + block * job->cols + c0, acc, (size_t)width * sizeof(double));
    } else {
      float *out = job->out + c0;
      for (int64_t c = 0; c < width; ++c)
        out[c] = job->accumulate ? out[c] + (float)acc[c] : (float)acc[c];
    }
  }
}

static void colsum_combine(void *ctx, int64_t begin, int64_t end) {
  const struct colsum_job *job = ctx;
  for (int64_t c = begin; c < end; ++c) {
    double sum = 0.0;
    for (int64_t block = 0; block < job->blocks; ++block)
      sum += job->partial[block * job->cols + c];
    job->out[c] = job->accumulate ? job->out[c] + (float)sum : (float)sum;
  }
}

static htp_kernel_status colsum(const htp_kernel_env *env, const char *what, const float *a,
                                int64_t rows, int64_t cols, int64_t ld, float *out,
                                int accumulate) {
  if (cols == 0)
    return HTP_KERNEL_OK;
  if (rows == 0) {
    if (!accumulate)
      memset(out, 0, (size_t)cols * sizeof(float));
    return HTP_KERNEL_OK;
  }
  struct colsum_job job = {a, out, NULL, rows, cols, ld,
                           (rows + SUM_BLOCK - 1) / SUM_BLOCK, (cols + SUM_COLS - 1) / SUM_COLS,
                           accumulate};
  if (job.blocks > 1) {
    job.partial = malloc((size_t)(job.blocks * cols) * sizeof(double));
    if (!job.partial)
      return htp_kernel_fail(env, HTP_KERNEL_ERR_NOMEM,
                             "%s: no memory for %lld partial sums", what,
                             (long long)(job.blocks * cols));
  }
  htp__parallel(job.blocks * job.col_chunks, 1, colsum_tasks, &job);
  if (job.partial) {
    htp__parallel(cols, SUM_COLS, colsum_combine, &job);
    free(job.partial);
  }
  return HTP_KERNEL_OK;
}

htp_kernel_status htp__cpu_row_sum_f32(const htp_kernel_env *env, const float *x, float *y,
                                       int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "row sum: negative size");
  return colsum(env, "row sum", x, rows, cols, cols, y, 0);
}

/* ----- embed_tokens' adjoint ---------------------------------------------- */

struct dpatch_job {
  const float *dy;
  float *dpatches;
  int64_t patches_per_image, dim;
};

static void dpatch_images(void *ctx, int64_t begin, int64_t end) {
  const struct dpatch_job *job = ctx;
  const int64_t N = job->patches_per_image, D = job->dim;
  for (int64_t b = begin; b < end; ++b)
    memcpy(job->dpatches + b * N * D, job->dy + (b * (N + 1) + 1) * D,
           (size_t)(N * D) * sizeof(float));
}

htp_kernel_status htp__cpu_embed_tokens_backward_f32(const htp_kernel_env *env, const float *dy,
                                                     float *dpatches, float *dcls, float *dpos,
                                                     int64_t batch, int64_t patches_per_image,
                                                     int64_t dim) {
  if (batch < 0 || patches_per_image < 0 || dim < 0)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "embed tokens backward: negative size");
  const int64_t N = patches_per_image, D = dim;
  if (dpatches && N * D > 0) {
    struct dpatch_job job = {dy, dpatches, N, D};
    htp__parallel(batch, 1 + 4 * HTP_GRAIN / (N * D), dpatch_images, &job);
  }
  /* dy as [batch, (N+1) D]: dpos sums its columns; dcls the first D. */
  htp_kernel_status status = HTP_KERNEL_OK;
  if (dpos)
    status = colsum(env, "embed tokens backward", dy, batch, (N + 1) * D, (N + 1) * D, dpos, 1);
  if (status == HTP_KERNEL_OK && dcls)
    status = colsum(env, "embed tokens backward", dy, batch, D, (N + 1) * D, dcls, 1);
  return status;
}

/* ----- Zero --------------------------------------------------------------- */

enum { ZERO_GRAIN = 1 << 20 }; /* bytes per chunk: memset is memory-bound */

static void zero_chunk(void *ctx, int64_t begin, int64_t end) {
  memset((char *)ctx + begin, 0, (size_t)(end - begin));
}

htp_kernel_status htp__cpu_zero(const htp_kernel_env *env, void *dst, size_t bytes) {
  if (!bytes)
    return HTP_KERNEL_OK;
  if (!dst)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "zero: NULL with %zu bytes", bytes);
  if (bytes > (size_t)INT64_MAX)
    return htp_kernel_fail(env, HTP_KERNEL_ERR_INVALID, "zero: %zu bytes", bytes);
  htp__parallel((int64_t)bytes, ZERO_GRAIN, zero_chunk, dst);
  return HTP_KERNEL_OK;
}
