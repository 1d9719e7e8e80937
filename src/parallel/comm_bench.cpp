// Communication benchmark: message sizes, memory cap, option checks, timing loop (collectives and
// the p2p ping-pong) and the nccl-tests-style table.
#include "parallel/comm_bench.h"

#include <mpi.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>

#include "parallel/nccl_comm.h"

namespace tessera {
namespace {

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

// MemAvailable from /proc/meminfo, in bytes (0 when unreadable).
int64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

int ranks_on_this_node() {
  if (!mpi_running()) return 1;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int size = 1;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size;
}

}  // namespace

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string suffix;
  for (char c : text.substr(digits)) suffix += char(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, int> shifts{{"", 0},    {"b", 0},    {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20},
                                                 {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}};
  auto shift = shifts.find(suffix);
  TS_CHECK(digits > 0 && digits <= 12 && shift != shifts.end(), flag, ": '", text,
           "' is not a size; give bytes with an optional K, M or G suffix (1K = 1024)");
  const int64_t value = std::stoll(text.substr(0, digits));
  TS_CHECK(value > 0, flag, ": the size must be positive (got '", text, "')");
  TS_CHECK(value <= (INT64_MAX >> shift->second), flag, ": '", text, "' is too large");
  return value << shift->second;
}

std::string format_byte_size(int64_t bytes) {
  for (auto [shift, unit] : {std::pair{30, "G"}, {20, "M"}, {10, "K"}})
    if (bytes >= (int64_t(1) << shift) && bytes % (int64_t(1) << shift) == 0)
      return std::to_string(bytes >> shift) + unit;
  return std::to_string(bytes);
}

double bus_bandwidth_factor(CommOp op, int ranks) {
  const double n = ranks;
  if (op == CommOp::send) return 1.0;
  return op == CommOp::all_reduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

std::string_view comm_bench_op_name(CommOp op) { return op == CommOp::send ? "p2p" : comm_op_name(op); }

int64_t comm_bench_size_cap(Device device, int cuda_device) {
  int64_t memory =
      device == Device::cuda ? int64_t(cuda_free_memory(cuda_device)) : host_memory_available() / ranks_on_this_node();
  if (mpi_running()) MPI_Allreduce(MPI_IN_PLACE, &memory, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  int64_t cap = 4;
  while (cap * 2 * 3 <= memory) cap *= 2;
  return cap;
}

void check_comm_bench_options(const CommBenchOptions& options, int ranks) {
  TS_CHECK(options.iters >= 1, "--iters must be at least 1 (got ", options.iters, ")");
  TS_CHECK(options.warmup >= 0, "--warmup must not be negative (got ", options.warmup, ")");
  TS_CHECK(options.min_bytes >= 4 && options.min_bytes <= options.max_bytes, "--min-bytes (", options.min_bytes,
           ") must be at least 4 and at most --max-bytes (", options.max_bytes, ")");
  for (CommOp op : options.ops) {
    TS_CHECK(op == CommOp::all_reduce || op == CommOp::reduce_scatter || op == CommOp::all_gather ||
                 op == CommOp::send,
             "the communication benchmark times all_reduce, reduce_scatter, all_gather and p2p, not ",
             comm_op_name(op));
    TS_CHECK(op != CommOp::send || ranks >= 2, "--op p2p needs at least 2 ranks (this run has ", ranks,
             "); launch with mpirun -np 2 or more");
  }
}

std::vector<CommBenchRow> run_comm_bench(Comm& comm, const CommBenchOptions& options) {
  const int n = comm.size();
  check_comm_bench_options(options, n);
  using Clock = std::chrono::steady_clock;
  // The p2p partner: ranks 0-1, 2-3, ...; an odd rank out has none and only joins the barriers.
  const int rank = comm.rank(), peer = (rank ^ 1) < n ? rank ^ 1 : -1;
  std::vector<CommBenchRow> rows;
  for (CommOp op : options.ops) {
    const bool split = op == CommOp::reduce_scatter || op == CommOp::all_gather;
    for (int64_t size = options.min_bytes; size <= options.max_bytes; size *= 2) {
      // Reduce-scatter and all-gather need a whole number of elements per rank.
      const int64_t count = split ? size / 4 / n * n : size / 4;
      if (count == 0) continue;
      Tensor full = Tensor::zeros({count}, DType::f32, options.device);
      Tensor part = split ? Tensor::zeros({count / n}, DType::f32, options.device) : Tensor();
      auto call = [&] {
        if (op == CommOp::all_reduce) {
          comm.all_reduce(full);
        } else if (op == CommOp::reduce_scatter) {
          comm.reduce_scatter(full, part);
        } else if (op == CommOp::all_gather) {
          comm.all_gather(part, full);
        } else if (peer >= 0 && rank % 2 == 0) {  // p2p: one round trip
          comm.send(full, peer);
          comm.recv(full, peer);
        } else if (peer >= 0) {
          comm.recv(full, peer);
          comm.send(full, peer);
        }
      };
      for (int i = 0; i < options.warmup; ++i) call();
      comm.barrier();
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < options.iters; ++i) call();
      comm.barrier();  // every rank's span ends when the slowest finished
      const double per_call = std::chrono::duration<double>(Clock::now() - start).count() / options.iters;
      const double seconds = op == CommOp::send ? per_call / 2 : per_call;  // p2p: one way, half the round trip
      CommBenchRow row{op, count * 4, count, seconds * 1e6, 0, 0};
      row.algbw_gbs = double(row.bytes) / seconds / 1e9;
      row.busbw_gbs = row.algbw_gbs * bus_bandwidth_factor(op, n);
      rows.push_back(row);
    }
  }
  return rows;
}

std::string format_comm_bench(const std::vector<CommBenchRow>& rows) {
  std::string text = "#             op          size         count    time(us)  algbw(GB/s)  busbw(GB/s)\n";
  std::map<CommOp, std::pair<double, int>> busbw;  // sum, rows
  std::vector<CommOp> order;
  for (const CommBenchRow& row : rows) {
    char line[160];
    std::snprintf(line, sizeof line, "%16s  %12lld  %12lld  %10.2f  %11.3f  %11.3f\n",
                  std::string(comm_bench_op_name(row.op)).c_str(), static_cast<long long>(row.bytes),
                  static_cast<long long>(row.count), row.time_us, row.algbw_gbs, row.busbw_gbs);
    text += line;
    if (!busbw.count(row.op)) order.push_back(row.op);
    busbw[row.op].first += row.busbw_gbs;
    busbw[row.op].second += 1;
  }
  for (CommOp op : order) {
    char line[96];
    std::snprintf(line, sizeof line, "# average busbw %s: %.3f GB/s\n", std::string(comm_bench_op_name(op)).c_str(),
                  busbw[op].first / busbw[op].second);
    text += line;
  }
  return text;
}

}  // namespace tessera
