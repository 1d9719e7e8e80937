// Communication benchmark, after nccl-tests: times all-reduce, reduce-scatter and all-gather of fp32
// over a communicator for message sizes doubling from a minimum to a maximum, and reports the mean
// time per call, the algorithm bandwidth (algbw = bytes / time) and the bus bandwidth, which is what
// each rank's link carries and so compares across rank counts: all-reduce busbw = algbw·2(n−1)/n,
// reduce-scatter and all-gather busbw = algbw·(n−1)/n. "bytes" is the full buffer (all-reduce's
// tensor, reduce-scatter's input, all-gather's output), as in nccl-tests. Point to point ("p2p",
// CommOp::send here) is a ping-pong: ranks 0 and 1, 2 and 3, ... send a message and send it back,
// all pairs at once, an odd rank out idle; its time is one way (half the round trip) and its
// algbw = busbw = bytes / that time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm_args.h"

namespace tessera {

struct CommBenchOptions {
  int64_t min_bytes = int64_t(1) << 10;
  int64_t max_bytes = int64_t(1) << 30;
  int iters = 20;
  int warmup = 5;
  std::vector<CommOp> ops{CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather};
  Device device = Device::cpu;
};

struct CommBenchRow {
  CommOp op;
  int64_t bytes = 0;  // the full buffer (p2p: the message), rounded down to whole elements per rank
  int64_t count = 0;  // fp32 elements in it
  double time_us = 0, algbw_gbs = 0, busbw_gbs = 0;
};

// "1024", "1K", "64M", "1G" (K = 1024); throws naming `flag` when the text is not a size.
int64_t parse_byte_size(const std::string& text, const std::string& flag);
// The inverse for powers of two: 1024 -> "1K"; other sizes in plain bytes.
std::string format_byte_size(int64_t bytes);
// busbw / algbw for `op` over `ranks` ranks (1 for p2p).
double bus_bandwidth_factor(CommOp op, int ranks);
// The op's name in the table and in --op: its collective's name, or "p2p" for CommOp::send.
std::string_view comm_bench_op_name(CommOp op);

// Throws one line naming the flag to fix when `options` cannot run over `ranks` ranks.
void check_comm_bench_options(const CommBenchOptions& options, int ranks);

// The largest message size whose buffers (about three times the message: input, output, MPI's or
// NCCL's staging) fit in the memory this rank can use: host memory available divided among the
// ranks of this node, or the GPU's free memory. The minimum over the world when MPI runs.
int64_t comm_bench_size_cap(Device device, int cuda_device);

// Collective over every rank of `comm`: each size and op is timed between two barriers, so every
// rank measures the same span (p2p: that of the slowest pair); the rows come back in order of op,
// then size.
std::vector<CommBenchRow> run_comm_bench(Comm& comm, const CommBenchOptions& options);

// The table that rank 0 prints, one line per row, and the average bus bandwidth per op.
std::string format_comm_bench(const std::vector<CommBenchRow>& rows);

}  // namespace tessera
