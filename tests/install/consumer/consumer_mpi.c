/* The same check, with the communicator made from MPI_COMM_WORLD (chorusCommInitMPI). */
#include <chorus/chorus_mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  chorusComm_t comm;
  if (chorusCommInitMPI(&comm, MPI_COMM_WORLD) != chorusSuccess) {
    fprintf(stderr, "init: %s\n", chorusGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rank, n;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  long long in = rank + 1, out = 0;
  if (chorusAllReduce(&in, &out, 1, chorusInt64, chorusSum, comm, NULL) != chorusSuccess ||
      out != (long long)n * (n + 1) / 2) {
    fprintf(stderr, "rank %d: allreduce gave %lld: %s\n", rank, out, chorusGetLastError(comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  printf("rank %d of %d: MPI-initialized allreduce sum OK\n", rank, n);
  chorusCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
