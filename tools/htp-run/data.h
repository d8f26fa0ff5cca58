/*===- tools/htp-run/data.h - Bind inputs and parameters of a block -----===*
 *
 * Fills the argument buffers of an entry point: seeded random data by
 * default (the distributions are listed in htp-run --help), or tensors from a
 * safetensors file and .npy files, checked against the signature.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_DATA_H
#define HTP_RUN_DATA_H

#include "tools/htp-run/shape.h"

#include <stddef.h>
#include <stdint.h>

/* Fills argument `index` of the signature with its default random data,
 * from a stream that depends only on (seed, index). */
void htp_fill_random(const htp_sig_tensor *tensor, int index, uint64_t seed, float *out);

/* Binds every parameter of sig from the safetensors file at path into
 * buffers[i]. Errors name the file and the tensor; tensors the block does not
 * use are reported on stderr as a warning. */
int htp_bind_weights(const char *path, const htp_signature *sig, void *const *buffers, char *err,
                     size_t err_size);

/* Reads the .npy file at path into out, which must match tensor's shape. */
int htp_bind_input(const char *path, const htp_sig_tensor *tensor, float *out, char *err,
                   size_t err_size);

#endif /* HTP_RUN_DATA_H */
