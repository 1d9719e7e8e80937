// A job in which the last rank fails mid-run while the others all-reduce: `kill` makes it die
// (SIGKILL), `stop` makes it hang (SIGSTOP). Usage: rank_failure_job kill|stop TIMEOUT_S. A rank
// whose wait times out prints the error as the CLI would and aborts the job.
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/mpi_comm.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rank_failure_job kill|stop TIMEOUT_S\n");
    return 2;
  }
  const std::string mode = argv[1];
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    tessera::CommOptions options;
    options.timeout_s = std::atof(argv[2]);
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    auto world = tessera::make_mpi_comm(comm, "world", ranks, options);
    tessera::Tensor grads = tessera::Tensor::zeros({4096});
    for (int step = 0; step < 100; ++step) {
      if (rank == size - 1 && step == 10) std::raise(mode == "kill" ? SIGKILL : SIGSTOP);
      world->all_reduce(grads);
    }
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
