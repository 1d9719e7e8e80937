// Every collective of the MPI communicator, blocking and non-blocking, against values computed by
// hand: sums and maxima of integers (exact in fp32, and in bf16 and f16), uneven all_to_allv counts, a send/recv ring,
// a broadcast from the last rank, and groups split out of the world.
#include <gtest/gtest.h>

#include "comm_testing.h"
#include "ops/cast.h"

namespace tessera::testing {
namespace {

TEST(CommCollectives, AllReduceSumMaxMinBlockingAndAsync) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  const float rank_sum = float(n * (n + 1) / 2);
  Tensor sum = f32_tensor(1000, [&](int64_t i) { return float((r + 1) * (i % 7)); });
  comm->all_reduce(sum);
  Tensor max = f32_tensor(1000, [&](int64_t i) { return float((r + 1) * (i % 7)); });
  Tensor min = f32_tensor(1000, [&](int64_t i) { return float((r + 1) * (i % 7)); });
  Work max_work = comm->all_reduce_async(max, ReduceOp::max);
  Work min_work = comm->all_reduce_async(min, ReduceOp::min);
  max_work.wait();
  min_work.wait();
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(sum.f32()[i], rank_sum * float(i % 7)) << i;
    ASSERT_EQ(max.f32()[i], float(n * (i % 7))) << i;
    ASSERT_EQ(min.f32()[i], float(i % 7)) << i;
  }
  Tensor ints = Tensor::zeros({3}, DType::i32);
  for (int i = 0; i < 3; ++i) ints.data<int32_t>()[i] = (r + 1) << (8 * i);
  comm->all_reduce(ints);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ints.data<int32_t>()[i], int32_t(rank_sum) << (8 * i));
}

TEST(CommCollectives, ReduceScatterSumAndMax) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  const int64_t chunk = 5;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    Tensor in = f32_tensor(n * chunk, [&](int64_t j) { return float(r * 100 + j); });
    Tensor out = Tensor::zeros({chunk});
    comm->reduce_scatter_async(in, out, op).wait();
    for (int64_t k = 0; k < chunk; ++k) {
      float j = float(r * chunk + k);  // this rank's chunk
      float expected = op == ReduceOp::sum ? 100.0f * float(n * (n - 1) / 2) + float(n) * j : 100.0f * float(n - 1) + j;
      EXPECT_EQ(out.f32()[k], expected) << "k=" << k;
    }
  }
}

// 16-bit floats reduce through user-defined MPI operations: small integers are exact in bf16 and
// f16, and a sum that is not (1 + n·2^-9 rounds in bf16 at every step) lands on a bf16 value.
TEST(CommCollectives, SixteenBitFloatsReduce) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  const float rank_sum = float(n * (n + 1) / 2);
  for (DType dtype : {DType::bf16, DType::f16}) {
    auto make = [&](int64_t count, auto value) {
      Tensor t = Tensor::zeros({count}, dtype);
      Tensor wide = f32_tensor(count, value);
      cast_copy(t, wide);
      return t;
    };
    auto read = [&](const Tensor& t) {
      Tensor wide = Tensor::zeros(t.shape());
      cast_copy(wide, t);
      return wide;
    };
    Tensor sum = make(64, [&](int64_t i) { return float((r + 1) * (i % 7)); });
    Tensor max = make(64, [&](int64_t i) { return float((r + 1) * (i % 7)); });
    comm->all_reduce(sum);
    comm->all_reduce(max, ReduceOp::max);
    const Tensor sums = read(sum), maxima = read(max);
    for (int64_t i = 0; i < 64; ++i) {
      ASSERT_EQ(sums.f32()[i], rank_sum * float(i % 7)) << dtype_name(dtype) << " " << i;
      ASSERT_EQ(maxima.f32()[i], float(n * (i % 7))) << dtype_name(dtype) << " " << i;
    }
    const int64_t chunk = 3;
    Tensor in = make(n * chunk, [&](int64_t j) { return float(r + j); });
    Tensor out = Tensor::zeros({chunk}, dtype);
    comm->reduce_scatter(in, out);
    const Tensor scattered = read(out);
    for (int64_t k = 0; k < chunk; ++k)
      EXPECT_EQ(scattered.f32()[k], float(n * (n - 1) / 2) + float(n) * float(r * chunk + k)) << dtype_name(dtype);
  }
  Tensor rounding = Tensor::zeros({1}, DType::bf16);
  rounding.data<bf16>()[0] = to_bf16(r == 0 ? 1.0f : 1.0f / 512.0f);
  comm->all_reduce(rounding);
  const float got = to_float(rounding.data<bf16>()[0]);
  EXPECT_EQ(to_float(to_bf16(got)), got);  // a bf16 value: rounded, not an f32 sum
  EXPECT_NEAR(got, 1.0f + float(n - 1) / 512.0f, float(n) / 256.0f);
}

TEST(CommCollectives, AllGatherIntoSeparateBufferAndInPlace) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  Tensor in = f32_tensor(3, [&](int64_t k) { return float(r * 10 + k); });
  Tensor out = Tensor::zeros({n * 3});
  comm->all_gather(in, out);
  Tensor full = Tensor::zeros({n * 3});
  Tensor mine = full.view(r * 3, {3});
  for (int64_t k = 0; k < 3; ++k) mine.f32()[k] = float(r * 10 + k);
  comm->all_gather_async(mine, full).wait();
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(out.f32()[q * 3 + k], float(q * 10 + k));
      EXPECT_EQ(full.f32()[q * 3 + k], float(q * 10 + k));
    }
}

TEST(CommCollectives, BroadcastFromTheLastRank) {
  auto comm = world_comm("world");
  const int root = comm->size() - 1;
  Tensor t = f32_tensor(257, [&](int64_t i) { return comm->rank() == root ? float(42 + i) : -1.0f; });
  Tensor u = Tensor::zeros({4}, DType::bf16);
  if (comm->rank() == root) u.data<bf16>()[3] = to_bf16(2.5f);
  comm->broadcast(t, root);
  comm->broadcast_async(u, root).wait();
  for (int64_t i = 0; i < 257; ++i) ASSERT_EQ(t.f32()[i], float(42 + i));
  EXPECT_EQ(to_float(u.data<bf16>()[3]), 2.5f);
}

TEST(CommCollectives, AllToAllSendsChunkPToRankP) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  const int c = 2;
  Tensor in = f32_tensor(n * c, [&](int64_t j) { return float(r * 100 + (j / c) * 10 + j % c); });
  Tensor out = Tensor::zeros({n * c});
  comm->all_to_all(in, out);
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < c; ++k) EXPECT_EQ(out.f32()[q * c + k], float(q * 100 + r * 10 + k));
}

TEST(CommCollectives, AllToAllvWithUnevenCounts) {
  auto comm = world_comm("world");
  const int n = comm->size(), r = comm->rank();
  // Rank r sends r + p + 1 elements to rank p, valued src·1000 + dst·100 + k.
  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(send_counts);
  int64_t send_total = 0, recv_total = 0;
  for (int p = 0; p < n; ++p) {
    send_counts[size_t(p)] = r + p + 1;
    recv_counts[size_t(p)] = p + r + 1;
    send_total += r + p + 1;
    recv_total += p + r + 1;
  }
  Tensor in = Tensor::zeros({send_total});
  for (int p = 0, at = 0; p < n; ++p)
    for (int k = 0; k < r + p + 1; ++k) in.f32()[at++] = float(r * 1000 + p * 100 + k);
  Tensor out = Tensor::zeros({recv_total + 3});  // capacity beyond what arrives stays untouched
  comm->all_to_allv_async(in, send_counts, out, recv_counts).wait();
  int at = 0;
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < q + r + 1; ++k) EXPECT_EQ(out.f32()[at++], float(q * 1000 + r * 100 + k)) << q << "," << k;
  EXPECT_EQ(out.f32()[recv_total], 0.0f);
}

TEST(CommCollectives, SendRecvAroundARing) {
  auto comm = world_comm("pp");
  const int n = comm->size(), r = comm->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Tensor out = f32_tensor(1 << 16, [&](int64_t i) { return float(r * 7 + i % 1000); });
  Tensor in = Tensor::zeros({1 << 16});
  Work received = comm->recv_async(in, prev);
  Work sent = comm->send_async(out, next);
  received.wait();
  sent.wait();
  for (int64_t i = 0; i < (1 << 16); ++i) ASSERT_EQ(in.f32()[i], float(prev * 7 + i % 1000)) << i;
  comm->barrier();
}

TEST(CommCollectives, SplitGroupsKnowTheirMembers) {
  // Even and odd world ranks: groups of two with 4 ranks, groups of one (no MPI) with 2.
  const int color = world_rank() % 2;
  auto comm = split_comm(color ? "odd" : "even", color);
  const int expected_size = (world_size() - color + 1) / 2;
  ASSERT_EQ(comm->size(), expected_size);
  EXPECT_EQ(comm->name(), color ? "odd" : "even");
  for (int q = 0; q < comm->size(); ++q) EXPECT_EQ(comm->world_ranks()[size_t(q)], 2 * q + color);
  EXPECT_EQ(comm->world_ranks()[size_t(comm->rank())], world_rank());
  Tensor t = f32_tensor(4, [&](int64_t) { return float(world_rank()); });
  comm->all_reduce(t);
  float expected = 0;
  for (int w : comm->world_ranks()) expected += float(w);
  EXPECT_EQ(t.f32()[0], expected);
}

}  // namespace
}  // namespace tessera::testing
