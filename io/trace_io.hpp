#pragma once
// Trace formats v1 to v3 (traces/FORMAT.md): reading into a Workload or a Job and writing back.
// Version 2 adds the host side (each op's `host`, the top-level `launch_ns` and `host_tail_ns`);
// version 3 the steps of several GPUs (each op's `stream`, `after` and `collective`, the
// top-level `distributed` and `streams`, and a job's `ranks`). A workload is written in the
// oldest version that holds it, so older readers keep reading what they can. Reading checks every
// field's presence and type and then validate()s the workload or job, so what comes out of here
// is sound. Writing is stable: read -> write -> read -> write gives the same bytes.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/job.hpp"
#include "core/workload.hpp"
#include "io/atomic_file.hpp"  // write_file_atomically, which write_trace_file uses

namespace memplan::sim {

inline constexpr std::string_view kTraceFormatName = "memplan-trace";
/// Why a legacy profiler file (a bare array of events without categories) is refused, and what to
/// do instead; `memplan info` and the
/// Kineto importer say it of one.
inline constexpr std::string_view kLegacyProfilerFormat =
    "a bare array of events without categories: the legacy torch.autograd.profiler format of a "
    "PyTorch built without Kineto (Debian's python3-torch writes it), which records no kernels, "
    "shapes or memory; `memplan capture MODEL` records the step from the model itself, or record "
    "with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
    "record_shapes=True, profile_memory=True) on a PyTorch built with Kineto (the pip and conda "
    "builds are)";

/// The newest version this memplan reads and writes; versions 1 and 2 are still read.
inline constexpr int kTraceFormatVersion = 3;
inline constexpr int kTraceFormatOldestVersion = 1;

/// The version write_trace() gives `workload`: 3 when it carries a field of several GPUs (an op
/// on a stream other than 0, an `after`, a collective, `distributed`, `streams`), else 2 when it
/// carries host data, else 1.
int trace_format_version(const Workload& workload);

/// Reads and validates a trace file. Throws InputError naming the file and JSON path; a job's file
/// of several ranks is refused (read_job reads it).
Workload read_trace(const std::filesystem::path& path);

/// Parses and validates trace text; `source` names it in errors (a file name, "<stdin>").
Workload parse_trace(std::string_view text, std::string_view source);

/// Converts an already-parsed JSON document; `source` names it in errors.
Workload trace_from_json(const nlohmann::json& document, std::string_view source);

/// The trace as text: one line per tensor and per op, keys in a fixed order.
std::string write_trace(const Workload& workload);

/// Writes the trace to `path` atomically (a temporary file renamed into place), so a failure
/// never leaves a half-written file. Throws InputError when the file cannot be written.
void write_trace_file(const Workload& workload, const std::filesystem::path& path);

/// A job (core/job.hpp): a trace of format v3 that holds several ranks (`ranks`), or any trace
/// of one step, read as a job of one rank. Reading validates each rank and the job. Throws
/// InputError naming the file, the rank and the JSON path (within that rank's object).
Job read_job(const std::filesystem::path& path);
Job parse_job(std::string_view text, std::string_view source);
Job job_from_json(const nlohmann::json& document, std::string_view source);
/// A job of one rank is written as write_trace writes that rank; several ranks as one v3 file.
std::string write_job(const Job& job);
void write_job_file(const Job& job, const std::filesystem::path& path);

/// Throws InputError naming `source` when the workload has ops but no tensors: a step imported
/// from a profiler trace recorded without shapes carries its times only, and a command that plans
/// memory (compare, search, sweep, validate) has nothing to plan with.
void require_sizes(const Workload& workload, std::string_view source);
/// require_sizes of every rank of `job`.
void require_sizes(const Job& job, std::string_view source);

}  // namespace memplan::sim
