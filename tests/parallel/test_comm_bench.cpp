// The communication benchmark: size parsing and naming, the bus-bandwidth factors of nccl-tests,
// and a short run over the world whose rows follow the sizes, counts and formulas.
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

}  // namespace
}  // namespace tessera::testing
