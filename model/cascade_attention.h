// Cascade attention: the queries of several sequences (or beam rows) that read one shared
// prefix segment attend to it together, so that its keys and values are read once per step
// for all of them, then each to its own tail; the two parts merge by their softmax statistics.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "cache/cache_layer.h"
#include "cache/layer_type.h"

namespace kvserve::model {

// One member of a group: its queries ([n, heads, head_dim] float32, last dimension
// contiguous) at positions q_start.., the view of its cache layer (one row; prefix_keys /
// prefix_values the group's shared segment), and where its output goes ([n, heads * head_dim]
// float32, contiguous rows: written in place).
struct CascadeMember {
  at::Tensor queries;
  cache::LayerView view;
  int64_t q_start = 0;
  at::Tensor out;
};

// Whether `members` can attend as one cascade group: at least two, float32 CPU inputs, a full-
// attention layer, every view reading the same segment (same tensor storage, offset and
// length) from position kv_offset 0, and every query after the whole segment (so that every
// segment column is visible to every query and the segment needs no mask).
bool CanCascade(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer);

// The attention Attend computes for each member, with the segment's part computed for all the
// group's queries at once (one GEMM per kv head over the segment) and each member's own columns
// (causal, num_valid honoured) by a fused loop; the parts merge exactly (online softmax), so
// the result equals Attend's within float32 summation error. Returns false, having written
// nothing, when !CanCascade. softcap > 0 caps every score, softcap * tanh(score / softcap),
// before the softmax (Gemma 2's attention logit soft-capping), as Attend does.
bool CascadeAttend(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer,
                   double scale, double softcap = 0.0);

// The same structure in tensor operations, for any device and dtype (the CUDA path; the CPU's
// float32 path is CascadeAttend): the segment's scores of every query of the group are one
// batched GEMM per kv head over the segment, read once; each member's own columns (causal,
// num_valid honoured) are its own small GEMMs; the parts merge by their softmax statistics in
// float32. Needs what CanCascade needs, on any one device and dtype: at least two members, a
// full-attention layer, one segment (same storage) from kv_offset 0, every query after it.
// Returns false, having written nothing, otherwise.
bool CanCascadeTensors(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer);
bool CascadeAttendTensors(const std::vector<CascadeMember>& members, const cache::LayerSpec& layer,
                          double scale, double softcap = 0.0);

}  // namespace kvserve::model
