// Communicator test helpers.
#include "comm_testing.h"

#include <vector>

namespace tessera::testing {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::shared_ptr<Comm> world_comm(const std::string& name, double timeout_s) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<int> ranks(static_cast<size_t>(world_size()));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = int(r);
  CommOptions options;
  options.timeout_s = timeout_s;
  return make_mpi_comm(comm, name, ranks, options);
}

std::shared_ptr<Comm> split_comm(const std::string& name, int color) {
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, color, world_rank(), &comm);
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> members(static_cast<size_t>(size));
  int me = world_rank();
  MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, comm);
  CommOptions options;
  options.timeout_s = 10.0;
  return make_mpi_comm(comm, name, members, options);
}

Tensor f32_tensor(int64_t n, const std::function<float(int64_t)>& value) {
  Tensor t = Tensor::zeros({n});
  float* p = t.f32();
  for (int64_t i = 0; i < n; ++i) p[i] = value(i);
  return t;
}

}  // namespace tessera::testing
