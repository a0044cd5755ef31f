// Helpers for cache tests: K/V tensors whose values encode their absolute position.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace kvserve::cache::testing {

// [batch, heads, n, dim] where every element of token t (absolute position start + t) equals
// start + t (plus 1000 * batch row for keys), so tests can read back which tokens are stored.
inline at::Tensor PositionTensor(int64_t start, int64_t n, int64_t batch = 1, int64_t heads = 2,
                                 int64_t dim = 4) {
  at::Tensor pos = at::arange(start, start + n, at::kFloat).view({1, 1, n, 1});
  at::Tensor rows = at::arange(batch, at::kFloat).view({batch, 1, 1, 1}) * 1000;
  return (pos + rows).expand({batch, heads, n, dim}).contiguous();
}

// The positions held by a [batch, heads, n, dim] tensor built by PositionTensor (row 0).
inline std::vector<int64_t> Positions(const at::Tensor& t) {
  std::vector<int64_t> out;
  at::Tensor row = t.select(0, 0).select(0, 0).select(1, 0).contiguous();
  for (int64_t i = 0; i < row.size(0); ++i)
    out.push_back(static_cast<int64_t>(row[i].item<float>()));
  return out;
}

}  // namespace kvserve::cache::testing
