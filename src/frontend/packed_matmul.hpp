#pragma once

// The right-hand side of many matmuls (a model's weight, multiplied at every decode step), laid
// out once the way the device's GEMM reads it. Internal: the language models use it
// (src/lm/forward.cpp); not part of the public API.

#include "cotensor/tensor.hpp"

#include <cstdint>

namespace cotensor::detail {

/// B [k, n] for `matmul(x, b)`: on a CPU that runs cotensor's own AVX-512 GEMM for B's dtype
/// (float32; bfloat16 with AVX-512 BF16), B in that GEMM's panels of 64 columns, so that each
/// worker reads its columns as contiguous runs (B in place is a strip of a few hundred bytes a
/// row) and no product packs B again; elsewhere (a GPU, float16, another kernel forced by
/// COTENSOR_GEMM_F32 or COTENSOR_GEMM_BF16 when it is made) B itself. A product gives the same
/// bits as `cotensor::matmul` with B. The panels are a lasting buffer: on the CPU, in
/// transparent huge pages shared with other weights (cpu/host_memory.cpp). Thread safety: as
/// `tensor` (a value; copies share the buffer).
class packed_matrix {
public:
  packed_matrix() = default;
  /// Lays out `b` (rank 2), asynchronously: an op that reads `b` and returns at once. An
  /// undefined `b` gives an undefined packed_matrix. Implicit, so that a model's weights convert
  /// where they are loaded. Errors: std::invalid_argument for a rank other than 2.
  packed_matrix(const tensor& b);  // NOLINT(google-explicit-constructor)

  bool defined() const noexcept { return data_.defined(); }
  /// Whether data() holds the panels (else B itself).
  bool packed() const noexcept { return packed_; }
  /// The panels, or B.
  const tensor& data() const noexcept { return data_; }
  std::int64_t rows() const noexcept { return k_; }
  std::int64_t cols() const noexcept { return n_; }

private:
  tensor data_;
  std::int64_t k_ = 0;
  std::int64_t n_ = 0;
  bool packed_ = false;
};

/// x [..., m, k] · B as `cotensor::matmul(x, b)` with the B `b` was made from: [..., m, n],
/// asynchronously, with matmul's errors (at the call).
tensor matmul(const tensor& x, const packed_matrix& b);

/// `matmul(x, b) + bias`, the same bits, in one op where B is laid out and `bias` is [n] of x's
/// dtype and device: the GEMM adds the bias to each tile of the product as it stores it (each
/// element rounded, the bias added in float, the sum rounded), with no op or pass over the
/// product of its own (a decode step of GPT-2 has 48). Otherwise (B not laid out, an undefined
/// bias, another shape or dtype) the two ops, with their errors.
tensor matmul(const tensor& x, const packed_matrix& b, const tensor& bias);

}  // namespace cotensor::detail
