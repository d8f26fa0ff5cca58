/*===- runtime/htp.h - libhtprt, the HTP runtime: the one public header ---===*
 *
 * SKELETON: the runtime work fills this in. Two regions have two owners:
 *   - everything outside the PLANNING region: contexts, results, comm
 *     backends, faults, migration transfers, trace (runtime core);
 *   - the PLANNING region: detection, SEMI planning, unit tables (planner).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_H
#define HTP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes: 0 is success; every other value has a string (htp_strerror). */
typedef enum htp_result {
  HTP_OK = 0,
  HTP_ERR_INVALID = 1,   /* bad argument; the context's last error says which */
  HTP_ERR_NOMEM = 2,
  HTP_ERR_TIMEOUT = 3,   /* a deadline passed: a peer hung or is too slow */
  HTP_ERR_REMOTE = 4,    /* a peer failed or aborted */
  HTP_ERR_SYSTEM = 5,    /* the OS, MPI, CUDA or NCCL failed */
  HTP_ERR_UNSUPPORTED = 6,
  HTP_ERR_INTERNAL = 7,
  HTP_RESULT_COUNT
} htp_result;

const char *htp_strerror(htp_result result);

typedef struct htp_ctx htp_ctx;

/* ===== PLANNING region begin (detection, SEMI planning, unit tables) ===== */
/* ===== PLANNING region end ===== */

#ifdef __cplusplus
}
#endif

#endif /* HTP_H */
