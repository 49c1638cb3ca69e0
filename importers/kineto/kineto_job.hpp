#pragma once
// import_kineto_job: one step of a training job that ran on several GPUs, imported from the
// profiler files of its ranks — a folder of per-rank files, a list of files, or one merged file —
// into a sim::Job: one Workload per rank in rank order, the same ProfilerStep#N on each (Note
// [Default step] in step_selection.cpp), and each collective's recorded time split into its
// transfer and the rank's wait for the last peer (Note [Transfer and wait] in kineto_job.cpp).
// A single rank (one file whose distributedInfo names a larger world) is a job of one rank whose
// peers are assumed alike: its collectives keep their recorded times.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/job.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers {

/// The traces of every rank that `inputs` hold, in rank order: each input a profiler file (.json
/// or .json.gz, one rank, or several in a merged file) or a folder whose .json and .json.gz files
/// are. `ranks`, when given, is the global rank of each trace read, in the order read (files in
/// the order given, a folder's in name order), for files that do not say (no distributedInfo).
/// Throws InputError naming the file when two traces are the same rank, when the ranks of several
/// traces cannot be told apart, or when their world sizes differ.
std::vector<KinetoTrace> read_kineto_job(const std::vector<std::filesystem::path>& inputs,
                                         const std::vector<std::int32_t>& ranks = {});

struct JobImportResult {
  sim::Job job;
  /// One per rank, in the job's order.
  std::vector<ImportReport> reports;
};

/// Imports the same step of every rank in `traces` (read_kineto_job's order). With several ranks,
/// each collective's duration becomes its transfer time (Note [Transfer and wait]); the reports
/// say how much of each rank's recorded time was waiting. Throws InputError when no step is
/// complete on every rank, or when a rank lacks a collective its group's other ranks ran.
/// `allocations`: none, or one per rank in `traces`' order (each rank's memory snapshot), given
/// to that rank's step as ImportOptions::allocations; InputError when their count is another.
JobImportResult import_kineto_job(const std::vector<KinetoTrace>& traces,
                                  const ImportOptions& options = {},
                                  const std::vector<AllocationHistory>& allocations = {});

/// read_kineto_job, then import_kineto_job.
JobImportResult import_kineto_job(const std::vector<std::filesystem::path>& inputs,
                                  const ImportOptions& options = {},
                                  const std::vector<std::int32_t>& ranks = {});

/// The name a rank's trace goes by in provenance and reports: its file's name, with the rank for
/// a merged file ("merged.json.gz (rank 2)").
std::string trace_label(const KinetoTrace& trace);

}  // namespace memplan::importers
