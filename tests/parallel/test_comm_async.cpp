// Non-blocking behaviour of the MPI communicator: several requests in flight waited in reverse
// order, a large all-reduce that completes while the main thread computes without entering MPI
// (the progress thread drives it), and waits that time out when a rank skips a collective or a
// transfer, naming the group, the collective, its sequence number and the missing rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "comm_testing.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(CommAsync, OutstandingRequestsWaitedInReverseOrder) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor big = f32_tensor(1 << 20, [&](int64_t i) { return float(r + i % 3); });
  Tensor small_in = f32_tensor(2, [&](int64_t k) { return float(r * 2 + k); });
  Tensor small_out = Tensor::zeros({2 * n});
  Tensor root_data = f32_tensor(8, [&](int64_t i) { return r == 0 ? float(i) : 0.0f; });
  Tensor from_prev = Tensor::zeros({16});
  Tensor to_next = f32_tensor(16, [&](int64_t) { return float(r); });

  Work received = comm->recv_async(from_prev, prev);  // posted before everything, finished last
  Work reduced = comm->all_reduce_async(big);
  Work gathered = comm->all_gather_async(small_in, small_out);
  Work broadcast = comm->broadcast_async(root_data, 0);
  Work barrier = comm->barrier_async();
  Work sent = comm->send_async(to_next, next);
  sent.wait();
  barrier.wait();
  broadcast.wait();
  gathered.wait();
  reduced.wait();
  received.wait();

  const float rank_sum = float(n * (n - 1) / 2);
  for (int64_t i = 0; i < (1 << 20); i += 4099) ASSERT_EQ(big.f32()[i], rank_sum + float(n * (i % 3)));
  for (int k = 0; k < 2 * n; ++k) EXPECT_EQ(small_out.f32()[k], float(k));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(root_data.f32()[i], float(i));
  EXPECT_EQ(from_prev.f32()[15], float(prev));
  EXPECT_TRUE(received.done() && reduced.done());
}

TEST(CommAsync, ProgressThreadAdvancesAReductionWhileTheMainThreadComputes) {
  auto comm = world_comm("dp");
  comm->barrier();
  Tensor grads = f32_tensor(1 << 22, [&](int64_t i) { return float(comm->rank() + 1); });  // 16 MiB
  Work work = comm->all_reduce_async(grads);
  // Compute without calling MPI; only the progress thread can move the reduction forward.
  const Clock::time_point start = Clock::now();
  double acc = 0;
  while (!work.done() && seconds_since(start) < 8.0)
    for (int i = 0; i < 10000; ++i) acc += std::sqrt(double(i) + acc * 1e-9);
  EXPECT_TRUE(work.done()) << "the all-reduce did not complete while the main thread stayed out of MPI";
  EXPECT_GT(acc, 0.0);
  work.wait();
  const int n = comm->size();
  EXPECT_EQ(grads.f32()[12345], float(n * (n + 1) / 2));
}

TEST(CommAsync, SkippedCollectiveTimesOutNamingTheMissingRank) {
  const double timeout = 1.0;
  auto comm = world_comm("stuck", timeout);
  const int n = comm->size(), skipper = n - 1;
  comm->barrier();  // #1 on every rank
  Tensor t = f32_tensor(16, [](int64_t) { return 1.0f; });
  if (comm->rank() != skipper) {
    const Clock::time_point start = Clock::now();
    ::testing::internal::CaptureStderr();
    std::string message = error_of([&] { comm->all_reduce(t); });  // #2, which the skipper never issues
    std::string dump = ::testing::internal::GetCapturedStderr();
    const double elapsed = seconds_since(start);
    EXPECT_GE(elapsed, timeout);
    EXPECT_LT(elapsed, timeout + 3.0);
    EXPECT_TRUE(contains(message, "comm 'stuck'")) << message;
    EXPECT_TRUE(contains(message, "all_reduce #2 (64 bytes) did not complete within 1 s")) << message;
    EXPECT_TRUE(
        contains(message, "not arrived: rank " + std::to_string(skipper) + " (last issued #1); every rank must"))
        << message;
    std::string arrived = "arrived: rank";
    for (int q = 0; q < skipper; ++q) arrived += std::string(q ? ", " : (skipper > 1 ? "s " : " ")) + std::to_string(q);
    EXPECT_TRUE(contains(message, arrived + ";")) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_TRUE(contains(dump, "flight recorder of comm 'stuck'")) << dump;
    EXPECT_TRUE(contains(dump, "#2")) << dump;
    EXPECT_TRUE(contains(dump, "TIMED OUT")) << dump;
  }
  MPI_Barrier(MPI_COMM_WORLD);                       // the skipper waits here until the others have given up
  if (comm->rank() == skipper) comm->all_reduce(t);  // #2, late: the others' pending request completes
  comm->barrier();                                   // #3: the group is usable again
}

TEST(CommAsync, UnmatchedReceiveTimesOutNamingThePeer) {
  auto comm = world_comm("pp", 0.5);
  Tensor t = Tensor::zeros({4});
  if (comm->rank() == 0) {
    std::string message = error_of([&] { comm->recv(t, 1); });
    EXPECT_TRUE(contains(message, "comm 'pp' (rank 0 of " + std::to_string(comm->size()) +
                                      "): recv (16 bytes) did not complete within 0.5 s from rank 1"))
        << message;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm->rank() == 1) comm->send(t, 0);  // completes rank 0's abandoned receive
  comm->barrier();
}

}  // namespace
}  // namespace tessera::testing
