// tessera bench comm: times all-reduce, reduce-scatter and all-gather over the world at doubling
// message sizes and prints, on rank 0, a table in the manner of nccl-tests (size, count, time,
// algbw, busbw); --op p2p times a ping-pong between rank pairs instead (one-way latency and
// bandwidth). Run it under mpirun or srun; alone it is a world of one, which sends nothing.
#include <cstdio>
#include <numeric>

#include "commands.h"
#include "parallel/comm_bench.h"
#include "parallel/nccl_comm.h"
#include "parallel/runtime.h"

namespace tessera::cli {
namespace {

struct BenchCommFlags {
  std::string min_bytes = "1K", max_bytes = "1G";
  int iters = 20, warmup = 5;
  std::string op = "all", backend = "mpi";
  double comm_timeout = 300.0;
};

std::vector<CommOp> bench_ops(const std::string& op) {
  if (op == "all_reduce") return {CommOp::all_reduce};
  if (op == "reduce_scatter") return {CommOp::reduce_scatter};
  if (op == "all_gather") return {CommOp::all_gather};
  if (op == "p2p") return {CommOp::send};
  return {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather};
}

void run_bench_comm(const BenchCommFlags& flags) {
  Runtime runtime(nullptr, nullptr);
  const bool rank0 = runtime.world_rank() == 0;
  CommBenchOptions options;
  try {  // errors every rank hits alike: rank 0 reports them
    options.min_bytes = parse_byte_size(flags.min_bytes, "--min-bytes");
    options.max_bytes = parse_byte_size(flags.max_bytes, "--max-bytes");
    TS_CHECK(options.min_bytes <= options.max_bytes, "--min-bytes (", flags.min_bytes, ") is larger than --max-bytes (",
             flags.max_bytes, ")");
    options.iters = flags.iters;
    options.warmup = flags.warmup;
    options.ops = bench_ops(flags.op);
    options.device = flags.backend == "nccl" ? Device::cuda : Device::cpu;
    TS_CHECK(flags.backend != "nccl" || cuda_device_available(),
             "--backend nccl needs a CUDA GPU and this machine has none; use --backend mpi");
    check_comm_bench_options(options, runtime.world_size());
  } catch (const Error& e) {
    if (!rank0) throw QuietError(e.what(), e.where());  // rank 0 reports it
    throw;
  }
  const int64_t cap = comm_bench_size_cap(options.device, runtime.local_rank());
  TS_CHECK(options.min_bytes <= cap, "--min-bytes ", flags.min_bytes, " does not fit in this rank's memory; at most ",
           format_byte_size(cap), " does");
  const bool capped = options.max_bytes > cap;
  options.max_bytes = std::min(options.max_bytes, cap);

  CommOptions comm_options;
  comm_options.timeout_s = flags.comm_timeout;
  std::vector<int> ranks(static_cast<size_t>(runtime.world_size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shared_ptr<Comm> world = flags.backend == "nccl"
                                    ? make_nccl_comm(runtime.world_size() > 1 ? MPI_COMM_WORLD : MPI_COMM_NULL, "world",
                                                     ranks, runtime.local_rank(), comm_options)
                                    : runtime.make_comm("world", ranks, comm_options);
  if (rank0) {
    std::printf(
        "# tessera bench comm: %s backend, %d rank(s) (%s), fp32, mean of %d calls after %d warm-up, "
        "each size timed between two barriers\n",
        flags.backend.c_str(), runtime.world_size(), runtime.launcher().c_str(), options.iters, options.warmup);
    if (capped)
      std::printf("# sizes above %s skipped: each rank's share of memory holds buffers of at most that size\n",
                  format_byte_size(cap).c_str());
    if (runtime.world_size() == 1) std::printf("# a world of one rank sends nothing: launch with mpirun -np N\n");
    if (flags.op == "p2p")
      std::printf("# p2p: ranks 0-1, 2-3, ... ping-pong, all pairs at once%s; a call is a round trip, time is half "
                  "of it (one way) and algbw = busbw = size / time\n",
                  runtime.world_size() % 2 ? " (the last rank idles)" : "");
    std::fflush(stdout);
  }
  std::vector<CommBenchRow> rows = run_comm_bench(*world, options);
  if (rank0) std::fputs(format_comm_bench(rows).c_str(), stdout);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench =
      add_command(app, "bench", "Benchmarks: train (training-step throughput), comm (collectives, point to point)");
  bench->require_subcommand(1, 1);
  add_bench_train_command(*bench);
  auto flags = std::make_shared<BenchCommFlags>();
  CLI::App* comm =
      add_command(*bench, "comm",
                  "Time all-reduce, reduce-scatter, all-gather or a p2p ping-pong at doubling sizes, nccl-tests style");
  comm->add_option("--min-bytes", flags->min_bytes, "Smallest message; K, M, G suffixes (1K = 1024)")
      ->capture_default_str();
  comm->add_option("--max-bytes", flags->max_bytes, "Largest message, capped at what memory allows")
      ->capture_default_str();
  comm->add_option("--iters", flags->iters, "Timed calls per size")->capture_default_str();
  comm->add_option("--warmup", flags->warmup, "Untimed calls per size before them")->capture_default_str();
  comm->add_option("--op", flags->op, "all_reduce, reduce_scatter, all_gather, all (those three) or p2p")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "all", "p2p"}))
      ->capture_default_str();
  comm->add_option("--backend", flags->backend, "mpi (CPU tensors) or nccl (CUDA tensors, one GPU per rank)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  comm->add_option("--comm-timeout", flags->comm_timeout, "Seconds before a collective counts as hung")
      ->capture_default_str();
  comm->callback([flags] { run_bench_comm(*flags); });
}

}  // namespace tessera::cli
