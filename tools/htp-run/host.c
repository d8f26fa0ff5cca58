/*===- tools/htp-run/host.c - What htp-run asks of the machine ------------===*
 *
 * This file implements host.h with sysconf, sched_getaffinity and getenv.
 *===----------------------------------------------------------------------===*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "tools/htp-run/host.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t htp_host_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0)
    return 0;
  return (uint64_t)pages * (uint64_t)page_size;
}

/* Set and not empty. */
static int is_set(const char *name) {
  const char *value = getenv(name);
  return value && value[0];
}

const char *htp_host_mpi_launcher(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                                      "PMI_RANK", "MV2_COMM_WORLD_SIZE"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (is_set(names[i]))
      return names[i];
  return NULL;
}

/* The first of names that holds a count from 1 to 2^20, else 0. */
static int count_from(const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *value = getenv(names[i]);
    char *end;
    long size = value ? strtol(value, &end, 10) : 0;
    if (value && end != value && *end == '\0' && size >= 1 && size <= 1 << 20)
      return (int)size;
  }
  return 0;
}

int htp_host_mpi_local_size(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  return count_from(names, sizeof names / sizeof names[0]);
}

int htp_host_mpi_world_size(void) {
  static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
  return count_from(names, sizeof names / sizeof names[0]);
}

int htp_host_blas_share(int cores, int ranks) {
  if (cores < 1 || ranks < 1)
    return 1;
  return cores / ranks > 1 ? cores / ranks : 1;
}
