// CPU weights moved into one anonymous mapping advised for transparent huge pages.
//
// A decode step streams every projection weight from memory once, so it runs at the memory
// bandwidth; with 4 KB pages that stream also walks the page tables every 4 KB. Measured on
// this project's AVX-512 machine (a 470 MB bfloat16 GEMV probe, one thread, the kernel
// unchanged): 19-21 GB/s on 4 KB pages against 23-24 GB/s on 2 MB pages. Linux hands out huge
// pages to anonymous memory only where it is advised (transparent_hugepage=madvise, Debian's
// default), and LibTorch's allocator does not advise, hence this arena.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kvserve::model {

// Copies every defined, contiguous CPU tensor of `tensors` into one mapping aligned to 2 MB
// and advised MADV_HUGEPAGE, and points the tensor at its copy (same dtype, shape and
// values). Tensors that share storage before (a tied embedding and LM head) share it after.
// The mapping lives until the last tensor in it is gone. Returns the bytes moved; 0, leaving
// every tensor as it was, when there is less than 2 MB to move, when the mapping cannot be
// made, or when KVSERVE_WEIGHT_HUGEPAGES=0 is set.
int64_t MoveToHugePageArena(const std::vector<at::Tensor*>& tensors);

}  // namespace kvserve::model
