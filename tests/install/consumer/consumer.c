/* Allreduce of rank+1 over every rank; exits non-zero unless the sum is right everywhere. */
#include <chorus/chorus.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  chorusComm_t comm;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    fprintf(stderr, "init: %s\n", chorusGetLastError(NULL));
    return 1;
  }
  int rank, n;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);
  double in[1000], out[1000];
  for (int i = 0; i < 1000; ++i) in[i] = rank + 1 + i;
  if (chorusAllReduce(in, out, 1000, chorusFloat64, chorusSum, comm, NULL) != chorusSuccess) {
    fprintf(stderr, "allreduce: %s\n", chorusGetLastError(comm));
    return 1;
  }
  for (int i = 0; i < 1000; ++i) {
    double want = n * (n + 1) / 2.0 + (double)n * i;
    if (out[i] != want) {
      fprintf(stderr, "rank %d: element %d is %g, expected %g\n", rank, i, out[i], want);
      return 1;
    }
  }
  printf("rank %d of %d: allreduce sum OK\n", rank, n);
  chorusCommDestroy(comm);
  return 0;
}
