// Groups of one rank (make_self_comm, and make_mpi_comm over a one-rank communicator) complete
// every collective at once without MPI; bad arguments fail on every backend before anything is
// sent, with one line naming the group, the collective and the rule.
#include <gtest/gtest.h>

#include "comm_testing.h"
#include "parallel/nccl_comm.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

std::shared_ptr<Comm> one_rank_mpi_comm() {
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  return make_mpi_comm(self, "tp", {world_rank()}, CommOptions{});
}

TEST(CommArgs, GroupsOfOneCompleteAtOnceAndCopy) {
  for (const auto& comm : {make_self_comm("dp", 5, CommOptions{}), one_rank_mpi_comm()}) {
    EXPECT_EQ(comm->size(), 1);
    EXPECT_EQ(comm->rank(), 0);
    Tensor t = f32_tensor(6, [](int64_t i) { return float(i); });
    Work work = comm->all_reduce_async(t, ReduceOp::max);
    EXPECT_TRUE(work.done());
    work.wait();
    EXPECT_EQ(t.f32()[5], 5.0f);
    Tensor out = Tensor::zeros({6});
    comm->reduce_scatter(t, out);
    EXPECT_EQ(out.f32()[4], 4.0f);
    Tensor gathered = Tensor::zeros({6});
    comm->all_gather(t, gathered);
    EXPECT_EQ(gathered.f32()[3], 3.0f);
    Tensor exchanged = Tensor::zeros({8});
    comm->all_to_allv_async(t, {4}, exchanged, {4}).wait();
    EXPECT_EQ(exchanged.f32()[3], 3.0f);
    EXPECT_EQ(exchanged.f32()[4], 0.0f);
    comm->broadcast(t, 0);
    comm->barrier();
    EXPECT_TRUE(contains(error_of([&] { comm->send(t, 0); }), "is this rank itself"));
  }
  EXPECT_EQ(make_self_comm("dp", 5, CommOptions{})->world_ranks(), std::vector<int>{5});
  EXPECT_EQ(one_rank_mpi_comm()->world_ranks(), std::vector<int>{world_rank()});
}

TEST(CommArgs, BadArgumentsFailWithOneLine) {
  auto comm = world_comm("dp");
  const int n = comm->size();
  Tensor t = Tensor::zeros({10});
  Tensor three = Tensor::zeros({3});
  std::string message = error_of([&] { comm->reduce_scatter(t, three); });
  EXPECT_TRUE(contains(message,
                       "comm 'dp' reduce_scatter: the input has 10 elements but must hold one "
                       "output-sized chunk (3) per rank"))
      << message;
  message = error_of([&] { comm->all_gather(t, three); });
  EXPECT_TRUE(contains(message, "comm 'dp' all_gather: the output has 3 elements")) << message;
  Tensor words = Tensor::zeros({8}, DType::u16);
  message = error_of([&] { comm->all_reduce(words); });
  EXPECT_TRUE(contains(message, "the MPI backend cannot reduce u16 tensors; reduce in f32")) << message;
  message = error_of([&] { comm->broadcast(t, n); });
  EXPECT_TRUE(contains(message, "root " + std::to_string(n) + " is not a rank of this group")) << message;
  message = error_of([&] { comm->all_to_allv_async(t, {1}, three, {1}); });
  EXPECT_TRUE(contains(message, "got 1 send counts for a group of " + std::to_string(n) + " ranks")) << message;
  std::vector<int64_t> too_many(size_t(n), 11);
  message = error_of([&] { comm->all_to_allv_async(t, too_many, three, std::vector<int64_t>(size_t(n), 0)); });
  EXPECT_TRUE(contains(
      message, "send counts add up to " + std::to_string(11 * n) + " elements but the input tensor holds only 10"))
      << message;
  Tensor ints = Tensor::zeros({10 * n}, DType::i32);
  message = error_of([&] { comm->all_gather(t, ints); });
  EXPECT_TRUE(contains(message, "the output is i32 but the input is f32")) << message;
  Tensor shared = Tensor::zeros({4 * n});
  Tensor front = shared.view(0, {2 * n}), middle = shared.view(n, {2 * n});
  message = error_of([&] { comm->all_to_all(front, middle); });
  EXPECT_TRUE(contains(message, "the input and output tensors overlap")) << message;
  message = error_of([&] { comm->recv(t, comm->rank()); });
  EXPECT_TRUE(contains(message, "comm 'dp' recv: peer " + std::to_string(comm->rank()) + " is this rank itself"))
      << message;
  Tensor undefined;
  message = error_of([&] { comm->all_reduce(undefined); });
  EXPECT_TRUE(contains(message, "the input tensor is undefined")) << message;
  comm->barrier();  // no bad call above reached MPI: the group is still in step
}

TEST(CommArgs, MpiCommNeedsAConsistentGroup) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::string message = error_of([&] { make_mpi_comm(comm, "world", {0}, CommOptions{}); });
  EXPECT_TRUE(contains(message, "1 world ranks given for a communicator of " + std::to_string(world_size())))
      << message;
  MPI_Comm_free(&comm);
  message = error_of([&] { make_mpi_comm(MPI_COMM_NULL, "world", {0}, CommOptions{}); });
  EXPECT_TRUE(contains(message, "no MPI communicator")) << message;
}

TEST(CommArgs, NcclWithoutAGpuSaysSo) {
  if (cuda_device_available()) GTEST_SKIP() << "this machine has a GPU";
  std::vector<int> ranks(static_cast<size_t>(world_size()));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = int(r);
  std::string message = error_of([&] { make_nccl_comm(MPI_COMM_WORLD, "world", ranks, 0, CommOptions{}); });
  EXPECT_TRUE(contains(message, "comm 'world': the NCCL backend needs a CUDA GPU and this machine has none") ||
              contains(message, "comm 'world': this tessera was built without CUDA and NCCL"))
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing
