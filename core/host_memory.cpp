#include "core/host_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <string>

namespace memplan::sim {
namespace {

// The first number in the file at `path` (a cgroup file: "max" or unreadable gives nullopt).
std::optional<Bytes> number_in(const char* path) {
  std::ifstream in(path);
  Bytes value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

// MemAvailable of /proc/meminfo, in bytes.
std::optional<Bytes> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  Bytes kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// The process's address space now (the first field of /proc/self/statm, in pages).
std::optional<Bytes> address_space() {
  std::ifstream in("/proc/self/statm");
  Bytes pages = 0;
  if (!(in >> pages)) return std::nullopt;
  return pages * ::sysconf(_SC_PAGESIZE);
}

std::atomic<void*> reserve{nullptr};

void release_reserve_and_throw() {
  std::free(reserve.exchange(nullptr));
  throw std::bad_alloc();
}

}  // namespace

void hold_memory_reserve() {
  if (reserve.load() == nullptr) {
    // malloc, not new: a reserve that cannot be taken now is simply not held.
    void* block = std::malloc(static_cast<std::size_t>(kMemoryReserve));
    void* expected = nullptr;
    if (!reserve.compare_exchange_strong(expected, block)) std::free(block);
  }
  std::set_new_handler(release_reserve_and_throw);
}

Bytes available_host_memory() {
  Bytes available = std::numeric_limits<Bytes>::max();
  if (const auto m = mem_available()) available = std::min(available, *m);
  const auto v2_max = number_in("/sys/fs/cgroup/memory.max");
  const auto v2_now = number_in("/sys/fs/cgroup/memory.current");
  if (v2_max && v2_now) available = std::min(available, std::max<Bytes>(*v2_max - *v2_now, 0));
  const auto v1_max = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  const auto v1_now = number_in("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  if (v1_max && v1_now) available = std::min(available, std::max<Bytes>(*v1_max - *v1_now, 0));
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const auto cap = static_cast<Bytes>(
        std::min<rlim_t>(limit.rlim_cur, static_cast<rlim_t>(std::numeric_limits<Bytes>::max())));
    if (const auto used = address_space())
      available = std::min(available, std::max<Bytes>(cap - *used, 0));
  }
  return available;
}

}  // namespace memplan::sim
