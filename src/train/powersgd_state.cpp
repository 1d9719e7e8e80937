// PowerSGD's checkpointed state: the error sums sliced as the moments, the per-slice tensors whole.
#include "train/powersgd_state.h"

#include <algorithm>

namespace tessera {
namespace {

bool in_copy(const PowerSgdPlace& place, int64_t offset) {
  return offset >= place.tied_copy.begin && offset < place.tied_copy.end;
}

std::string slice_name(std::string_view kind, const PowerSgdPlace& place, const GradMatrix& m) {
  return powersgd_slice_name(kind, place.layout->spec_at(m.offset).name, place.tp.rank, place.tp.size,
                             in_copy(place, m.offset));
}

}  // namespace

PowerSgdPart powersgd_part(GradReducer& reducer, const PowerSgdPlace& place, const std::vector<OptimSegment>& segments,
                           int64_t state_size) {
  const PowerSgd& powersgd = *reducer.powersgd();
  const Tensor sum = reducer.powersgd_error_sum();
  PowerSgdPart part;
  part.errors = Tensor::zeros({state_size});
  for (const OptimSegment& s : segments)
    std::copy_n(sum.f32() + s.param_offset, s.length, part.errors.f32() + s.state_offset);
  const std::vector<GradMatrix> matrices = powersgd.matrices();
  for (size_t i = 0; i < matrices.size(); ++i) {
    const GradMatrix& m = matrices[i];
    if (!in_copy(place, m.offset)) part.compressed.push_back(place.layout->spec_at(m.offset).name);
    if (!reducer.first_in_group(m.offset)) continue;
    part.slices.emplace_back(slice_name("q", place, m), powersgd.qt_of(i));
    if (!in_copy(place, m.offset)) continue;
    Tensor error = Tensor::zeros({m.rows, m.cols});
    std::copy_n(sum.f32() + m.offset, error.numel(), error.f32());
    part.slices.emplace_back(slice_name("e", place, m), std::move(error));
  }
  return part;
}

std::string restore_powersgd(GradReducer& reducer, const PowerSgdPlace& place, const std::filesystem::path& checkpoint) {
  PowerSgd& powersgd = *reducer.powersgd();
  const std::vector<GradMatrix> matrices = powersgd.matrices();
  std::vector<std::string> compressed, slices;
  for (const GradMatrix& m : matrices) {
    if (!in_copy(place, m.offset)) compressed.push_back(place.layout->spec_at(m.offset).name);
    slices.push_back(slice_name("q", place, m));
    if (in_copy(place, m.offset)) slices.push_back(slice_name("e", place, m));
  }
  StoredPowerSgd stored = load_powersgd_state(checkpoint, *place.layout, compressed, slices);
  if (!stored.error_sum)
    return "--powersgd-rank: the checkpoint holds no PowerSGD state (it was saved without compression); its error "
           "feedback and factors start afresh";
  size_t fresh = 0;
  for (size_t i = 0; i < matrices.size(); ++i) {
    const GradMatrix& m = matrices[i];
    auto qt = stored.slices.find(slice_name("q", place, m));
    if (qt != stored.slices.end() && qt->second.shape() == powersgd.qt_of(i).shape())
      powersgd.set_qt(i, qt->second);
    else
      ++fresh;
    if (!in_copy(place, m.offset)) continue;
    // The tied copy's error sum is its own (the moments leave the copy out).
    auto error = stored.slices.find(slice_name("e", place, m));
    float* to = stored.error_sum->f32() + m.offset;
    if (error != stored.slices.end() && error->second.numel() == m.rows * m.cols)
      std::copy_n(error->second.f32(), m.rows * m.cols, to);
    else
      std::fill_n(to, m.rows * m.cols, 0.0f);
  }
  reducer.set_powersgd_errors(std::move(*stored.error_sum));
  if (fresh == 0) return "";
  return "--powersgd-rank: " + std::to_string(fresh) + " of this rank's " + std::to_string(matrices.size()) +
         " warm-start factors start afresh: the checkpoint's were made under another --tp or --powersgd-rank";
}

}  // namespace tessera
