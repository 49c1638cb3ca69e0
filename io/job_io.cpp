// Jobs in trace format v3 (traces/FORMAT.md "Jobs"): the steps of the ranks of a job that ran on
// several GPUs, one file whose `ranks` each hold one step's fields as a trace file holds them
// (io/trace_body.hpp). Any trace of one step reads as a job of one rank, and a job of one rank is
// written as that rank's trace.
#include <string>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "io/json_reader.hpp"
#include "io/trace_body.hpp"
#include "io/trace_io.hpp"

namespace memplan::sim {
namespace {

// The version that brought `ranks`: a job of several ranks is written in it.
constexpr int kJobFormatVersion = 3;

Job ranks_from_json(const JsonReader& root) {
  root.reject_unknown_keys({"format", "version", "ranks"});
  const auto ranks = root.at("ranks");
  const std::vector<JsonReader> elements = ranks.elements();
  if (elements.empty()) ranks.fail("no ranks (a job holds at least one)");
  Job job;
  job.ranks.reserve(elements.size());
  for (const JsonReader& r : elements) {
    // What is wrong inside a rank is named as validate(Job) names it: the rank, then the path
    // within the rank's object.
    const Distributed d = trace_body::read_distributed(r.at("distributed"));
    const std::string source = fmt::format("{}: rank {}", root.source(), d.rank);
    job.ranks.push_back(
        trace_body::read(JsonReader(r.value(), source), kJobFormatVersion, /*in_file=*/false));
  }
  return job;
}

}  // namespace

Job job_from_json(const nlohmann::json& document, std::string_view source) {
  const JsonReader root(document, source);
  const std::int64_t version = trace_body::read_header(document, root);
  Job job;
  if (version >= kJobFormatVersion && document.contains("ranks")) {
    job = ranks_from_json(root);
  } else {
    job.ranks.push_back(trace_body::read(root, version, /*in_file=*/true));
  }
  validate(job, source);
  return job;
}

Job parse_job(std::string_view text, std::string_view source) {
  return job_from_json(parse_json(text, source), source);
}

Job read_job(const std::filesystem::path& path) {
  return job_from_json(trace_body::read_document(path), path.string());
}

std::string write_job(const Job& job) {
  MEMPLAN_CHECK(!job.ranks.empty(), "a job holds at least one rank");
  if (job.ranks.size() == 1) return write_trace(job.ranks.front());
  std::string out;
  out += "{\n";
  out += fmt::format("\"format\": \"{}\",\n", kTraceFormatName);
  out += fmt::format("\"version\": {},\n", kJobFormatVersion);
  out += "\"ranks\": [\n";
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    out += "{\n";
    trace_body::write(out, job.ranks[i]);
    out += i + 1 < job.ranks.size() ? "},\n" : "}\n";
  }
  out += "]\n}\n";
  return out;
}

void write_job_file(const Job& job, const std::filesystem::path& path) {
  write_file_atomically(path, write_job(job));
}

}  // namespace memplan::sim
