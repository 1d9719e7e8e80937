// Bucket boundaries and ZeRO chunk ownership.
#include "parallel/dp/buckets.h"

#include <algorithm>

#include "core/error.h"

namespace tessera {

std::vector<Bucket> make_buckets(const std::vector<int64_t>& param_starts, const std::vector<int>& param_groups,
                                 int64_t total, int64_t bucket_elems, const std::vector<ReduceGroup>& groups) {
  TS_CHECK(bucket_elems > 0, "--bucket-mb must be positive");
  TS_CHECK(!param_starts.empty() && param_starts.front() == 0, "bucket layout needs parameter offsets from 0");
  TS_CHECK(param_groups.size() == param_starts.size(), "bucket layout needs a reduction group per parameter");
  std::vector<Bucket> buckets;
  int64_t end = total;
  // Walk parameters from the last; close a bucket once it holds at least bucket_elems, or before a
  // parameter of another group.
  for (size_t i = param_starts.size(); i-- > 0;) {
    const int64_t begin = param_starts[i];
    const bool group_changes = i > 0 && param_groups[i - 1] != param_groups[i];
    if (end - begin >= bucket_elems || group_changes || i == 0) {
      buckets.push_back(Bucket{begin, end, param_groups[i]});
      end = begin;
    }
  }
  int64_t shard_offset = 0;
  for (Bucket& b : buckets) {
    const ReduceGroup& g = groups.at(size_t(b.group));
    b.chunk = (b.size() + g.size - 1) / g.size;
    b.owned_begin = std::min(b.end, b.begin + g.rank * b.chunk);
    b.owned_end = std::min(b.end, b.owned_begin + b.chunk);
    b.shard_offset = shard_offset;
    shard_offset += b.owned();
  }
  return buckets;
}

std::vector<Bucket> make_buckets(const std::vector<int64_t>& param_starts, int64_t total, int64_t bucket_elems,
                                 int dp_rank, int dp) {
  return make_buckets(param_starts, std::vector<int>(param_starts.size(), 0), total, bucket_elems, {{dp_rank, dp}});
}

int64_t shard_size(const std::vector<Bucket>& buckets) {
  int64_t n = 0;
  for (const Bucket& b : buckets) n += b.owned();
  return n;
}

}  // namespace tessera
