// Expert parallelism's token dispatcher (parallel/ep) under mpirun: the counts and the rows of a
// variable all-to-all land where the MoE layer expects them (with work run while the rows travel),
// the traffic is accounted, and a malformed count (negative, or more rows than a rank can route)
// stops the receiver with a message.
#include <gtest/gtest.h>

#include "comm_testing.h"
#include "nn/expert_parallel.h"
#include "parallel/ep/token_dispatch.h"
#include "support/test_support.h"

namespace tessera {
namespace {

constexpr int64_t kLocalExperts = 2, kWidth = 3;

// What rank `from` sends rank `to` for the receiver's expert j: a few rows, none for some pairs.
int64_t rows_for(int from, int to, int64_t j) { return (from + 2 * to + 3 * j) % 4; }

TEST(TokenDispatch, CountsAndRowsLandInPeerOrder) {
  const int me = testing::world_rank(), n = testing::world_size();
  EpAllToAll ep(testing::world_comm("ep"), Device::cpu);
  std::vector<int64_t> sent;
  for (int p = 0; p < n; ++p)
    for (int64_t j = 0; j < kLocalExperts; ++j) sent.push_back(rows_for(me, p, j));
  const std::vector<int64_t> received = ep.exchange_counts(sent, kLocalExperts, 100);
  for (int p = 0; p < n; ++p)
    for (int64_t j = 0; j < kLocalExperts; ++j) EXPECT_EQ(received[size_t(p * kLocalExperts + j)], rows_for(p, me, j));

  // Row r of what rank s sends peer p holds (s, p, r) in its channels.
  const std::vector<int64_t> send_rows = rows_per_peer(sent, kLocalExperts), recv_rows = rows_per_peer(received, kLocalExperts);
  int64_t total_sent = 0, total_received = 0;
  for (int p = 0; p < n; ++p) total_sent += send_rows[size_t(p)], total_received += recv_rows[size_t(p)];
  Tensor send = Tensor::zeros({total_sent, kWidth}), recv = Tensor::zeros({total_received + 2, kWidth});
  for (int p = 0, row = 0; p < n; ++p)
    for (int64_t r = 0; r < send_rows[size_t(p)]; ++r, ++row)
      for (int64_t c = 0; c < kWidth; ++c) send.f32()[row * kWidth + c] = float(me * 100 + p * 10 + r + c * 1000);
  bool ran_meanwhile = false;
  ep.exchange_rows(send, send_rows, recv, recv_rows, [&] { ran_meanwhile = true; });
  EXPECT_TRUE(ran_meanwhile);
  for (int p = 0, row = 0; p < n; ++p)
    for (int64_t r = 0; r < recv_rows[size_t(p)]; ++r, ++row)
      for (int64_t c = 0; c < kWidth; ++c)
        EXPECT_EQ(recv.f32()[row * kWidth + c], float(p * 100 + me * 10 + r + c * 1000)) << "from " << p << " row " << r;

  const EpTraffic traffic = ep.take_traffic();
  EXPECT_EQ(traffic.bytes_sent, double(n * kLocalExperts * 4 + total_sent * kWidth * 4));
  EXPECT_GE(traffic.seconds, 0.0);
  EXPECT_EQ(ep.take_traffic().bytes_sent, 0.0);  // taken: counting starts again
}

TEST(TokenDispatch, MalformedCountsStopTheReceiver) {
  const int me = testing::world_rank(), n = testing::world_size();
  EpAllToAll ep(testing::world_comm("ep"), Device::cpu);
  // Rank 0 sends rank 1 a negative count, then more rows than a rank can route (max 5 here).
  for (const int64_t bad : {int64_t(-3), int64_t(9)}) {
    std::vector<int64_t> sent(size_t(n * kLocalExperts), 1);
    if (me == 0) sent[size_t(1 * kLocalExperts + 1)] = bad;
    std::string message;
    try {
      ep.exchange_counts(sent, kLocalExperts, 5);
    } catch (const Error& e) {
      message = e.what();
    }
    if (me == 1) {
      // The negative count itself; or the 1 + 9 rows rank 0 routes to rank 1's two experts.
      const std::string count = bad < 0 ? "count of -3 from ep rank 0" : "count of 10 rows from ep rank 0";
      EXPECT_TRUE(testing::contains(message, "ep rank 1 received a token " + count)) << message;
      EXPECT_TRUE(testing::contains(message, bad < 0 ? "cannot be negative" : "instead of overrunning its buffer")) << message;
    } else {
      EXPECT_EQ(message, "") << "rank " << me;
    }
  }
}

}  // namespace
}  // namespace tessera
