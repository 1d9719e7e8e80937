// Copies of device memory into host memory on a side stream: each is queued after the work the
// compute stream holds when it is added, and runs while the compute stream goes on. An asynchronous
// checkpoint takes its snapshot of the weights and moments this way, with no device copy of them:
// the sources must not change until compute_waits() has queued the compute stream's wait for the
// copies (before the next update writes them), and the destinations are complete after wait(),
// which another thread may call. Compiles without CUDA, where add() throws and the waits do nothing.
#pragma once

#include "core/tensor.h"

struct CUevent_st;  // cudaEvent_t's struct

namespace tessera {

class SideCopies {
 public:
  SideCopies() = default;
  ~SideCopies();  // waits for the copies in flight
  SideCopies(const SideCopies&) = delete;
  SideCopies& operator=(const SideCopies&) = delete;

  // Queues a copy of all of `device_src` into the host tensor (or view) `host_dst`, of its size and
  // dtype. Page-locked destinations (PinnedHost) copy beside the kernels; pageable ones make the
  // call wait for the copy.
  void add(const Tensor& host_dst, const Tensor& device_src);
  // The compute stream's work queued from now on waits, on the GPU, for every copy added so far.
  void compute_waits();
  // The calling thread waits for every copy added so far.
  void wait();

 private:
  [[maybe_unused]] CUevent_st* queued_ = nullptr;  // the compute stream's work before a copy
  [[maybe_unused]] CUevent_st* copied_ = nullptr;  // the side stream's copies, the last one added
  [[maybe_unused]] int device_ = 0;
  bool compute_must_wait_ = false;
};

}  // namespace tessera
