#include "src/engines/backward_update_gpu.h"

#include <algorithm>

#include "cuda/check/check_cuda.h"

namespace vitddp {

std::vector<std::pair<size_t, size_t>> backward_update_ranges(const ParamLayout& layout) {
  std::vector<std::pair<size_t, size_t>> r;
  for (const ParamRef& p : weights_updated_in_backward(layout))
    r.emplace_back(p.offset, std::min(layout.total, (p.offset + p.numel + 3) / 4 * 4));
  std::sort(r.begin(), r.end());
  return r;
}

size_t backward_update_map_bytes(const ParamLayout& layout) {
  const size_t tiles = (layout.total + kSgdTile - 1) / kSgdTile;
  return 2 * sizeof(float) + tiles + 2 * backward_update_ranges(layout).size() * sizeof(size_t);
}

BackwardUpdate::BackwardUpdate(const ParamLayout& layout) {
  std::vector<unsigned char> tiles;
  std::vector<size_t> bounds;
  backward_update_tiles(backward_update_ranges(layout), layout.total, &tiles, &bounds);
  scalars_ = DeviceBuffer<float>(2, "SGD-in-backward scalars");
  tiles_ = DeviceBuffer<unsigned char>(tiles.size(), "SGD-in-backward tile map");
  bounds_ = DeviceBuffer<size_t>(bounds.size(), "SGD-in-backward ranges");
  CUDA_CHECK(cudaMemcpy(tiles_.get(), tiles.data(), tiles.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(bounds_.get(), bounds.data(), bounds.size() * sizeof(size_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(scalars_.get(), 0, 2 * sizeof(float)));
  map_ = BackwardUpdateMap{tiles_.get(), bounds_.get(), (int)bounds.size()};
}

size_t BackwardUpdate::device_bytes() const {
  return scalars_.size() * sizeof(float) + tiles_.size() + bounds_.size() * sizeof(size_t);
}

}  // namespace vitddp
