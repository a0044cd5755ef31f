// Cascade attention over a shared prefix segment (see cascade_attention.h).
#include "model/cascade_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/worker_pool.h"

namespace kvserve::model {
namespace {

bool IsCpuFloat(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat;
}

}  // namespace

bool CanCascade(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer) {
  if (members.size() < 2 || layer.type != cache::LayerType::kFullAttention) return false;
  const cache::LayerView& first = members.front().view;
  const int64_t prefix_len = first.prefix_length();
  if (prefix_len == 0 || !IsCpuFloat(first.prefix_keys) || !IsCpuFloat(first.prefix_values) ||
      first.prefix_keys.stride(3) != 1 || first.prefix_values.stride(3) != 1) {
    return false;
  }
  for (const CascadeMember& m : members) {
    const cache::LayerView& v = m.view;
    if (v.prefix_length() != prefix_len ||
        v.prefix_keys.data_ptr() != first.prefix_keys.data_ptr() ||
        v.prefix_values.data_ptr() != first.prefix_values.data_ptr() || v.kv_offset != 0 ||
        m.q_start < prefix_len || !IsCpuFloat(m.queries) || m.queries.dim() != 3 ||
        m.queries.stride(2) != 1 || !IsCpuFloat(v.keys) || !IsCpuFloat(v.values) ||
        v.keys.dim() != 4 || v.keys.size(0) != 1 || v.keys.stride(3) != 1 ||
        v.values.stride(3) != 1 || !v.values.sizes().equals(v.keys.sizes()) ||
        v.keys.size(1) != first.prefix_keys.size(1) ||
        v.keys.size(3) != first.prefix_keys.size(3) || m.queries.size(2) != v.keys.size(3) ||
        m.queries.size(1) % v.keys.size(1) != 0 ||
        m.queries.size(1) != members.front().queries.size(1) || !IsCpuFloat(m.out) ||
        !m.out.is_contiguous() || m.out.size(0) != m.queries.size(0) ||
        m.out.size(1) != m.queries.size(1) * m.queries.size(2)) {
      return false;
    }
  }
  return true;
}

bool CascadeAttend(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer,
                   double scale, double softcap) {
  if (!CanCascade(members, layer)) return false;
  const cache::LayerView& shared = members.front().view;
  const int64_t heads = members.front().queries.size(1);
  const int64_t d = members.front().queries.size(2);
  const int64_t kv_heads = shared.prefix_keys.size(1);
  const int64_t group = heads / kv_heads;
  const float fscale = static_cast<float>(scale);
  const float cap = static_cast<float>(softcap);

  // The segment's part for every query of the group: [kv_heads, M * group, d] queries against
  // [kv_heads, P, d] keys in one batched GEMM, so that the segment is read once.
  std::vector<at::Tensor> all;
  std::vector<int64_t> first_row;  // per member: its first query in the stacked [M] order
  int64_t total = 0;
  for (const CascadeMember& m : members) {
    all.push_back(m.queries);
    first_row.push_back(total);
    total += m.queries.size(0);
  }
  const at::Tensor q_all = at::cat(all, 0);  // [M, heads, d]
  const at::Tensor q = q_all.view({total, kv_heads, group, d})
                           .permute({1, 0, 2, 3})
                           .reshape({kv_heads, total * group, d});
  at::Tensor scores = at::bmm(q, shared.prefix_keys.select(0, 0).transpose(1, 2));  // [kh, Mg, P]
  scores.mul_(scale);
  if (softcap > 0) scores.div_(softcap).tanh_().mul_(softcap);
  const at::Tensor max1 = std::get<0>(scores.max(2, /*keepdim=*/true));  // [kh, Mg, 1]
  scores.sub_(max1).exp_();
  const at::Tensor sum1 = scores.sum(2);  // [kh, Mg]
  const at::Tensor acc1 = at::bmm(scores, shared.prefix_values.select(0, 0)).contiguous();
  const at::Tensor max1c = max1.squeeze(2).contiguous();
  const float* pm = max1c.data_ptr<float>();
  const float* ps = sum1.data_ptr<float>();
  const float* pa = acc1.data_ptr<float>();

  // Each member's own columns, merged with the segment's statistics. One task: one member's
  // query position and kv head, for the query heads of its group.
  struct Task {
    int64_t member, t, kh;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < members.size(); ++i) {
    for (int64_t t = 0; t < members[i].queries.size(0); ++t) {
      for (int64_t kh = 0; kh < kv_heads; ++kh) tasks.push_back({static_cast<int64_t>(i), t, kh});
    }
  }
  auto run = [&](int64_t index) {
    const Task& task = tasks[index];
    const CascadeMember& m = members[task.member];
    const at::Tensor& keys = m.view.keys;
    const at::Tensor& values = m.view.values;
    const int64_t q_pos = m.q_start + task.t;
    // Own column j sits at position prefix_len + j: visible up to the query's own position.
    const int64_t prefix_len = m.view.prefix_length();
    const int64_t visible =
        std::max<int64_t>(0, std::min(m.view.num_valid, q_pos - m.view.kv_offset - prefix_len + 1));
    const float* kp = keys.data_ptr<float>() + task.kh * keys.stride(1);
    const float* vp = values.data_ptr<float>() + task.kh * values.stride(1);
    const int64_t ks2 = keys.stride(2), vs2 = values.stride(2);
    thread_local std::vector<float> s;
    s.resize(static_cast<size_t>(std::max<int64_t>(visible, 1)));
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = task.kh * group + g;
      const float* qv =
          m.queries.data_ptr<float>() + task.t * m.queries.stride(0) + h * m.queries.stride(1);
      // The row of this query in the segment's statistics: [kh][stacked row * group + g].
      const int64_t row = task.kh * total * group + (first_row[task.member] + task.t) * group + g;
      float max2 = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const float* k = kp + j * ks2;
        float dot = 0.0f;
        for (int64_t c = 0; c < d; ++c) dot += qv[c] * k[c];
        s[j] = dot * fscale;
        if (cap > 0) s[j] = cap * std::tanh(s[j] / cap);
        max2 = std::max(max2, s[j]);
      }
      const float max1v = pm[row];
      const float m_all = std::max(max1v, max2);
      const float w1 = std::exp(max1v - m_all);
      float* o = m.out.data_ptr<float>() + task.t * heads * d + h * d;
      const float* a1 = pa + row * d;
      float sum = ps[row] * w1;
      for (int64_t c = 0; c < d; ++c) o[c] = a1[c] * w1;
      for (int64_t j = 0; j < visible; ++j) {
        const float p = std::exp(s[j] - m_all);
        sum += p;
        const float* v = vp + j * vs2;
        for (int64_t c = 0; c < d; ++c) o[c] += p * v[c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < d; ++c) o[c] *= inv;
    }
  };
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  if (n_tasks > 1) {
    ParallelFor(n_tasks, run);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) run(i);
  }
  return true;
}

}  // namespace kvserve::model
