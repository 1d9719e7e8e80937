// Stand-in for the NCCL backend in a build without CUDA or NCCL: no GPU, and a clear error.
#include "core/error.h"
#include "parallel/nccl_comm.h"

namespace tessera {

bool nccl_built() { return false; }

bool cuda_device_available() { return false; }

size_t cuda_free_memory(int) { return 0; }

std::shared_ptr<Comm> make_nccl_comm(MPI_Comm, std::string name, std::vector<int>, int, const CommOptions&) {
  TS_FAIL("comm '", name, "': this tessera was built without CUDA and NCCL, so the NCCL backend is not available; ",
          "rebuild with -DTESSERA_CUDA=ON on a machine with the CUDA toolkit, or use the MPI backend");
}

}  // namespace tessera
