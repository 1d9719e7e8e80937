// The NCCL communicator. Each call records an event on the compute stream, makes the group's
// communication stream wait for it (the inputs are then final), queues the NCCL call there and
// records a completion event that Work polls. Groups of two or more ranks keep an arrival channel
// over a duplicate of the bootstrap communicator, served by an idle MpiProgress thread, so a
// timeout names the missing ranks exactly as on MPI before the NCCL communicator is aborted.
#include "parallel/nccl_comm.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "core/cuda/device.h"
#include "parallel/comm_args.h"
#include "parallel/comm_timeout.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_progress.h"
#include "parallel/nccl_check.h"
#include "parallel/work_state.h"

namespace tessera {
namespace {

constexpr CommBackend kNccl{"NCCL", Device::cuda, true};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::u32: return ncclUint32;
    case DType::u16: return ncclFloat16;  // moved, never reduced (comm_args refuses)
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

size_t count_of(const Tensor& t) { return size_t(t.numel()); }

char* bytes_of(const Tensor& t) { return static_cast<char*>(tensor_data(t)); }

// What a communicator shares with its pending Work (a Work may outlive its Comm).
struct NcclGroup {
  NcclGroup(MPI_Comm bootstrap, std::string name_in, std::vector<int> world_ranks_in, int device_in,
            const CommOptions& options_in)
      : name(std::move(name_in)),
        world_ranks(std::move(world_ranks_in)),
        options(options_in),
        device(device_in),
        size(int(world_ranks.size())),
        recorder(options.flight_recorder_entries) {
    ncclUniqueId id{};
    if (bootstrap != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_rank(bootstrap, &rank));
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (size > 1) MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap));
    CUDA_CHECK(cudaSetDevice(device));
    NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&scratch, sizeof(float)));
    if (size > 1) {
      arrivals.emplace(bootstrap, recorder);
      server.emplace(recorder, [this] { arrivals->serve(); });  // never gets requests: serves only
    }
  }

  ~NcclGroup() {
    server.reset();
    if (!aborted) ncclCommDestroy(comm);  // an aborted communicator is already released
    cudaFree(scratch);
    cudaStreamDestroy(stream);
  }

  std::string name;
  std::vector<int> world_ranks;
  CommOptions options;
  int device, size, rank = 0;
  FlightRecorder recorder;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // the barrier's all-reduce
  std::atomic<bool> aborted{false};
  std::mutex issue_mutex;
  std::optional<ArrivalChannel> arrivals;
  std::optional<MpiProgress> server;  // last: destroyed first
};

class NcclWork final : public Work::State {
 public:
  NcclWork(std::shared_ptr<NcclGroup> group, cudaEvent_t done_event, std::vector<Tensor> buffers, TimedOutCall call)
      : group_(std::move(group)), event_(done_event), buffers_(std::move(buffers)), call_(call) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  bool done() const override { return cudaEventQuery(event_) == cudaSuccess; }

  // Polls the completion event; the timeout runs from the call to wait(), as on MPI.
  void wait() override {
    NcclGroup& g = *group_;
    const bool p2p = call_.op == CommOp::send || call_.op == CommOp::recv;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(g.options.timeout_s));
    for (;;) {
      TS_CHECK(!g.aborted, "comm '", g.name, "' ", comm_op_name(call_.op),
               ": the communicator was aborted after an earlier timeout");
      cudaError_t state = cudaEventQuery(event_);
      if (state == cudaSuccess) break;
      TS_CHECK(state == cudaErrorNotReady, "comm '", g.name, "' ", comm_op_name(call_.op),
               " failed on the GPU: ", cudaGetErrorString(state));
      ncclResult_t async = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(g.comm, &async));
      TS_CHECK(async == ncclSuccess || async == ncclInProgress, "comm '", g.name, "' ", comm_op_name(call_.op),
               " failed in NCCL: ", ncclGetErrorString(async), " (", ncclGetLastError(g.comm), ")");
      if (std::chrono::steady_clock::now() >= deadline) {
        // Stop the kernels that wait for the missing ranks, then report.
        ncclCommAbort(g.comm);
        g.aborted = true;
        throw_comm_timeout({g.name, g.world_ranks, g.rank, g.options.timeout_s}, call_, g.recorder,
                           g.arrivals ? &*g.arrivals : nullptr);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    g.recorder.finish(call_.record, p2p, FlightState::done);
  }

 private:
  std::shared_ptr<NcclGroup> group_;
  cudaEvent_t event_;
  std::vector<Tensor> buffers_;  // alive until the GPU is done with them
  TimedOutCall call_;
};

class NcclComm final : public Comm {
 public:
  explicit NcclComm(std::shared_ptr<NcclGroup> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size; }
  const std::string& name() const override { return group_->name; }
  const std::vector<int>& world_ranks() const override { return group_->world_ranks; }

  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    check_all_reduce(*this, kNccl, t);
    return issue(CommOp::all_reduce, t.bytes(), -1, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(bytes_of(t), bytes_of(t), count_of(t), nccl_type(t.dtype()), nccl_op(op), c, s);
    });
  }

  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_reduce_scatter(*this, kNccl, in, out);
    return issue(CommOp::reduce_scatter, in.bytes(), -1, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(bytes_of(in), bytes_of(out), count_of(out), nccl_type(in.dtype()), nccl_op(op), c, s);
    });
  }

  // In place (in = this rank's chunk of out) is NCCL's own in-place case.
  Work all_gather_async(const Tensor& in, Tensor& out) override {
    check_all_gather(*this, kNccl, in, out);
    return issue(CommOp::all_gather, out.bytes(), -1, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(bytes_of(in), bytes_of(out), count_of(in), nccl_type(in.dtype()), c, s);
    });
  }

  Work broadcast_async(Tensor& t, int root) override {
    check_broadcast(*this, kNccl, t, root);
    return issue(CommOp::broadcast, t.bytes(), -1, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(bytes_of(t), bytes_of(t), count_of(t), nccl_type(t.dtype()), root, c, s);
    });
  }

  Work all_to_all_async(const Tensor& in, Tensor& out) override {
    check_all_to_all(*this, kNccl, in, out);
    const size_t peers = size_t(size());
    const std::vector<int64_t> counts(peers, int64_t(in.bytes() / peers));  // bytes per peer
    return issue(CommOp::all_to_all, in.bytes(), -1, {in, out},
                 [&](ncclComm_t c, cudaStream_t s) { return exchange(in, counts, out, counts, 1, c, s); });
  }

  Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                         const std::vector<int64_t>& recv_counts) override {
    check_all_to_allv(*this, kNccl, in, send_counts, out, recv_counts);
    const size_t element = dtype_size(in.dtype());
    return issue(CommOp::all_to_allv, in.bytes(), -1, {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return exchange(in, send_counts, out, recv_counts, element, c, s);
    });
  }

  Work send_async(const Tensor& t, int peer) override {
    check_peer(*this, kNccl, CommOp::send, t, peer);
    return issue(CommOp::send, t.bytes(), peer, {t},
                 [&](ncclComm_t c, cudaStream_t s) { return ncclSend(bytes_of(t), t.bytes(), ncclUint8, peer, c, s); });
  }

  Work recv_async(Tensor& t, int peer) override {
    check_peer(*this, kNccl, CommOp::recv, t, peer);
    return issue(CommOp::recv, t.bytes(), peer, {t},
                 [&](ncclComm_t c, cudaStream_t s) { return ncclRecv(bytes_of(t), t.bytes(), ncclUint8, peer, c, s); });
  }

  // NCCL has no barrier: an all-reduce of one float stands in.
  Work barrier_async() override {
    float* scratch = group_->scratch;
    return issue(CommOp::barrier, 0, -1, {}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, c, s);
    });
  }

 private:
  // Sends counts[p]·element bytes to each peer p and receives recv_counts[p]·element from it, chunks
  // contiguous in peer order, as one NCCL group.
  ncclResult_t exchange(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                        const std::vector<int64_t>& recv_counts, size_t element, ncclComm_t c, cudaStream_t s) {
    ncclResult_t code = ncclGroupStart();
    size_t sent = 0, received = 0;
    for (int p = 0; p < size() && code == ncclSuccess; ++p) {
      const size_t send_bytes = size_t(send_counts[size_t(p)]) * element;
      const size_t recv_bytes = size_t(recv_counts[size_t(p)]) * element;
      code = ncclSend(bytes_of(in) + sent, send_bytes, ncclUint8, p, c, s);
      if (code == ncclSuccess) code = ncclRecv(bytes_of(out) + received, recv_bytes, ncclUint8, p, c, s);
      sent += send_bytes;
      received += recv_bytes;
    }
    ncclResult_t end = ncclGroupEnd();
    return code != ncclSuccess ? code : end;
  }

  // Orders the call after the compute stream's work (where the ops wrote the inputs), queues it with `start(comm, stream)` and
  // returns a Work on its completion event.
  template <typename Start>
  Work issue(CommOp op, size_t bytes, int peer, std::vector<Tensor> buffers, Start&& start) {
    NcclGroup& g = *group_;
    std::lock_guard lock(g.issue_mutex);
    TS_CHECK(!g.aborted, "comm '", g.name, "' was aborted after a timeout; it takes no more calls");
    const bool p2p = op == CommOp::send || op == CommOp::recv;
    uint64_t record = p2p ? g.recorder.start_p2p(op, peer, bytes) : g.recorder.start_collective(op, bytes);
    cudaEvent_t ready = nullptr, done = nullptr;
    CUDA_CHECK(cudaSetDevice(g.device));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, cuda_compute_stream()));
    CUDA_CHECK(cudaStreamWaitEvent(g.stream, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once its wait is resolved
    ncclResult_t code = start(g.comm, g.stream);
    if (code != ncclSuccess) {
      g.recorder.finish(record, p2p, FlightState::failed);
      TS_FAIL("comm '", g.name, "' ", comm_op_name(op), " could not start on rank ",
              comm_rank_label(g.world_ranks, g.rank), ": ", ncclGetErrorString(code), " (", ncclGetLastError(g.comm),
              ")");
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, g.stream));
    return Work(std::make_shared<NcclWork>(group_, done, std::move(buffers), TimedOutCall{op, record, peer, bytes}));
  }

  std::shared_ptr<NcclGroup> group_;
};

}  // namespace

bool nccl_built() { return true; }

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

size_t cuda_free_memory(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

std::shared_ptr<Comm> make_nccl_comm(MPI_Comm bootstrap, std::string name, std::vector<int> world_ranks, int device,
                                     const CommOptions& options) {
  int devices = 0;
  cudaError_t found = cudaGetDeviceCount(&devices);
  TS_CHECK(found == cudaSuccess && devices > 0, "comm '", name, "': the NCCL backend needs a CUDA GPU and this ",
           "machine has none (", found == cudaSuccess ? "no device" : cudaGetErrorString(found),
           "); use the MPI backend");
  TS_CHECK(device >= 0 && device < devices, "comm '", name, "': CUDA device ", device, " asked for, but this node has ",
           devices, "; run at most ", devices, " ranks per node");
  TS_CHECK(options.timeout_s > 0, "comm '", name, "': the timeout must be positive (got ", options.timeout_s, " s)");
  TS_CHECK(!world_ranks.empty(), "comm '", name, "': no member ranks given");
  if (world_ranks.size() > 1) {
    TS_CHECK(bootstrap != MPI_COMM_NULL, "comm '", name, "': a NCCL group of ", world_ranks.size(),
             " ranks needs an MPI communicator to start from");
    int size = 0, level = MPI_THREAD_SINGLE;
    MPI_CHECK(MPI_Comm_size(bootstrap, &size));
    TS_CHECK(size_t(size) == world_ranks.size(), "comm '", name, "': ", world_ranks.size(),
             " world ranks given for a communicator of ", size);
    MPI_CHECK(MPI_Query_thread(&level));
    TS_CHECK(level == MPI_THREAD_MULTIPLE, "comm '", name,
             "': MPI was initialised without MPI_THREAD_MULTIPLE, which the arrival channel needs");
  }
  return std::make_shared<NcclComm>(
      std::make_shared<NcclGroup>(bootstrap, std::move(name), std::move(world_ranks), device, options));
}

}  // namespace tessera
