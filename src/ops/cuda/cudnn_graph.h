// A thin C++ layer over cuDNN 9's backend graph API (cudnn_graph.h), made to be debugged from one error
// message: tensors and operations (matmul, pointwise, reduction, reshape) added to a Graph by name, the
// graph planned once (heuristics mode A, then FALLBACK; the first engine config that finalizes, optionally
// skipping engines cuDNN marks nondeterministic) and executed with a variant pack. Every backend call is
// checked: a failure throws tessera::Error naming the graph, the descriptor, the attribute or step, cuDNN's
// status and cudnnGetLastErrorString; planning failures add the whole node list and each config's status.
// CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr (or CUDNN_LOGLEVEL_DBG=3) adds cuDNN's own log. For .cu files
// built with TESSERA_WITH_CUDNN only.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cuda::cudnn {

using Dims = std::array<int64_t, 4>;

// "cuDNN 9.10.2 at run time (built with 9.19.0)".
std::string version_text();

// One backend descriptor, destroyed with its owner; `what` names it in errors ("<graph>: tensor 'S' ...").
class Descriptor {
 public:
  Descriptor() = default;  // empty, to be moved into
  Descriptor(cudnnBackendDescriptorType_t type, std::string what);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  const std::string& what() const { return what_; }
  // Use through TS_CUDNN_SET, which passes the attribute's name.
  void set(cudnnBackendAttributeName_t attr, const char* attr_name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values);
  void finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  std::string what_;
};

#define TS_CUDNN_SET(descriptor, attr, type, count, values) (descriptor).set(attr, #attr, type, count, values)

// Throws tessera::Error when status is not CUDNN_STATUS_SUCCESS: "<what>: <step> failed: <status> (cuDNN:
// <last error text>); <version_text>; <how to see cuDNN's log>".
void check(cudnnStatus_t status, const std::string& what, const std::string& step);

// Tensors and operations of one graph, in the order added. Tensor ids are the uids of the variant pack.
class Graph {
 public:
  explicit Graph(std::string label) : label_(std::move(label)) {}

  // A tensor in device memory (given at execution; `reordering` F16x16 marks an fp32 accumulator the
  // kernel lays out in its own tile order), a virtual one (inside the fused kernel), and a by-value scalar
  // [1,1,1,1] (a host value given at execution).
  int64_t tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides,
                 cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE);
  int64_t virtual_tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides);
  int64_t scalar(const std::string& name, cudnnDataType_t type);

  // c = a b (batched over the first two dims, broadcast where a dim is smaller), fp32 math; the m, n, k
  // overrides are [B,1,1,1] int32 tensors of per-batch sizes, or -1.
  void matmul(const std::string& name, int64_t a, int64_t b, int64_t c, int64_t m_override = -1,
              int64_t n_override = -1, int64_t k_override = -1);
  // y = mode(x[, b[, t]]) in `math` precision; `axis` for GEN_INDEX.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math, int64_t y, int64_t x,
                 int64_t b = -1, int64_t t = -1, int64_t axis = -1);
  // y = op(x) over the dims where y has extent 1 (or fewer heads), fp32 math.
  void reduction(const std::string& name, cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x viewed with y's dims and strides (a transpose here).
  void reshape(const std::string& name, int64_t x, int64_t y);

  const std::string& label() const { return label_; }
  // One line per operation with its tensors' types, dims and strides: the graph as cuDNN saw it.
  std::string describe() const;
  // The uids of the non-virtual, non-scalar tensors: every one needs a device pointer at execution.
  std::vector<int64_t> device_uids() const;
  std::vector<cudnnBackendDescriptor_t> operations() const;

 private:
  struct TensorInfo {
    std::string name;
    cudnnDataType_t type;
    Dims dims, strides;
    bool is_virtual, by_value;
    Descriptor desc;
  };
  int64_t add_tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides, bool is_virtual,
                     bool by_value, cudnnBackendTensorReordering_t reordering);
  const TensorInfo& at(int64_t uid) const;
  std::string tensor_text(int64_t uid) const;
  Descriptor& add_operation(cudnnBackendDescriptorType_t type, const std::string& name, std::string text);

  std::string label_;
  std::vector<TensorInfo> tensors_;  // uid = index + 1
  std::vector<Descriptor> descriptors_;  // operation descriptors (matmul, pointwise, reduction) beside them
  std::vector<size_t> operations_;       // indices into descriptors_ of the operations, in order
  std::vector<std::string> operation_text_;
};

// A graph with the engine chosen for it: build once, execute often.
class Plan {
 public:
  // Finalizes the graph as an operation graph on `handle`, asks the heuristics for engine configs and keeps
  // the first that finalizes as an execution plan; with `deterministic`, engines with cuDNN's
  // NONDETERMINISTIC numerical note are skipped. Throws listing every config tried and its status.
  Plan(cudnnHandle_t handle, Graph graph, bool deterministic);

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // "engine 8 (global index), config 2 of 5 from heuristics mode A".
  const std::string& engine() const { return engine_; }
  const Graph& graph() const { return graph_; }
  // Queues the plan on the handle's stream; `pointers` pairs every device uid (and scalar uid) with its
  // pointer (a host pointer for scalars); `workspace` holds workspace_bytes().
  void execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& pointers, void* workspace) const;

 private:
  Graph graph_;
  Descriptor operation_graph_;
  std::vector<Descriptor> configs_;  // the heuristics' configs (one of them is the plan's)
  Descriptor plan_;
  int64_t workspace_bytes_ = 0;
  std::string engine_;
};

}  // namespace tessera::cuda::cudnn
