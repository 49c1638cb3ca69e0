#pragma once
// The body of a trace: one step's fields (provenance, device, v3's distributed and streams, the
// v2 host fields, tensors, ops), read from and written to the object that holds them — a trace
// file's top level, or one element of a job's `ranks` (trace format v3, traces/FORMAT.md).
// Shared by the single-step trace I/O (io/trace_io.cpp) and the job I/O (io/job_io.cpp); io's
// own, not a public interface.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/workload.hpp"
#include "io/json_reader.hpp"

namespace memplan::sim::trace_body {

/// Refuses what is not a memplan trace (a profiler trace, another format, an unsupported
/// version) and returns the document's version.
std::int64_t read_header(const nlohmann::json& document, const JsonReader& root);

/// Reads one step from `body` without validating it: the top level of a trace file (`in_file`:
/// `format` and `version` beside the step's fields) or a rank of a job. Every field's presence
/// and type is checked, and fields newer than `version` are refused.
Workload read(const JsonReader& body, std::int64_t version, bool in_file);

/// A `distributed` object {backend, rank, world_size}.
Distributed read_distributed(const JsonReader& r);

/// Appends the step's fields to `out`, one line each (one per tensor and per op), every line but
/// the last ending with a comma.
void write(std::string& out, const Workload& workload);

/// The JSON document of a trace or job file (which may be gzip'd), streamed: a profiler trace is
/// refused as soon as it shows (its `traceEvents` key, or a first event of a bare array), not
/// after it has been read whole.
nlohmann::json read_document(const std::filesystem::path& path);

}  // namespace memplan::sim::trace_body
