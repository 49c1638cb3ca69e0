#pragma once
// The zoo's front door: a model name, a device name and options in, a modeled workload out
// (trace format v1, provenance "modeled" naming the cost model and device). `memplan zoo` is a
// thin wrapper around make_workload() and list_text().
#include <string>

#include "core/workload.hpp"
#include "zoo/models.hpp"

namespace memplan::zoo {

struct ZooRequest {
  std::string model;
  std::string device;
  ModelOptions options;
};

/// Builds the model, applies the cost model for the device, validates the result. Throws
/// InputError for an unknown model or device (listing the valid ones), a precision the device
/// has no rate for, or bad options.
sim::Workload make_workload(const ZooRequest& request);

/// The optimizer named `name` ("sgd" or "adam"). Throws InputError naming --optimizer otherwise.
Optimizer optimizer_named(const std::string& name);

/// The precision named `name` ("fp32", "tf32", "bf16", "fp16"). Throws InputError naming
/// --precision otherwise.
Precision precision_named(const std::string& name);

/// The attention kernel named `name` ("eager", "sdpa"; Note [Fused attention]). Throws
/// InputError naming --attention otherwise.
AttentionKernel attention_named(const std::string& name);

/// GPT's activation named `name` ("gelu", "gelu_new"). Throws InputError naming --activation
/// otherwise.
GptActivation activation_named(const std::string& name);

/// One line per model and per device, for `memplan zoo --list`.
std::string list_text();

/// "alexnet, overfeat, ..." and "titanx-maxwell, k40c, ...".
std::string model_names();
std::string device_names();

}  // namespace memplan::zoo
