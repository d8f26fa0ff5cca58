/*===- tools/htp-run/train/dataset.h - Fashion-MNIST batches for training -----===*
 *
 * What htp-run --train feeds a block: Fashion-MNIST read from Debian's
 * dataset-fashion-mnist files (idx.h), a seeded shuffle per epoch, and
 * batches as the block takes them: images normalised with the data set's
 * mean 0.2860 and std 0.3530 into [B, 1, 28, 28] f32, targets one-hot
 * [B, 10] f32. Pure C, no allocation but the set's.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_TRAIN_DATASET_H
#define HTP_TRAIN_DATASET_H

#include "tools/htp-run/train/idx.h"

#include <stddef.h>
#include <stdint.h>

#define HTP_FMNIST_MEAN 0.2860f
#define HTP_FMNIST_STD 0.3530f
enum { HTP_FMNIST_CLASSES = 10, HTP_FMNIST_SIDE = 28 };
#define HTP_FMNIST_PACKAGE "dataset-fashion-mnist"

typedef enum htp_fmnist_split { HTP_FMNIST_TRAIN, HTP_FMNIST_TEST } htp_fmnist_split;

/* The split's files under dir: train-images-idx3-ubyte.gz and
 * train-labels-idx1-ubyte.gz, or t10k-... for the test set. A missing
 * directory or file is an error naming it and the Debian package; a file
 * that is not a regular file (a device, a FIFO) is refused by the reader.
 * limit > 0 keeps the first limit examples (an error when the set has
 * fewer). 0 on success, else 1 with why in err. */
int htp_fmnist_load(const char *dir, htp_fmnist_split split, long limit, htp_idx_set *out,
                    char *err, size_t err_size);

/* The path of the split's images (labels 0) or labels (labels 1) file under
 * dir, as htp_fmnist_load reads it; non-zero when it does not fit. */
int htp_fmnist_file(const char *dir, htp_fmnist_split split, int labels, char *out,
                    size_t out_size);

/* order[0..n) = the permutation of 0..n-1 for (seed, epoch): Fisher-Yates
 * on a splitmix64/xoshiro256** stream, so the same seed and epoch give the
 * same order on every machine and rank. */
void htp_fmnist_shuffle(uint32_t *order, uint32_t n, uint64_t seed, int64_t epoch);

/* Batch rows [start, start + batch) of order (order NULL: the identity) as
 * images [batch, 1, 28, 28] and targets [batch, 10]; rows past the set's
 * end (a last partial batch) are zeros, images and targets alike. labels,
 * when not NULL, gets each real row's label. Returns the real rows. */
int htp_fmnist_batch(const htp_idx_set *set, const uint32_t *order, uint32_t start, int batch,
                     float *images, float *targets, int32_t *labels);

/* Augments the first `rows` images of a batch in place (htp-run --augment):
 * each flipped left-right with probability 1/2 and shifted by at most
 * `max_shift` pixels along each axis (0: flip only; flip-shift passes
 * HTP_FMNIST_SHIFT), the uncovered pixels set to the normalised background
 * (a zero pixel). The draws come from (seed, step, row) alone, so every
 * rank and a resumed run agree. */
enum { HTP_FMNIST_SHIFT = 2 };
void htp_fmnist_augment(float *images, int rows, int max_shift, uint64_t seed, int64_t step);

/* Random erasing (htp-run --random-erase; Zhong et al. 2017): with
 * probability p each of the first `rows` images gets one rectangle of 2 % to
 * 40 % of its area, aspect ratio log-uniform in [0.3, 3.3], filled with
 * standard normal noise (the normalised pixels' scale). The draws come from
 * (seed, step, row) alone, apart from --augment's. */
void htp_fmnist_erase(float *images, int rows, double p, uint64_t seed, int64_t step);

/* Label smoothing (htp-run --label-smoothing): the first `rows` one-hot
 * targets of a batch become (1 - epsilon) one-hot + epsilon / classes, so
 * each row still sums to 1; padding rows (all zero) are left out. */
void htp_fmnist_smooth_targets(float *targets, int rows, double epsilon);

#endif /* HTP_TRAIN_DATASET_H */
