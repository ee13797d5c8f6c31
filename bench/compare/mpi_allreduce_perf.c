/* Reference numbers from MPI on the same machine: MPI_Allreduce / MPI_Allgather /
 * MPI_Reduce_scatter_block over the same sizes, iterations and correctness check as chorus-perf,
 * printed in the same table layout (out-of-place columns only).
 *
 *   mpirun -np 4 --mca btl tcp,self mpi_perf -c allreduce -b 8 -e 64M -f 4 -n 20 -w 5
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return (size_t)v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t minB = 8, maxB = 64 << 20;
  int factor = 2, iters = 20, warmup = 5;
  const char* coll = "allreduce";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) minB = parseSize(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) maxB = parseSize(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-c")) coll = argv[i + 1];
  }
  int ag = !strcmp(coll, "allgather"), rs = !strcmp(coll, "reducescatter");
  if (rank == 0) {
    printf("# MPI %s reference, %d ranks\n", coll, n);
    printf("#%12s %13s %9s %8s %7s %7s %6s\n", "size", "count", "type", "time", "algbw", "busbw",
           "#wrong");
    printf("#%12s %13s %9s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  double busSum = 0;
  int rows = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= (size_t)factor) {
    size_t total = bytes / sizeof(float);
    size_t count = (ag || rs) ? total / (size_t)n : total; /* per-rank block for ag/rs */
    if (count == 0) continue;
    if (ag || rs) total = count * (size_t)n;
    float* in = malloc(sizeof(float) * (ag ? count : total));
    float* out = malloc(sizeof(float) * (rs ? count : total));
    for (size_t i = 0; i < (ag ? count : total); ++i) in[i] = (float)((rank + i) % 5);
#define RUN_ONCE()                                                                        \
  do {                                                                                    \
    if (ag) MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD); \
    else if (rs) MPI_Reduce_scatter_block(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); \
    else MPI_Allreduce(in, out, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);          \
  } while (0)
    for (int it = 0; it < warmup; ++it) RUN_ONCE();
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int it = 0; it < iters; ++it) RUN_ONCE();
    double elapsed = (MPI_Wtime() - start) / iters, avg;
    MPI_Allreduce(&elapsed, &avg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    avg /= n;
    long wrong = 0;
    if (ag) {
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          if (out[(size_t)r * count + i] != (float)((r + i) % 5)) ++wrong;
    } else {
      size_t off = rs ? (size_t)rank * count : 0, cnt = rs ? count : total;
      for (size_t i = 0; i < cnt; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += (float)((r + off + i) % 5);
        if (out[i] != want) ++wrong;
      }
    }
    long wrongAll;
    MPI_Allreduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    size_t sizeB = total * sizeof(float);
    double algbw = (double)sizeB / avg / 1e9;
    double bus = algbw * (ag || rs ? (double)(n - 1) / n : 2.0 * (n - 1) / n);
    if (rank == 0)
      printf(" %12zu %13zu %9s %8.1f %7.2f %7.2f %6ld\n", sizeB, total, "float", avg * 1e6, algbw,
             bus, wrongAll);
    busSum += bus;
    ++rows;
    free(in);
    free(out);
  }
  if (rank == 0) printf("# Avg bus bandwidth    : %g\n", rows ? busSum / rows : 0.0);
  MPI_Finalize();
  return 0;
}
