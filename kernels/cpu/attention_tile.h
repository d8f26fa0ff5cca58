/*===- kernels/cpu/attention_tile.h - One head's fused attention tiles --===*
 *
 * Included by attention.c once per vector width: it defines TILE_FN (the
 * function's name), TILE_V / TILE_W (a vector type of TILE_W floats),
 * TILE_LOAD / TILE_STORE (unaligned access) and TILE_ATTR (its target
 * attributes); tiles are TILE_JB = 2 TILE_W keys or context columns wide, so
 * each tile keeps QB x 2 vector accumulators in registers. Not a header to
 * include anywhere else.
 *===----------------------------------------------------------------------===*/

#define TILE_JB (2 * TILE_W)

/* One (image, head): ctx[t, :] = softmax_j(scale q_t·k_j) v_j for every
 * token t. q, k, v and ctx are rows of head_dim floats `stride` /
 * `ctx_stride` apart. kt holds head_dim * padded floats (padded = tokens
 * rounded up to TILE_JB), s QB * padded, qs QB * head_dim. */
TILE_ATTR
static void TILE_FN(const float *q, const float *k, const float *v, int64_t stride, float *ctx,
                    int64_t ctx_stride, int64_t tokens, int64_t head_dim, float scale,
                    int64_t padded, float *kt, float *s, float *qs) {
  /* K^T, zero-padded: the score tiles then run over whole TILE_JB-wide columns. */
  for (int64_t j = 0; j < padded; ++j)
    for (int64_t d = 0; d < head_dim; ++d)
      kt[d * padded + j] = j < tokens ? k[j * stride + d] : 0.0f;

  for (int64_t t0 = 0; t0 < tokens; t0 += QB) {
    const int64_t valid = tokens - t0 < QB ? tokens - t0 : QB;
    /* Scaled q rows; a short last tile repeats its last row (not stored). */
    for (int64_t r = 0; r < QB; ++r) {
      const float *row = q + (t0 + (r < valid ? r : valid - 1)) * stride;
      for (int64_t d = 0; d < head_dim; ++d)
        qs[r * head_dim + d] = row[d] * scale;
    }
    /* Scores of QB rows against all keys, TILE_JB keys at a time: eight vector
     * accumulators, written out so they stay in registers. */
    for (int64_t j0 = 0; j0 < padded; j0 += TILE_JB) {
      TILE_V a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
      for (int64_t d = 0; d < head_dim; ++d) {
        const float *kr = kt + d * padded + j0;
        const TILE_V k0 = TILE_LOAD(kr), k1 = TILE_LOAD(kr + TILE_W);
        const float *qd = qs + d;
        a00 += qd[0] * k0; a01 += qd[0] * k1;
        a10 += qd[head_dim] * k0; a11 += qd[head_dim] * k1;
        a20 += qd[2 * head_dim] * k0; a21 += qd[2 * head_dim] * k1;
        a30 += qd[3 * head_dim] * k0; a31 += qd[3 * head_dim] * k1;
      }
      float *out = s + j0;
      TILE_STORE(out, a00); TILE_STORE(out + TILE_W, a01);
      TILE_STORE(out + padded, a10); TILE_STORE(out + padded + TILE_W, a11);
      TILE_STORE(out + 2 * padded, a20); TILE_STORE(out + 2 * padded + TILE_W, a21);
      TILE_STORE(out + 3 * padded, a30); TILE_STORE(out + 3 * padded + TILE_W, a31);
    }
    /* Softmax numerators; the division by the sum is left to the context
     * (head_dim values per row instead of tokens). */
    float inv[QB];
    for (int r = 0; r < QB; ++r) {
      float *row = s + r * padded;
      float max = row[0];
#pragma omp simd reduction(max : max)
      for (int64_t j = 1; j < tokens; ++j)
        max = row[j] > max ? row[j] : max;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < tokens; ++j) {
        row[j] = htp__expf(row[j] - max);
        sum += row[j];
      }
      inv[r] = 1.0f / sum;
    }
    /* p·v, TILE_JB context columns at a time, then TILE_W; the tail of
     * head_dim below. */
    int64_t d0 = 0;
    for (; d0 + TILE_JB <= head_dim; d0 += TILE_JB) {
      TILE_V a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
      for (int64_t j = 0; j < tokens; ++j) {
        const float *vr = v + j * stride + d0;
        const TILE_V v0 = TILE_LOAD(vr), v1 = TILE_LOAD(vr + TILE_W);
        const float *pj = s + j;
        a00 += pj[0] * v0; a01 += pj[0] * v1;
        a10 += pj[padded] * v0; a11 += pj[padded] * v1;
        a20 += pj[2 * padded] * v0; a21 += pj[2 * padded] * v1;
        a30 += pj[3 * padded] * v0; a31 += pj[3 * padded] * v1;
      }
      const TILE_V acc[QB][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
      for (int64_t r = 0; r < valid; ++r) {
        float *out = ctx + (t0 + r) * ctx_stride + d0;
        TILE_STORE(out, acc[r][0] * inv[r]);
        TILE_STORE(out + TILE_W, acc[r][1] * inv[r]);
      }
    }
    /* One vector of context columns: head_dim 16 under the AVX-512 tiles
     * would otherwise all go through the scalar tail. */
    for (; d0 + TILE_W <= head_dim; d0 += TILE_W) {
      TILE_V a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
      for (int64_t j = 0; j < tokens; ++j) {
        const TILE_V v0 = TILE_LOAD(v + j * stride + d0);
        const float *pj = s + j;
        a0 += pj[0] * v0;
        a1 += pj[padded] * v0;
        a2 += pj[2 * padded] * v0;
        a3 += pj[3 * padded] * v0;
      }
      const TILE_V acc[QB] = {a0, a1, a2, a3};
      for (int64_t r = 0; r < valid; ++r)
        TILE_STORE(ctx + (t0 + r) * ctx_stride + d0, acc[r] * inv[r]);
    }
    if (d0 < head_dim) {
      const int64_t width = head_dim - d0;
      float acc[QB][TILE_JB] = {{0}};
      for (int64_t j = 0; j < tokens; ++j) {
        const float *vr = v + j * stride + d0;
        for (int r = 0; r < QB; ++r)
          for (int64_t jj = 0; jj < width; ++jj)
            acc[r][jj] += s[r * padded + j] * vr[jj];
      }
      for (int64_t r = 0; r < valid; ++r)
        for (int64_t jj = 0; jj < width; ++jj)
          ctx[(t0 + r) * ctx_stride + d0 + jj] = acc[r][jj] * inv[r];
    }
  }
}

#undef TILE_JB
#undef TILE_FN
#undef TILE_V
#undef TILE_W
#undef TILE_LOAD
#undef TILE_STORE
#undef TILE_ATTR
