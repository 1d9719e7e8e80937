// cuDNN backend graph API, checked call by call: descriptors, graph building with a readable node list,
// engine choice (heuristics mode A, then FALLBACK) with every config's outcome kept for the error, and
// execution through a variant pack. Host code only; see cudnn_graph.h.
#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cudnn_graph.h"

namespace tessera::cuda::cudnn {
namespace {

std::string last_error_text() {
  char text[4096] = {};
  cudnnGetLastErrorString(text, sizeof(text));
  return text[0] != '\0' ? std::string(text) : std::string("(no message)");
}

std::string version_of(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

const char* type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT: return "f32";
    case CUDNN_DATA_HALF: return "f16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_INT32: return "i32";
    case CUDNN_DATA_BOOLEAN: return "bool";
    default: return "other";
  }
}

const char* pointwise_name(cudnnPointwiseMode_t mode) {
  switch (mode) {
    case CUDNN_POINTWISE_ADD: return "ADD";
    case CUDNN_POINTWISE_SUB: return "SUB";
    case CUDNN_POINTWISE_MUL: return "MUL";
    case CUDNN_POINTWISE_DIV: return "DIV";
    case CUDNN_POINTWISE_EXP: return "EXP";
    case CUDNN_POINTWISE_LOG: return "LOG";
    case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
    case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
    case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
    case CUDNN_POINTWISE_CMP_LT: return "CMP_LT";
    case CUDNN_POINTWISE_LOGICAL_AND: return "LOGICAL_AND";
    case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
    default: return "other";
  }
}

std::string dims_text(const Dims& d) {
  std::string text = "[";
  for (size_t i = 0; i < d.size(); i++) text.append(i > 0 ? "," : "").append(std::to_string(d[i]));
  return text.append("]");
}

const char* heur_mode_name(cudnnBackendHeurMode_t mode) { return mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK"; }

// The engine behind an engine config: its global index and whether cuDNN marks it nondeterministic.
struct EngineInfo {
  int64_t global_index = -1;
  bool nondeterministic = false;
};

EngineInfo engine_info(const Descriptor& config, const std::string& what) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, what + ": engine of a heuristics config");
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                 &raw),
        engine.what(), "getting CUDNN_ATTR_ENGINECFG_ENGINE");
  EngineInfo info;
  check(cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                                 &info.global_index),
        engine.what(), "getting CUDNN_ATTR_ENGINE_GLOBAL_INDEX");
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  check(cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes),
        engine.what(), "getting CUDNN_ATTR_ENGINE_NUMERICAL_NOTE");
  for (int64_t i = 0; i < count; i++) info.nondeterministic |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  return info;
}

// The engine configs the heuristics in `mode` propose for the finalized operation graph, best first; a
// heuristics query cuDNN refuses gives none, with the reason appended to `log`.
std::vector<Descriptor> engine_configs(const Descriptor& operation_graph, cudnnBackendHeurMode_t mode,
                                       const std::string& label, std::string& log) {
  const std::string what = label + ": heuristics mode " + heur_mode_name(mode);
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
  const cudnnBackendDescriptor_t graph = operation_graph.get();
  TS_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  TS_CUDNN_SET(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (const cudnnStatus_t status = cudnnBackendFinalize(heuristics.get()); status != CUDNN_STATUS_SUCCESS) {
    log += std::string("\n  heuristics mode ") + heur_mode_name(mode) + ": finalize failed: " +
           cudnnGetErrorString(status) + " (" + last_error_text() + ")";
    return {};
  }
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr),
        what, "counting CUDNN_ATTR_ENGINEHEUR_RESULTS");
  if (count == 0) {
    log += std::string("\n  heuristics mode ") + heur_mode_name(mode) + ": no engine configs";
    return {};
  }
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; i++) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                         what + ": engine config " + std::to_string(i + 1) + " of " + std::to_string(count));
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()),
        what, "getting CUDNN_ATTR_ENGINEHEUR_RESULTS");
  configs.resize(size_t(std::min(returned, count)));
  log += std::string("\n  heuristics mode ") + heur_mode_name(mode) + ": " + std::to_string(configs.size()) +
         " engine configs";
  return configs;
}

}  // namespace

std::string version_text() {
  return "cuDNN " + version_of(cudnnGetVersion()) + " at run time (built with " + version_of(CUDNN_VERSION) + ")";
}

void check(cudnnStatus_t status, const std::string& what, const std::string& step) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  TS_FAIL(what, ": ", step, " failed: ", cudnnGetErrorString(status), " (status ", int(status), "; cuDNN says: ",
          last_error_text(), "); ", version_text(),
          "; rerun with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr for cuDNN's own log");
}

// --- Descriptor ---

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
  check(cudnnBackendCreateDescriptor(type, &desc_), what_, "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)), what_(std::move(other.what_)) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
    what_ = std::move(other.what_);
  }
  return *this;
}

void Descriptor::set(cudnnBackendAttributeName_t attr, const char* attr_name, cudnnBackendAttributeType_t type,
                     int64_t count, const void* values) {
  check(cudnnBackendSetAttribute(desc_, attr, type, count, values), what_, std::string("setting ") + attr_name);
}

void Descriptor::finalize() { check(cudnnBackendFinalize(desc_), what_, "cudnnBackendFinalize"); }

// --- Graph ---

int64_t Graph::add_tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides, bool is_virtual,
                          bool by_value, cudnnBackendTensorReordering_t reordering) {
  const int64_t uid = int64_t(tensors_.size()) + 1;
  const std::string text = std::string(type_name(type)) + " " + dims_text(dims) + " strides " + dims_text(strides) +
                           (is_virtual ? ", virtual" : by_value ? ", by value" : "") +
                           (reordering == CUDNN_TENSOR_REORDERING_F16x16 ? ", reordered F16x16" : "");
  Descriptor desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR,
                  label_ + ": tensor '" + name + "' (uid " + std::to_string(uid) + ", " + text + ")");
  const int64_t alignment = 16;
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  if (reordering != CUDNN_TENSOR_REORDERING_NONE)
    TS_CUDNN_SET(desc, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reordering);
  desc.finalize();
  tensors_.push_back({name, type, dims, strides, is_virtual, by_value, std::move(desc)});
  return uid;
}

int64_t Graph::tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides,
                      cudnnBackendTensorReordering_t reordering) {
  return add_tensor(name, type, dims, strides, false, false, reordering);
}

int64_t Graph::virtual_tensor(const std::string& name, cudnnDataType_t type, Dims dims, Dims strides) {
  return add_tensor(name, type, dims, strides, true, false, CUDNN_TENSOR_REORDERING_NONE);
}

int64_t Graph::scalar(const std::string& name, cudnnDataType_t type) {
  return add_tensor(name, type, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, CUDNN_TENSOR_REORDERING_NONE);
}

const Graph::TensorInfo& Graph::at(int64_t uid) const {
  TS_CHECK(uid >= 1 && uid <= int64_t(tensors_.size()), label_, ": no tensor with uid ", uid,
           " in this graph (a graph-building bug in attention_cudnn.cu)");
  return tensors_[size_t(uid - 1)];
}

std::string Graph::tensor_text(int64_t uid) const {
  const TensorInfo& t = at(uid);
  return t.name + "#" + std::to_string(uid) + " " + type_name(t.type) + dims_text(t.dims) +
         (t.is_virtual ? "v" : t.by_value ? "=" : "") + " s" + dims_text(t.strides);
}

Descriptor& Graph::add_operation(cudnnBackendDescriptorType_t type, const std::string& name, std::string text) {
  descriptors_.emplace_back(type, label_ + ": operation '" + name + "' (" + text + ")");
  operations_.push_back(descriptors_.size() - 1);
  operation_text_.push_back(name + ": " + std::move(text));
  return descriptors_.back();
}

void Graph::matmul(const std::string& name, int64_t a, int64_t b, int64_t c, int64_t m_override, int64_t n_override,
                   int64_t k_override) {
  Descriptor desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR, label_ + ": matmul descriptor of '" + name + "'");
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  const double padding = 0.0;
  TS_CUDNN_SET(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  TS_CUDNN_SET(desc, CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &padding);
  desc.finalize();
  struct Override {
    int64_t uid;
    cudnnBackendAttributeName_t attr;
    const char* attr_name;
    const char* axis;
  };
  const Override overrides[] = {
      {m_override, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC",
       "m"},
      {n_override, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC",
       "n"},
      {k_override, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC",
       "k"}};
  std::string text = "MATMUL " + tensor_text(a) + " x " + tensor_text(b) + " -> " + tensor_text(c);
  for (const Override& o : overrides)
    if (o.uid >= 0) text += std::string(", ") + o.axis + " from " + at(o.uid).name;
  Descriptor& op = add_operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name, std::move(text));
  const cudnnBackendDescriptor_t raw_a = at(a).desc.get(), raw_b = at(b).desc.get(), raw_c = at(c).desc.get(),
                                 raw_desc = desc.get();
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_a);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_b);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_c);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_desc);
  for (const Override& o : overrides) {
    if (o.uid < 0) continue;
    const cudnnBackendDescriptor_t raw = at(o.uid).desc.get();
    op.set(o.attr, o.attr_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  op.finalize();
  descriptors_.push_back(std::move(desc));  // the operation refers to it: keep it as long as the graph
}

void Graph::pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t math, int64_t y, int64_t x,
                      int64_t b, int64_t t, int64_t axis) {
  Descriptor desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, label_ + ": pointwise descriptor of '" + name + "'");
  TS_CUDNN_SET(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  TS_CUDNN_SET(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) TS_CUDNN_SET(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  desc.finalize();
  std::string text = std::string(pointwise_name(mode)) + " (math " + type_name(math) +
                     (axis >= 0 ? ", axis " + std::to_string(axis) : std::string()) + ") " + tensor_text(x);
  if (b >= 0) text += ", " + tensor_text(b);
  if (t >= 0) text += ", " + tensor_text(t);
  text += " -> " + tensor_text(y);
  Descriptor& op = add_operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name, std::move(text));
  const cudnnBackendDescriptor_t raw_desc = desc.get(), raw_x = at(x).desc.get(), raw_y = at(y).desc.get();
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_desc);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_x);
  if (b >= 0) {
    const cudnnBackendDescriptor_t raw_b = at(b).desc.get();
    TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_b);
  }
  if (t >= 0) {
    const cudnnBackendDescriptor_t raw_t = at(t).desc.get();
    TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_t);
  }
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_y);
  op.finalize();
  descriptors_.push_back(std::move(desc));
}

void Graph::reduction(const std::string& name, cudnnReduceTensorOp_t op_kind, int64_t x, int64_t y) {
  Descriptor desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, label_ + ": reduction descriptor of '" + name + "'");
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  TS_CUDNN_SET(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_kind);
  TS_CUDNN_SET(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  desc.finalize();
  Descriptor& op =
      add_operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name,
                    std::string("REDUCTION ") + (op_kind == CUDNN_REDUCE_TENSOR_MAX ? "MAX " : "ADD ") +
                        tensor_text(x) + " -> " + tensor_text(y));
  const cudnnBackendDescriptor_t raw_desc = desc.get(), raw_x = at(x).desc.get(), raw_y = at(y).desc.get();
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_x);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_y);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_desc);
  op.finalize();
  descriptors_.push_back(std::move(desc));
}

void Graph::reshape(const std::string& name, int64_t x, int64_t y) {
  Descriptor& op = add_operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name,
                                 "RESHAPE " + tensor_text(x) + " -> " + tensor_text(y));
  const cudnnBackendDescriptor_t raw_x = at(x).desc.get(), raw_y = at(y).desc.get();
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_x);
  TS_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_y);
  op.finalize();
}

std::string Graph::describe() const {
  std::string text = "graph (tensor#uid type[dims], v = virtual, = = by value, s = strides):";
  for (size_t i = 0; i < operation_text_.size(); i++)
    text.append("\n  ").append(std::to_string(i + 1)).append(". ").append(operation_text_[i]);
  return text;
}

std::vector<int64_t> Graph::device_uids() const {
  std::vector<int64_t> uids;
  for (size_t i = 0; i < tensors_.size(); i++)
    if (!tensors_[i].is_virtual && !tensors_[i].by_value) uids.push_back(int64_t(i) + 1);
  return uids;
}

std::vector<cudnnBackendDescriptor_t> Graph::operations() const {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const size_t i : operations_) raw.push_back(descriptors_[i].get());
  return raw;
}

// --- Plan ---

Plan::Plan(cudnnHandle_t handle, Graph graph, bool deterministic)
    : graph_(std::move(graph)),
      operation_graph_(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph_.label() + ": operation graph") {
  const std::vector<cudnnBackendDescriptor_t> ops = graph_.operations();
  TS_CUDNN_SET(operation_graph_, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()),
               ops.data());
  TS_CUDNN_SET(operation_graph_, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (const cudnnStatus_t status = cudnnBackendFinalize(operation_graph_.get()); status != CUDNN_STATUS_SUCCESS)
    check(status, operation_graph_.what(), "cudnnBackendFinalize of the operation graph (" + graph_.describe() + "\n)");

  std::string log;
  int tried = 0;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    configs_ = engine_configs(operation_graph_, mode, graph_.label(), log);
    for (size_t i = 0; i < configs_.size(); i++) {
      const EngineInfo info = engine_info(configs_[i], graph_.label());
      const std::string name = "engine " + std::to_string(info.global_index) + " (config " + std::to_string(i + 1) +
                               " of " + std::to_string(configs_.size()) + ", heuristics mode " + heur_mode_name(mode) +
                               ")";
      tried++;
      if (deterministic && info.nondeterministic) {
        log += "\n  " + name + ": skipped, cuDNN marks it NONDETERMINISTIC";
        continue;
      }
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, graph_.label() + ": execution plan of " + name);
      const cudnnBackendDescriptor_t config = configs_[i].get();
      TS_CUDNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      TS_CUDNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
      if (const cudnnStatus_t status = cudnnBackendFinalize(plan.get()); status != CUDNN_STATUS_SUCCESS) {
        log += "\n  " + name + ": " + cudnnGetErrorString(status) + " (" + last_error_text() + ")";
        continue;
      }
      int64_t count = 0;
      check(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                     &workspace_bytes_),
            plan.what(), "getting CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE");
      plan_ = std::move(plan);
      engine_ = name;
      return;
    }
  }
  TS_FAIL(graph_.label(), ": no cuDNN engine can run this graph: ", tried, " engine configs tried", log, "\n",
          graph_.describe(), "\n", version_text(),
          "; rerun with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr (or CUDNN_LOGLEVEL_DBG=3) for cuDNN's reasons");
}

void Plan::execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& pointers,
                   void* workspace) const {
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, ptr] : pointers) {
    uids.push_back(uid);
    data.push_back(ptr);
  }
  for (const int64_t uid : graph_.device_uids())
    TS_CHECK(std::find(uids.begin(), uids.end(), uid) != uids.end(), graph_.label(),
             ": the variant pack has no pointer for tensor uid ", uid, " (a bug in attention_cudnn.cu)\n",
             graph_.describe());
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, graph_.label() + ": variant pack");
  TS_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  TS_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(data.size()), data.data());
  TS_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  check(cudnnBackendExecute(handle, plan_.get(), pack.get()), graph_.label() + " on " + engine_,
        "cudnnBackendExecute");
}

}  // namespace tessera::cuda::cudnn
