/*===- tools/htp-run/train/init.h - A timm-style initialisation of a ViT ------===*
 *
 * The starting weights of htp-run --train without --params: per tensor,
 * by its timm name,
 *   *norm*.weight        1          (layer norms' scale)
 *   *norm*.bias, *.bias  0
 *   everything else      truncated normal, std 0.02, cut at [-2, 2]
 *                        (timm's trunc_normal_(std=.02) with its default
 *                        bounds a = -2, b = 2: weights, cls_token, pos_embed)
 * drawn at the tensor's GLOBAL shape from a stream of (seed, name), so
 * every tp and every order of the parameters starts from the same numbers.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TRAIN_INIT_H
#define HTP_TRAIN_INIT_H

#include <stdint.h>

#define HTP_TRAIN_INIT_STD 0.02
#define HTP_TRAIN_INIT_BOUND 2.0

/* What the rule gives a tensor of this name. */
typedef enum htp_init_kind { HTP_INIT_ONES, HTP_INIT_ZEROS, HTP_INIT_TRUNC_NORMAL } htp_init_kind;
htp_init_kind htp_train_init_kind(const char *name);

/* Fills out[0..count) for the tensor called name. */
void htp_train_init_param(const char *name, int64_t count, uint64_t seed, float *out);

#endif /* HTP_TRAIN_INIT_H */
