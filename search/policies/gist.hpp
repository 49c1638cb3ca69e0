#pragma once
// Gist's encodings (Jain et al., ISCA 2018) as an option that combines with any policy: after a
// policy has decided, every feature map it keeps on the device is stored encoded between its
// forward and backward uses where an enabled encoding applies — binarize for a ReLU output that
// a max-pool reads, sparse for a ReLU output that a convolution reads (both lossless), and delayed
// precision reduction (fp16, fp10 or fp8, lossy) for any other kept float32 map. Maps a policy
// swaps or recomputes are left as they are: they do not stay on the device in between anyway; a
// kept map that an op re-run by a recompute reads in forward is not binarized or narrowed (that op
// would compute from decoded values; core/plan.hpp).
#include <optional>
#include <string_view>

#include "core/plan.hpp"
#include "search/policies/network_view.hpp"

namespace memplan::search {

struct EncodingOptions {
  bool binarize = false;
  bool sparse = false;
  std::optional<sim::Encoding> precision_reduction;  // kFp16, kFp10 or kFp8

  [[nodiscard]] bool any() const { return binarize || sparse || precision_reduction.has_value(); }
};

/// A comma-separated list of binarize, sparse, dpr (= fp16), fp16, fp10, fp8, or "all"
/// (binarize, sparse, fp16). Throws InputError naming `where` for anything else.
EncodingOptions parse_encoding_options(std::string_view list, std::string_view where);

/// The plan with its kept maps encoded where an enabled encoding applies. The policy name gains
/// "+gist".
sim::Plan apply_encodings(const sim::Plan& plan, const NetworkView& view,
                          const EncodingOptions& options);

}  // namespace memplan::search
