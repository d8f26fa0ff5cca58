/*===- tools/htp-run/data.h - Bind inputs and parameters of a block -----===*
 *
 * Fills the argument buffers of an entry point: seeded random data by
 * default (the distributions are listed in htp-run --help), or tensors from a
 * safetensors file and .npy files, checked against the signature. Each
 * buffer holds the argument's dtype: f32, or bf16 bit patterns.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_DATA_H
#define HTP_RUN_DATA_H

#include "tools/htp-run/shape.h"

#include <stddef.h>
#include <stdint.h>

/* Fills argument `index` of the signature with its default random data,
 * from a stream that depends only on (seed, index): drawn in f32, rounded
 * once for a bf16 tensor. */
void htp_fill_random(const htp_sig_tensor *tensor, int index, uint64_t seed, void *out);

/* Binds every parameter of sig from the safetensors file at path into
 * buffers[i]. A bf16 parameter takes a BF16 tensor byte for byte or an F32
 * one rounded to bf16; an f32 parameter takes F32, or BF16 (widened, exact),
 * F16 or F64 converted; any other pairing is an error. Errors name the file
 * and the tensor; each kind of conversion gets one note on stderr, and
 * tensors the block does not use a warning. */
int htp_bind_weights(const char *path, const htp_signature *sig, void *const *buffers, char *err,
                     size_t err_size);

/* Reads the .npy file at path into out, which must match tensor's shape;
 * for a bf16 tensor the file's values are rounded to bf16 (with a note on
 * stderr: .npy has no bf16 type). */
int htp_bind_input(const char *path, const htp_sig_tensor *tensor, void *out, char *err,
                   size_t err_size);

#endif /* HTP_RUN_DATA_H */
