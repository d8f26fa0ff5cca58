/*===- kernels/sm_partition.h - Which SM counts partition a GPU -----------===*
 *
 * A rank confined to some of a GPU's SMs (htp-run --sms) takes whole
 * groups of the device's partition step: the CUDA device's green contexts
 * (kernels/cuda/green.c) and the checked device's emulation of them
 * (kernels/checked/table.c) refuse the same counts with the same words.
 *===----------------------------------------------------------------------===*/
#ifndef HTP_SM_PARTITION_H
#define HTP_SM_PARTITION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when sm_count is a valid partition of `device` (its name in the
 * message, e.g. "device 0"), a device of total_sms SMs split into `groups`
 * groups of `step`: a multiple of step in [step, step * groups]; else
 * non-zero with a message naming the valid counts and the nearest. */
int htp_sm_count_check(const char *device, int sm_count, int total_sms, int step, int groups,
                       char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif /* HTP_SM_PARTITION_H */
