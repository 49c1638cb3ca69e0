#include "zoo/precision.hpp"

namespace memplan::zoo {

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "fp32";
}

std::string_view autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return "bfloat16";
    case Precision::kFp16:
      return "float16";
    case Precision::kFp32:
    case Precision::kTf32:
      break;
  }
  return {};
}

}  // namespace memplan::zoo
