// Weight-only 4-bit matmul for CPU decoding passes of a few rows, on AVX2.
//
// Why its own kernel: a decoding pass on a CPU should cost what reading its weights costs,
// and ATen's int4 and int8 kernels widen every weight to float and multiply in float, so on
// a processor without AMX or AVX512 they are bound by arithmetic, not memory (docs/models.md,
// "4-bit weights"). Here, as in llama.cpp's k-quants, the activations are rounded to int8
// per block and the sums stay integer within a block: 32 multiply-adds per instruction.
//
// The weights, per output row, in blocks of 128 inputs, each of 4 groups of 32:
//   w = scale * group_scale[g] * code - offset * group_offset[g]
// with 4-bit codes, 8-bit group scales and offsets, and float (scale, offset) per block.
// Codes: 32 bytes per pair of groups, byte t holding code t of the pair's first group in its
// low nibble and code t of the second in its high one.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kBlock = 128;
constexpr int64_t kGroup = 32;
constexpr int64_t kGroups = kBlock / kGroup;
constexpr int kMaxRowsAtOnce = 4;

inline float horizontal_sum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The rows of x in int8 codes per block: x ~= code * step[block]; group_sums: each group's codes
// summed, times the step (what a group's offset multiplies).
struct QuantizedRows {
  std::vector<int8_t> codes;
  std::vector<float> step;
  std::vector<float> group_sums;
};

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t horizontal_sum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Round to nearest, ties to even (what std::nearbyint does in the default rounding mode).
QuantizedRows quantize_rows(const float* x, int64_t rows, int64_t k) {
  const int64_t blocks = k / kBlock;
  QuantizedRows q{std::vector<int8_t>(rows * k), std::vector<float>(rows * blocks), std::vector<float>(rows * k / kGroup)};
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256i in_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // packs work within 128-bit lanes
  for (int64_t b = 0; b < rows * blocks; ++b) {
    const float* in = x + b * kBlock;
    __m256 amax = _mm256_setzero_ps();
    for (int64_t i = 0; i < kBlock; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(in + i)));
    const float step = horizontal_max(amax) / 127.f;
    const __m256 inverse = _mm256_set1_ps(step > 0.f ? 1.f / step : 0.f);
    for (int64_t g = 0; g < kGroups; ++g) {
      __m256i codes[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(in + g * kGroup + 8 * j), inverse);
        codes[j] = _mm256_cvtps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.codes.data() + b * kBlock + g * kGroup),
                          _mm256_permutevar8x32_epi32(bytes, in_order));
      const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(codes[0], codes[1]), _mm256_add_epi32(codes[2], codes[3]));
      q.group_sums[b * kGroups + g] = step * static_cast<float>(horizontal_sum(sum));
    }
    q.step[b] = step;
  }
  return q;
}

struct Weights {
  const uint8_t* codes;          // [n, k / 2]
  const uint8_t* group_scales;   // [n, k / 128, 8]: 4 scales, then 4 offsets
  const float* block_scales;     // [n, k / 128, 2]: scale, offset
};

// Outputs [n0, n1) for `Rows` rows of x from row r0.
template <int Rows>
void dot_rows(const QuantizedRows& x, int64_t r0, int64_t k, const Weights& w, int64_t n0, int64_t n1, int64_t n_total,
              float* y) {
  const int64_t blocks = k / kBlock;
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* codes = w.codes + n * (k / 2);
    const uint8_t* group_scales = w.group_scales + n * blocks * 2 * kGroups;
    const float* block_scales = w.block_scales + n * blocks * 2;
    __m256 acc[Rows];
    __m128 offsets[Rows];
    for (int r = 0; r < Rows; ++r) { acc[r] = _mm256_setzero_ps(); offsets[r] = _mm_setzero_ps(); }
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* gs = group_scales + b * 2 * kGroups;
      __m256i sums[Rows];
      for (int r = 0; r < Rows; ++r) sums[r] = _mm256_setzero_si256();
      for (int64_t pair = 0; pair < kGroups / 2; ++pair) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + b * kBlock / 2 + pair * 32));
        const __m256i first = _mm256_and_si256(packed, low_nibble);
        const __m256i second = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble);
        const __m256i first_scale = _mm256_set1_epi16(gs[2 * pair]), second_scale = _mm256_set1_epi16(gs[2 * pair + 1]);
        for (int r = 0; r < Rows; ++r) {
          const int8_t* xc = x.codes.data() + (r0 + r) * k + b * kBlock + pair * 2 * kGroup;
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
          const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + kGroup));
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(first, x1), first_scale);
          const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(second, x2), second_scale);
          sums[r] = _mm256_add_epi32(sums[r], _mm256_add_epi32(p1, p2));
        }
      }
      const float scale = block_scales[2 * b];
      int32_t packed_offsets;
      std::memcpy(&packed_offsets, gs + kGroups, sizeof packed_offsets);
      const __m128 group_offsets = _mm_mul_ps(_mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(packed_offsets))),
                                              _mm_set1_ps(block_scales[2 * b + 1]));
      for (int r = 0; r < Rows; ++r) {
        const int64_t row_block = (r0 + r) * blocks + b;
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), _mm256_set1_ps(scale * x.step[row_block]), acc[r]);
        offsets[r] = _mm_fmadd_ps(group_offsets, _mm_loadu_ps(x.group_sums.data() + row_block * kGroups), offsets[r]);
      }
    }
    for (int r = 0; r < Rows; ++r) y[(r0 + r) * n_total + n] = horizontal_sum(acc[r]) - horizontal_sum(offsets[r]);
  }
}

}  // namespace

// x [rows, k] float32 or bfloat16; codes [n, k / 2] uint8; group_scales [n, k / 128, 8] uint8;
// block_scales [n, k / 128, 2] float32. Returns x @ weights.T, [rows, n], in x's dtype.
torch::Tensor int4_matmul(const torch::Tensor& x, const torch::Tensor& codes, const torch::Tensor& group_scales,
                          const torch::Tensor& block_scales) {
  TORCH_CHECK(x.dim() == 2 && codes.dim() == 2, "int4_matmul: x [rows, k], codes [n, k / 2]");
  const int64_t rows = x.size(0), k = x.size(1), n = codes.size(0);
  TORCH_CHECK(k % kBlock == 0 && codes.size(1) * 2 == k, "int4_matmul: k must be a multiple of 128 and match the codes");
  TORCH_CHECK(codes.scalar_type() == torch::kUInt8 && group_scales.scalar_type() == torch::kUInt8
              && block_scales.scalar_type() == torch::kFloat, "int4_matmul: uint8 codes and group scales, float32 block scales");
  TORCH_CHECK(group_scales.numel() == n * (k / kBlock) * 2 * kGroups && block_scales.numel() == n * (k / kBlock) * 2,
              "int4_matmul: scales do not match the codes");
  const torch::Tensor xf = x.to(torch::kFloat).contiguous();
  const torch::Tensor c = codes.contiguous(), gs = group_scales.contiguous(), bs = block_scales.contiguous();
  const QuantizedRows xq = quantize_rows(xf.data_ptr<float>(), rows, k);
  const Weights w{c.data_ptr<uint8_t>(), gs.data_ptr<uint8_t>(), bs.data_ptr<float>()};
  torch::Tensor y = torch::empty({rows, n}, xf.options());
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, n, 16, [&](int64_t n0, int64_t n1) {
    int64_t r0 = 0;
    for (; r0 + kMaxRowsAtOnce <= rows; r0 += kMaxRowsAtOnce) dot_rows<kMaxRowsAtOnce>(xq, r0, k, w, n0, n1, n, yp);
    switch (rows - r0) {
      case 3: dot_rows<3>(xq, r0, k, w, n0, n1, n, yp); break;
      case 2: dot_rows<2>(xq, r0, k, w, n0, n1, n, yp); break;
      case 1: dot_rows<1>(xq, r0, k, w, n0, n1, n, yp); break;
      default: break;
    }
  });
  return y.to(x.scalar_type());
}

// How many threads at::parallel_for runs a kernel-sized loop on: 1 where the build lacks the
// flags of torch's threading (OpenMP's parallel region compiled away), whatever torch is set to.
int64_t parallel_threads() {
  std::vector<int> used(at::get_num_threads(), 0);
  at::parallel_for(0, 1024, 16, [&](int64_t, int64_t) { used[at::get_thread_num()] = 1; });
  return std::count(used.begin(), used.end(), 1);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_matmul", &int4_matmul, "x @ weights.T with 4-bit block weights (AVX2)");
  m.def("parallel_threads", &parallel_threads, "the threads a kernel's loop runs on");
}
