// Reference numbers from MPI on the same machine: MPI_Allreduce / MPI_Allgather /
// MPI_Reduce_scatter_block on float sum, MPI_Bcast from rank 0, and a ping-pong of MPI_Send / MPI_Recv between two
// ranks, with chorus-perf's flags, sizes, timing, check and table (harness.h); all-reduce
// also nonblocking with -z 0 (MPI_Iallreduce, every call of a size posted, then MPI_Wait in
// order). Which transport
// MPI uses is mpirun's business, e.g.
//
//   mpirun -np 4 --mca btl vader,self mpi_perf --coll allreduce -b 8 -e 64M -f 4 -n 20 -w 3
//   mpirun -np 2 --mca btl tcp,self mpi_perf --coll pingpong -b 8 -e 4M -f 8 -n 1000 -w 100
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/compare/harness.h"

namespace {

using chorus::compare::Coll;

void ok(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  std::fprintf(stderr, "mpi_perf: %s failed: %s\n", what, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

std::string libraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<size_t>(len));
  return s.substr(0, s.find_first_of(",\n"));  // "Open MPI v4.1.4" without the build details
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string error;
  auto opts = chorus::compare::parseOptions(argc, argv, "mpi_perf", &error);
  // Every rank parses the same flags, so on an error every rank stops here.
  if (!opts) {
    if (!error.empty()) std::fprintf(stderr, "mpi_perf: %s\n", error.c_str());
    MPI_Finalize();
    return error.empty() ? 0 : 2;
  }
  if (!opts->algo.empty()) {
    std::fprintf(stderr, "mpi_perf: -a: choose Open MPI's algorithms with --mca coll_tuned_*\n");
    MPI_Finalize();
    return 2;
  }

  chorus::compare::Backend b;
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  b.description = libraryVersion();
  b.barrier = [] { ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); };
  // MPI counts are int: the sizes compared here (<= 256 MiB of floats) fit.
  const int rank = b.rank;
  std::vector<MPI_Request> posted;  // -z 0: MPI_Iallreduce requests not completed yet
  switch (opts->coll) {
    case Coll::kAllReduce:
      b.run = [](const float* in, float* out, size_t count) {
        ok(MPI_Allreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
           "MPI_Allreduce");
      };
      // -z 0, as chorus-perf: every call posted, then each completed in order with MPI_Wait.
      b.post = [&posted](const float* in, float* out, size_t count) {
        MPI_Request r = MPI_REQUEST_NULL;
        ok(MPI_Iallreduce(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                          &r),
           "MPI_Iallreduce");
        posted.push_back(r);
      };
      b.complete = [&posted] {
        for (MPI_Request& r : posted) ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
        posted.clear();
      };
      break;
    case Coll::kAllGather:
      b.run = [](const float* in, float* out, size_t count) {
        int c = static_cast<int>(count);
        ok(MPI_Allgather(in, c, MPI_FLOAT, out, c, MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather");
      };
      break;
    case Coll::kReduceScatter:
      b.run = [](const float* in, float* out, size_t count) {
        ok(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD),
           "MPI_Reduce_scatter_block");
      };
      break;
    case Coll::kBroadcast:
      // Out of place, as chorus-perf's: the root copies its input to its output (MPI_Bcast has
      // one buffer), then every rank's output is the root's.
      b.run = [rank](const float* in, float* out, size_t count) {
        if (rank == 0) std::memcpy(out, in, count * sizeof(float));
        ok(MPI_Bcast(out, static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
      };
      break;
    case Coll::kPingPong:
      // Blocking calls, as chorus-perf -z 1 and the usual MPI latency benchmarks: rank 1 sends
      // its reply only after the message has arrived, so a call is one full round trip. The
      // harness refuses other job sizes before the first call.
      b.run = [rank](const float* in, float* out, size_t count) {
        int c = static_cast<int>(count);
        int peer = 1 - rank;
        if (rank == 0) {
          ok(MPI_Send(in, c, MPI_FLOAT, peer, 0, MPI_COMM_WORLD), "MPI_Send");
          ok(MPI_Recv(out, c, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        } else {
          ok(MPI_Recv(out, c, MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
          ok(MPI_Send(in, c, MPI_FLOAT, peer, 0, MPI_COMM_WORLD), "MPI_Send");
        }
      };
      break;
  }
  b.sumDouble = [](double v) {
    double out = 0;
    ok(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce (time)");
    return out;
  };
  b.sumInt64 = [](int64_t v) {
    int64_t out = 0;
    ok(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce (#wrong)");
    return out;
  };
  // Errors come back to ok(), which names the failed call before aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int status = chorus::compare::runBenchmark(*opts, b);
  MPI_Finalize();
  return status;
}
