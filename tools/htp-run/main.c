/*===- tools/htp-run/main.c - htp-run's main -----------------------------===*
 *
 * The executor (run.c) with the JIT when this build has MLIR, without
 * it otherwise: then only shared objects from htp-compile can be run.
 *===----------------------------------------------------------------------===*/
#include "tools/htp-run/entry.h"

int main(int argc, char **argv) {
#ifdef HTP_RUN_HAVE_JIT
  const htp_compiler *jit = htp_jit_compiler();
#else
  const htp_compiler *jit = 0;
#endif
  return htp_run_main(argc, argv, jit);
}
