// The communication benchmark: size parsing and naming, the bus-bandwidth factors of nccl-tests,
// and short runs over the world (collectives, then the p2p ping-pong, also with an odd rank out)
// whose rows follow the sizes, counts and formulas.
#include <gtest/gtest.h>

#include "comm_testing.h"
#include "parallel/comm_bench.h"
#include "support/test_support.h"

namespace tessera::testing {
namespace {

TEST(CommBench, ByteSizesParseAndPrint) {
  EXPECT_EQ(parse_byte_size("4096", "--min-bytes"), 4096);
  EXPECT_EQ(parse_byte_size("1K", "--min-bytes"), 1024);
  EXPECT_EQ(parse_byte_size("64m", "--min-bytes"), int64_t(64) << 20);
  EXPECT_EQ(parse_byte_size("1GiB", "--max-bytes"), int64_t(1) << 30);
  EXPECT_EQ(error_of([] { parse_byte_size("12X", "--max-bytes"); }),
            "--max-bytes: '12X' is not a size; give bytes with an optional K, M or G suffix (1K = 1024)");
  EXPECT_TRUE(contains(error_of([] { parse_byte_size("0", "--min-bytes"); }), "must be positive"));
  EXPECT_TRUE(contains(error_of([] { parse_byte_size("999999999999G", "--max-bytes"); }), "is too large"));
  EXPECT_EQ(format_byte_size(1024), "1K");
  EXPECT_EQ(format_byte_size(int64_t(512) << 20), "512M");
  EXPECT_EQ(format_byte_size(int64_t(1) << 30), "1G");
  EXPECT_EQ(format_byte_size(1000), "1000");
}

TEST(CommBench, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CommOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CommOp::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CommOp::all_gather, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CommOp::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CommOp::send, 4), 1.0);
  EXPECT_EQ(comm_bench_op_name(CommOp::send), "p2p");
  EXPECT_EQ(comm_bench_op_name(CommOp::all_gather), "all_gather");
}

TEST(CommBench, ShortRunOverTheWorld) {
  auto comm = world_comm("world");
  const int n = comm->size();
  CommBenchOptions options;
  options.min_bytes = 1024;
  options.max_bytes = 4096;
  options.iters = 2;
  options.warmup = 1;
  std::vector<CommBenchRow> rows = run_comm_bench(*comm, options);
  ASSERT_EQ(rows.size(), 9u);  // 3 ops x {1K, 2K, 4K}
  for (size_t i = 0; i < rows.size(); ++i) {
    const CommBenchRow& row = rows[i];
    EXPECT_EQ(row.op, options.ops[i / 3]);
    const int64_t elements = (int64_t(1024) << (i % 3)) / 4;
    EXPECT_EQ(row.count, row.op == CommOp::all_reduce ? elements : elements / n * n);
    EXPECT_EQ(row.bytes, row.count * 4);
    EXPECT_GT(row.time_us, 0.0);
    EXPECT_NEAR(row.algbw_gbs, double(row.bytes) / row.time_us * 1e-3, 1e-9 * row.algbw_gbs);
    EXPECT_DOUBLE_EQ(row.busbw_gbs, row.algbw_gbs * bus_bandwidth_factor(row.op, n));
  }
  std::string table = format_comm_bench(rows);
  EXPECT_TRUE(contains(table, "time(us)  algbw(GB/s)  busbw(GB/s)")) << table;
  EXPECT_TRUE(contains(table, "# average busbw reduce_scatter: ")) << table;
  options.iters = 0;
  EXPECT_TRUE(contains(error_of([&] { run_comm_bench(*comm, options); }), "--iters must be at least 1"));
}

// Rows of one message each way: 1K, 2K, 4K, one-way time, algbw = busbw.
void expect_p2p_rows(Comm& comm) {
  CommBenchOptions options;
  options.min_bytes = 1024;
  options.max_bytes = 4096;
  options.iters = 2;
  options.warmup = 1;
  options.ops = {CommOp::send};
  std::vector<CommBenchRow> rows = run_comm_bench(comm, options);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].op, CommOp::send);
    EXPECT_EQ(rows[i].bytes, int64_t(1024) << i);
    EXPECT_EQ(rows[i].count, rows[i].bytes / 4);
    EXPECT_GT(rows[i].time_us, 0.0);
    EXPECT_NEAR(rows[i].algbw_gbs, double(rows[i].bytes) / rows[i].time_us * 1e-3, 1e-9 * rows[i].algbw_gbs);
    EXPECT_DOUBLE_EQ(rows[i].busbw_gbs, rows[i].algbw_gbs);
  }
  std::string table = format_comm_bench(rows);
  EXPECT_TRUE(contains(table, "             p2p          1024           256  ")) << table;
  EXPECT_TRUE(contains(table, "# average busbw p2p: ")) << table;
}

TEST(CommBench, PointToPointPingPong) {
  expect_p2p_rows(*world_comm("world"));
  if (world_size() >= 3) {  // ranks 0-2 apart: rank 2 has no partner and only joins the barriers
    auto three = split_comm("three", world_rank() < 3 ? 0 : 1);
    if (world_rank() < 3) expect_p2p_rows(*three);
  }
  CommBenchOptions options;
  options.ops = {CommOp::send};
  EXPECT_EQ(error_of([&] { check_comm_bench_options(options, 1); }),
            "--op p2p needs at least 2 ranks (this run has 1); launch with mpirun -np 2 or more");
}

}  // namespace
}  // namespace tessera::testing
