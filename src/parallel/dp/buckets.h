// Gradient buckets and ZeRO ownership over a flat buffer. A bucket is a contiguous range of whole
// parameters, about `bucket_elems` long, cut from the END of the buffer, because backward finalises
// gradients from the end towards the start. Under ZeRO a bucket is padded to a multiple of dp and
// split into dp equal chunks; dp rank r owns chunk r (its part that is not padding), so every
// bucket reduce-scatters and all-gathers in equal pieces. A rank's shard is the concatenation of
// its owned chunks in bucket order. A bucket's parameters share one reduction group (the dp group,
// or under expert parallelism the expert weights' expert_dp group); chunks and ownership follow the
// bucket's group.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

struct Bucket {
  int64_t begin = 0, end = 0;     // elements [begin, end) of the flat buffer
  int group = 0;                  // the reduction group, an index into make_buckets' `groups`
  int64_t chunk = 0;              // padded length / the group's size
  int64_t owned_begin = 0;        // this rank's owned part [owned_begin, owned_end), possibly empty
  int64_t owned_end = 0;
  int64_t shard_offset = 0;       // where the owned part starts in this rank's shard

  int64_t size() const { return end - begin; }
  int64_t owned() const { return owned_end - owned_begin; }
};

// This rank's place in a reduction group.
struct ReduceGroup {
  int rank = 0, size = 1;
};

// param_starts: the offset of every parameter, ascending, the first 0; total: buffer length;
// param_groups: each parameter's reduction group, an index into `groups` (a bucket closes where the
// group changes). Buckets come back in launch order (last bucket of the buffer first).
std::vector<Bucket> make_buckets(const std::vector<int64_t>& param_starts, const std::vector<int>& param_groups,
                                 int64_t total, int64_t bucket_elems, const std::vector<ReduceGroup>& groups);
// Every parameter in one group: dp rank `dp_rank` of `dp`.
std::vector<Bucket> make_buckets(const std::vector<int64_t>& param_starts, int64_t total, int64_t bucket_elems,
                                 int dp_rank, int dp);

// Elements of the rank's shard (sum of owned parts).
int64_t shard_size(const std::vector<Bucket>& buckets);

}  // namespace tessera
