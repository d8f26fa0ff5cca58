/*===- tools/htp-run/host.h - What htp-run asks of the machine it runs on -===*
 *
 * The facts behind htp-run's limits and defaults: physical memory (a block
 * that would need more is refused before anything is allocated), the cores
 * (each rank's share of them for BLAS), an MPI launcher's environment
 * (--backend mpi outside mpirun is an error) and the user's BLAS thread
 * setting (then htp-run leaves BLAS alone).
 *===----------------------------------------------------------------------===*/
#ifndef HTP_RUN_HOST_H
#define HTP_RUN_HOST_H

#include <stdint.h>

/* Physical memory in bytes (_SC_PHYS_PAGES x _SC_PAGESIZE); 0 if unknown. */
uint64_t htp_host_memory_bytes(void);

/* The first variable set by an MPI launcher (Open MPI, PMIx, PMI/MPICH,
 * MVAPICH) found in the environment, or NULL outside a launcher. */
const char *htp_host_mpi_launcher(void);

/* Processes of this job on this host as the launcher says
 * (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), or 0 if it does not. */
int htp_host_mpi_local_size(void);
/* Processes of this job in all as the launcher says (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, MV2_COMM_WORLD_SIZE), or 0 if it does not. */
int htp_host_mpi_world_size(void);

/* Each of `ranks` ranks on a host of `cores` cores gets max(1, cores / ranks)
 * BLAS threads: together they use the cores, none oversubscribes them. */
int htp_host_blas_share(int cores, int ranks);

#endif /* HTP_RUN_HOST_H */
