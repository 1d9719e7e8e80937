// Bucket boundaries and ZeRO chunk ownership.
#include "parallel/dp/buckets.h"

#include <algorithm>

#include "core/error.h"

namespace tessera {

std::vector<Bucket> make_buckets(const std::vector<int64_t>& param_starts, int64_t total, int64_t bucket_elems,
                                 int dp_rank, int dp) {
  TS_CHECK(bucket_elems > 0, "--bucket-mb must be positive");
  TS_CHECK(!param_starts.empty() && param_starts.front() == 0, "bucket layout needs parameter offsets from 0");
  std::vector<Bucket> buckets;
  int64_t end = total;
  // Walk parameters from the last; close a bucket once it holds at least bucket_elems.
  for (size_t i = param_starts.size(); i-- > 0;) {
    int64_t begin = param_starts[i];
    if (end - begin >= bucket_elems || i == 0) {
      buckets.push_back(Bucket{begin, end});
      end = begin;
    }
  }
  int64_t shard_offset = 0;
  for (Bucket& b : buckets) {
    b.chunk = (b.size() + dp - 1) / dp;
    b.owned_begin = std::min(b.end, b.begin + dp_rank * b.chunk);
    b.owned_end = std::min(b.end, b.owned_begin + b.chunk);
    b.shard_offset = shard_offset;
    shard_offset += b.owned();
  }
  return buckets;
}

int64_t shard_size(const std::vector<Bucket>& buckets) {
  int64_t n = 0;
  for (const Bucket& b : buckets) n += b.owned();
  return n;
}

}  // namespace tessera
