/*===- kernels/cuda/green.c - SM partitions of one GPU: green contexts ----===*
 *
 * htp_cuda_kernel_env_create_on(device, sm_count > 0, ...) confines a
 * rank's kernels to sm_count SMs of the device (DESIGN §10), so a
 * straggler sharing a GPU with faster ranks is slow in hardware. The CUDA
 * driver's green contexts do it:
 *   1. the device's SM resource (cuDeviceGetDevResource, SM type);
 *   2. split ONCE per device and process into groups of the device's
 *      partition step (cuDevSmResourceSplitByCount; 8 SMs on sm_90);
 *   3. each partition takes sm_count / step free groups of that one split
 *      (groups of one split may be combined in a descriptor,
 *      cuDevResourceGenerateDesc), so the partitions of ranks that share
 *      the GPU are disjoint; ranks without a count (0) use the whole
 *      device, the partitioned SMs included;
 *   4. a green context over the descriptor (cuGreenCtxCreate) and a
 *      non-blocking stream in it (cuGreenCtxStreamCreate).
 * The kernels enqueue on that stream with the runtime API; memory stays
 * the primary context's (green contexts share it).
 *
 * The driver API is reached through cudaGetDriverEntryPointByVersion, not
 * by linking libcuda: a binary linked with -lcuda does not even start on
 * a machine without the NVIDIA driver (the build machines, CI), while the
 * runtime API finds the driver at run time and fails with a message.
 *
 * Compiled, not run: no GPU where this was written.
 *===----------------------------------------------------------------------===*/
#define _POSIX_C_SOURCE 200809L

#include "kernels/cuda/kernels_internal.h"
#include "kernels/htp_kernel_table.h"
#include "kernels/sm_partition.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----- The driver entry points ------------------------------------------- */

static struct driver_api {
  PFN_cuInit_v2000 init;
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDeviceGetDevResource_v12040 device_resource;
  PFN_cuDevSmResourceSplitByCount_v12040 split;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc;
  PFN_cuGreenCtxCreate_v12040 green_create;
  PFN_cuGreenCtxDestroy_v12040 green_destroy;
  PFN_cuCtxFromGreenCtx_v12040 from_green;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create;
  PFN_cuStreamDestroy_v4000 stream_destroy;
  PFN_cuCtxPushCurrent_v4000 push;
  PFN_cuCtxPopCurrent_v4000 pop;
  PFN_cuGetErrorName_v6000 error_name;
} driver;

/* Guards the entry points' loading and the partition registry below. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int driver_loaded = 0;

/* One entry point, or why not. `version` is the CUDA version whose
 * signature the PFN type above names. */
static int load_symbol(const char *symbol, void **fn, unsigned version, char *err,
                       size_t err_size) {
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t rc = cudaGetDriverEntryPointByVersion(symbol, fn, version, cudaEnableDefault, &found);
  if (rc == cudaSuccess && found == cudaDriverEntryPointSuccess && *fn) return 0;
  snprintf(err, err_size, "the CUDA driver has no %s (%s%s): green contexts need driver 12.5 or "
           "newer", symbol, rc != cudaSuccess ? cudaGetErrorString(rc) : "",
           found == cudaDriverEntryPointVersionNotSufficent ? "version too old" : "");
  return 1;
}

/* Every entry point green.c calls, with the CUDA version of its signature. */
static const struct {
  const char *name;
  unsigned version;
  void **fn;
} SYMBOLS[] = {
    {"cuInit", 2000, (void **)&driver.init},
    {"cuDeviceGet", 2000, (void **)&driver.device_get},
    {"cuDeviceGetDevResource", 12040, (void **)&driver.device_resource},
    {"cuDevSmResourceSplitByCount", 12040, (void **)&driver.split},
    {"cuDevResourceGenerateDesc", 12040, (void **)&driver.generate_desc},
    {"cuGreenCtxCreate", 12040, (void **)&driver.green_create},
    {"cuGreenCtxDestroy", 12040, (void **)&driver.green_destroy},
    {"cuCtxFromGreenCtx", 12040, (void **)&driver.from_green},
    {"cuGreenCtxStreamCreate", 12050, (void **)&driver.stream_create},
    {"cuStreamDestroy", 4000, (void **)&driver.stream_destroy},
    {"cuCtxPushCurrent", 4000, (void **)&driver.push},
    {"cuCtxPopCurrent", 4000, (void **)&driver.pop},
    {"cuGetErrorName", 6000, (void **)&driver.error_name},
};

static int load_driver(char *err, size_t err_size) {
  if (driver_loaded) return 0;
  for (size_t i = 0; i < sizeof SYMBOLS / sizeof SYMBOLS[0]; ++i)
    if (load_symbol(SYMBOLS[i].name, SYMBOLS[i].fn, SYMBOLS[i].version, err, err_size)) return 1;
  driver_loaded = 1;
  return 0;
}

static const char *driver_error(CUresult rc) {
  const char *name = NULL;
  if (driver.error_name && driver.error_name(rc, &name) == CUDA_SUCCESS && name) return name;
  return "unknown CUresult";
}

/* ----- The partition registry: one split per device, groups handed out --- */

#define MAX_DEVICES 64
#define MAX_GROUPS 256 /* 132 SMs in steps of 8 give 16 */

typedef struct device_groups {
  int ready;
  int total_sms; /* the device's SMs */
  int step;      /* SMs per group */
  unsigned count;
  CUdevResource groups[MAX_GROUPS];
  unsigned char taken[MAX_GROUPS];
} device_groups;

static device_groups registry[MAX_DEVICES];

/* Splits device's SMs into groups of its partition step, once (lock held). */
static int split_device(int device, device_groups *d, char *err, size_t err_size) {
  if (d->ready) return 0;
  CUdevice dev;
  CUresult rc = driver.init(0);
  if (rc == CUDA_SUCCESS) rc = driver.device_get(&dev, device);
  CUdevResource whole;
  memset(&whole, 0, sizeof whole);
  if (rc == CUDA_SUCCESS) rc = driver.device_resource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM);
  if (rc != CUDA_SUCCESS) {
    snprintf(err, err_size, "device %d: cuDeviceGetDevResource: %s", device, driver_error(rc));
    return 1;
  }
  /* The step: the smallest partition, a whole number of co-scheduled SMs. */
  unsigned step = whole.sm.minSmPartitionSize;
  const unsigned align = whole.sm.smCoscheduledAlignment ? whole.sm.smCoscheduledAlignment : 1;
  if (step < align) step = align;
  if (step % align) step += align - step % align;
  unsigned count = MAX_GROUPS;
  rc = driver.split(d->groups, &count, &whole, NULL, 0, step);
  if (rc != CUDA_SUCCESS) {
    snprintf(err, err_size, "device %d: cuDevSmResourceSplitByCount(%u SMs a group): %s",
             device, step, driver_error(rc));
    return 1;
  }
  d->total_sms = (int)whole.sm.smCount;
  /* The split may round a group up: its real size is the step. */
  d->step = count ? (int)d->groups[0].sm.smCount : (int)step;
  d->count = count;
  memset(d->taken, 0, sizeof d->taken);
  d->ready = 1;
  return 0;
}

struct htp_cuda_partition {
  int device;
  int sm_count;
  CUgreenCtx green;
  CUcontext context; /* the green context as a CUcontext, for push/pop */
  CUstream stream;
  unsigned char groups[MAX_GROUPS]; /* the registry groups this one holds */
};

/* Gives the partition's groups back (lock held). */
static void release_groups(htp_cuda_partition *p) {
  device_groups *d = &registry[p->device];
  for (unsigned g = 0; g < d->count; ++g)
    if (p->groups[g]) d->taken[g] = 0, p->groups[g] = 0;
}

void htp_cuda_partition_destroy(htp_cuda_partition *p) {
  if (!p) return;
  /* The stream first (cuGreenCtxDestroy leaves streams alive), then the
   * context; work still queued is waited for so nothing runs after. */
  if (p->stream) {
    cudaStreamSynchronize((cudaStream_t)p->stream);
    driver.stream_destroy(p->stream);
  }
  if (p->green) driver.green_destroy(p->green);
  pthread_mutex_lock(&lock);
  release_groups(p);
  pthread_mutex_unlock(&lock);
  free(p);
}

int htp_cuda_partition_create(int device, int sm_count, htp_cuda_partition **out,
                              cudaStream_t *stream, char *err, size_t err_size) {
  *out = NULL;
  *stream = NULL;
  if (device < 0 || device >= MAX_DEVICES) {
    snprintf(err, err_size, "device %d is out of range [0, %d) for SM partitions", device,
             MAX_DEVICES);
    return HTP_KERNEL_ERR_INVALID;
  }
  /* The primary context first: green contexts retain it, and creating it
   * here once is cheaper than each green context starting it. */
  cudaError_t primary = cudaSetDevice(device);
  if (primary == cudaSuccess) primary = cudaFree(NULL);
  if (primary != cudaSuccess) {
    snprintf(err, err_size, "CUDA device %d: %s", device, cudaGetErrorString(primary));
    return HTP_KERNEL_ERR_SYSTEM;
  }
  htp_cuda_partition *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, err_size, "out of memory");
    return HTP_KERNEL_ERR_NOMEM;
  }
  p->device = device;
  p->sm_count = sm_count;

  /* Take the groups under the lock; build the context outside it. */
  CUdevResource chosen[MAX_GROUPS];
  unsigned chosen_count = 0;
  pthread_mutex_lock(&lock);
  device_groups *d = &registry[device];
  /* A count that is no partition, or more SMs than are free, is the
   * caller's error; no driver or a failing split the system's. */
  int failed = load_driver(err, err_size) || split_device(device, d, err, err_size)
                   ? HTP_KERNEL_ERR_SYSTEM
                   : HTP_KERNEL_OK;
  char name[32];
  snprintf(name, sizeof name, "device %d", device);
  if (!failed && htp_sm_count_check(name, sm_count, d->total_sms, d->step, (int)d->count, err,
                                    err_size))
    failed = HTP_KERNEL_ERR_INVALID;
  if (!failed) {
    const unsigned wanted = (unsigned)(sm_count / d->step);
    unsigned free_groups = 0;
    for (unsigned g = 0; g < d->count; ++g) free_groups += !d->taken[g];
    if (free_groups < wanted) {
      snprintf(err, err_size,
               "%d SMs of device %d: only %u of its %u partitionable SMs are free (the other "
               "ranks' partitions hold %u): the SM counts of the ranks sharing it add up to "
               "more than the device",
               sm_count, device, free_groups * (unsigned)d->step, d->count * (unsigned)d->step,
               (d->count - free_groups) * (unsigned)d->step);
      failed = HTP_KERNEL_ERR_INVALID;
    }
    for (unsigned g = 0; !failed && g < d->count && chosen_count < wanted; ++g)
      if (!d->taken[g]) {
        d->taken[g] = 1;
        p->groups[g] = 1;
        chosen[chosen_count++] = d->groups[g];
      }
  }
  pthread_mutex_unlock(&lock);
  if (failed) {
    free(p);
    return failed;
  }

  CUdevResourceDesc desc = NULL;
  CUresult rc = driver.generate_desc(&desc, chosen, chosen_count);
  const char *step_name = "cuDevResourceGenerateDesc";
  if (rc == CUDA_SUCCESS) {
    CUdevice dev;
    rc = driver.device_get(&dev, device);
    step_name = "cuGreenCtxCreate";
    if (rc == CUDA_SUCCESS)
      rc = driver.green_create(&p->green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
  }
  if (rc == CUDA_SUCCESS) {
    step_name = "cuCtxFromGreenCtx";
    rc = driver.from_green(&p->context, p->green);
  }
  if (rc == CUDA_SUCCESS) {
    step_name = "cuGreenCtxStreamCreate";
    rc = driver.stream_create(&p->stream, p->green, CU_STREAM_NON_BLOCKING, 0);
  }
  if (rc != CUDA_SUCCESS) {
    snprintf(err, err_size, "%d SMs of device %d: %s: %s", sm_count, device, step_name,
             driver_error(rc));
    htp_cuda_partition_destroy(p);
    return HTP_KERNEL_ERR_SYSTEM;
  }
  *out = p;
  *stream = (cudaStream_t)p->stream;
  return HTP_KERNEL_OK;
}

int htp_cuda_partition_enter(htp_cuda_partition *p, char *err, size_t err_size) {
  CUresult rc = driver.push(p->context);
  if (rc == CUDA_SUCCESS) return 0;
  snprintf(err, err_size, "cuCtxPushCurrent (green context of device %d): %s", p->device,
           driver_error(rc));
  return 1;
}

void htp_cuda_partition_leave(htp_cuda_partition *p) {
  (void)p;
  CUcontext popped = NULL;
  driver.pop(&popped);
}

int htp_cuda_partition_sm_count(const htp_cuda_partition *p) { return p ? p->sm_count : 0; }
