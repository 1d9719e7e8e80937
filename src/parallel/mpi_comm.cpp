// The MPI communicator: each collective is one MPI_I* request handed to the group's progress
// thread; Work waits on it with the group's timeout. A timeout dumps the flight recorder, asks the
// other ranks how far they got (arrival channel), and throws one line naming who is missing.
#include "parallel/mpi_comm.h"

#include "parallel/arrival_channel.h"
#include "parallel/comm_timeout.h"
#include "parallel/mpi_check.h"
#include "parallel/mpi_float16_ops.h"
#include "parallel/mpi_progress.h"
#include "parallel/work_state.h"

namespace tessera {
namespace {

constexpr CommBackend kMpi{"MPI", Device::cpu, true};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::u32: return MPI_UINT32_T;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return MPI_UINT16_T;  // moved as words; 16-bit floats reduce by mpi_reduce_op's
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_reduce_op(ReduceOp op, DType dtype) {
  if (dtype == DType::bf16 || dtype == DType::f16) return mpi_float16_op(dtype, op);
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

int count_of(const Tensor& t) { return int(t.numel()); }  // checked <= INT_MAX by comm_args

// The state a communicator shares with its pending Work, so a Work may outlive its Comm. The
// progress thread holds requests only, never the group, so the group is never destroyed on it.
struct MpiGroup {
  MpiGroup(MPI_Comm comm_in, std::string name_in, std::vector<int> world_ranks_in, const CommOptions& options_in)
      : name(std::move(name_in)),
        world_ranks(std::move(world_ranks_in)),
        options(options_in),
        comm(comm_in),
        recorder(options.flight_recorder_entries),
        arrivals(comm, recorder),
        progress(recorder, [this] { arrivals.serve(); }) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
  }

  ~MpiGroup() {
    size_t abandoned = progress.stop();
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A request that never completed still refers to the communicator: leave it allocated.
    if (!finalized && abandoned == 0) MPI_Comm_free(&comm);
  }

  std::string rank_label(int r) const { return comm_rank_label(world_ranks, r); }

  std::string name;
  std::vector<int> world_ranks;
  CommOptions options;
  MPI_Comm comm;
  int rank = 0, size = 1;
  FlightRecorder recorder;
  ArrivalChannel arrivals;
  std::mutex issue_mutex;  // one issuer at a time: sequence numbers follow MPI call order
  MpiProgress progress;    // last: its thread starts once everything above exists
};

class MpiWork final : public Work::State {
 public:
  MpiWork(std::shared_ptr<MpiGroup> group, std::shared_ptr<MpiRequest> request, CommOp op, int peer, size_t bytes)
      : group_(std::move(group)), request_(std::move(request)), op_(op), peer_(peer), bytes_(bytes) {}

  // The timeout runs from the call to wait(): a reduction started early in backward is not
  // charged for the compute that overlapped it.
  void wait() override {
    MpiGroup& g = *group_;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(g.options.timeout_s));
    if (!g.progress.wait_until(*request_, deadline))
      throw_comm_timeout({g.name, g.world_ranks, g.rank, g.options.timeout_s}, {op_, request_->record, peer_, bytes_},
                         g.recorder, &g.arrivals);
    TS_CHECK(request_->error == MPI_SUCCESS, "comm '", g.name, "' ", comm_op_name(op_),
             request_->p2p ? "" : " #" + std::to_string(request_->record), " failed on rank ", g.rank_label(g.rank),
             ": ", detail::mpi_error_text(request_->error));
  }
  bool done() const override { return request_->done; }

 private:
  std::shared_ptr<MpiGroup> group_;
  std::shared_ptr<MpiRequest> request_;
  CommOp op_;
  int peer_;
  size_t bytes_;
};

class MpiComm final : public Comm {
 public:
  explicit MpiComm(std::shared_ptr<MpiGroup> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size; }
  const std::string& name() const override { return group_->name; }
  const std::vector<int>& world_ranks() const override { return group_->world_ranks; }

  Work all_reduce_async(Tensor& t, ReduceOp op) override {
    check_all_reduce(*this, kMpi, t);
    return issue(CommOp::all_reduce, t.bytes(), -1, {t}, {}, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, tensor_data(t), count_of(t), mpi_type(t.dtype()),
                           mpi_reduce_op(op, t.dtype()), c, r);
    });
  }

  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_reduce_scatter(*this, kMpi, in, out);
    return issue(CommOp::reduce_scatter, in.bytes(), -1, {in, out}, {}, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Ireduce_scatter_block(tensor_data(in), tensor_data(out), count_of(out), mpi_type(in.dtype()),
                                       mpi_reduce_op(op, in.dtype()), c, r);
    });
  }

  Work all_gather_async(const Tensor& in, Tensor& out) override {
    check_all_gather(*this, kMpi, in, out);
    const void* send = all_gather_in_place(*this, in, out) ? MPI_IN_PLACE : tensor_data(in);
    return issue(CommOp::all_gather, out.bytes(), -1, {in, out}, {}, [&](MPI_Comm c, MPI_Request* r) {
      MPI_Datatype type = mpi_type(in.dtype());
      return MPI_Iallgather(send, count_of(in), type, tensor_data(out), count_of(in), type, c, r);
    });
  }

  Work broadcast_async(Tensor& t, int root) override {
    check_broadcast(*this, kMpi, t, root);
    return issue(CommOp::broadcast, t.bytes(), -1, {t}, {}, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Ibcast(tensor_data(t), count_of(t), mpi_type(t.dtype()), root, c, r);
    });
  }

  Work all_to_all_async(const Tensor& in, Tensor& out) override {
    check_all_to_all(*this, kMpi, in, out);
    return issue(CommOp::all_to_all, in.bytes(), -1, {in, out}, {}, [&](MPI_Comm c, MPI_Request* r) {
      MPI_Datatype type = mpi_type(in.dtype());
      int chunk = count_of(in) / size();
      return MPI_Ialltoall(tensor_data(in), chunk, type, tensor_data(out), chunk, type, c, r);
    });
  }

  Work all_to_allv_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                         const std::vector<int64_t>& recv_counts) override {
    check_all_to_allv(*this, kMpi, in, send_counts, out, recv_counts);
    // counts: send counts, send displacements, receive counts, receive displacements.
    const size_t n = size_t(size());
    std::vector<int> counts(4 * n);
    for (size_t p = 0; p < n; ++p) {
      counts[p] = int(send_counts[p]);
      counts[2 * n + p] = int(recv_counts[p]);
      if (p > 0) {
        counts[n + p] = counts[n + p - 1] + counts[p - 1];
        counts[3 * n + p] = counts[3 * n + p - 1] + counts[2 * n + p - 1];
      }
    }
    return issue(CommOp::all_to_allv, in.bytes(), -1, {in, out}, std::move(counts),
                 [&](MPI_Comm c, MPI_Request* r, const std::vector<int>& k) {
                   MPI_Datatype type = mpi_type(in.dtype());
                   return MPI_Ialltoallv(tensor_data(in), &k[0], &k[n], type, tensor_data(out), &k[2 * n], &k[3 * n],
                                         type, c, r);
                 });
  }

  Work send_async(const Tensor& t, int peer) override {
    check_peer(*this, kMpi, CommOp::send, t, peer);
    return issue(CommOp::send, t.bytes(), peer, {t}, {}, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Isend(tensor_data(t), count_of(t), mpi_type(t.dtype()), peer, 0, c, r);
    });
  }

  Work recv_async(Tensor& t, int peer) override {
    check_peer(*this, kMpi, CommOp::recv, t, peer);
    return issue(CommOp::recv, t.bytes(), peer, {t}, {}, [&](MPI_Comm c, MPI_Request* r) {
      return MPI_Irecv(tensor_data(t), count_of(t), mpi_type(t.dtype()), peer, 0, c, r);
    });
  }

  Work barrier_async() override {
    return issue(CommOp::barrier, 0, -1, {}, {}, [&](MPI_Comm c, MPI_Request* r) { return MPI_Ibarrier(c, r); });
  }

 private:
  // Records the call, starts it with `start(comm, &request[, counts])` and hands it to the progress thread.
  template <typename Start>
  Work issue(CommOp op, size_t bytes, int peer, std::vector<Tensor> buffers, std::vector<int> counts, Start&& start) {
    auto request = std::make_shared<MpiRequest>();
    request->buffers = std::move(buffers);
    request->counts = std::move(counts);
    request->p2p = op == CommOp::send || op == CommOp::recv;
    MpiGroup& g = *group_;
    std::lock_guard lock(g.issue_mutex);
    request->record = request->p2p ? g.recorder.start_p2p(op, peer, bytes) : g.recorder.start_collective(op, bytes);
    int code;
    if constexpr (std::is_invocable_v<Start, MPI_Comm, MPI_Request*>)
      code = start(g.comm, &request->handle);
    else
      code = start(g.comm, &request->handle, request->counts);
    if (code != MPI_SUCCESS) {
      g.recorder.finish(request->record, request->p2p, FlightState::failed);
      TS_FAIL("comm '", g.name, "' ", comm_op_name(op), " could not start on rank ", g.rank_label(g.rank), ": ",
              detail::mpi_error_text(code));
    }
    g.progress.submit(request);
    return Work(std::make_shared<MpiWork>(group_, std::move(request), op, peer, bytes));
  }

  std::shared_ptr<MpiGroup> group_;
};

}  // namespace

std::shared_ptr<Comm> make_mpi_comm(MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                                    const CommOptions& options) {
  TS_CHECK(comm != MPI_COMM_NULL, "comm '", name, "': no MPI communicator (MPI_COMM_NULL)");
  TS_CHECK(options.timeout_s > 0, "comm '", name, "': the timeout must be positive (got ", options.timeout_s, " s)");
  int level = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Query_thread(&level));
  TS_CHECK(level == MPI_THREAD_MULTIPLE, "comm '", name,
           "': MPI was initialised without MPI_THREAD_MULTIPLE, which the progress thread needs; "
           "initialise it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  TS_CHECK(int(world_ranks.size()) == size, "comm '", name, "': ", world_ranks.size(),
           " world ranks given for a communicator of ", size);
  int rank = 0, world_rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  TS_CHECK(world_ranks[size_t(rank)] == world_rank, "comm '", name, "': world rank ", world_rank, " is rank ", rank,
           " of the communicator, but the member list has world rank ", world_ranks[size_t(rank)],
           " there; list the members in communicator rank order");
  if (size == 1) {
    MPI_CHECK(MPI_Comm_free(&comm));
    return make_self_comm(std::move(name), world_ranks[0], options);
  }
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return std::make_shared<MpiComm>(std::make_shared<MpiGroup>(comm, std::move(name), std::move(world_ranks), options));
}

}  // namespace tessera
