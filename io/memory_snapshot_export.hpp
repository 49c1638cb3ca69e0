#pragma once
// A simulated step's device memory as a PyTorch memory snapshot: the pickle that
// torch.cuda.memory._dump_snapshot writes and pytorch.org/memory_viz (and
// torch.cuda._memory_viz) draws, so that a plan opens in the viewer a PyTorch user already knows,
// beside their own run's snapshot. `memplan simulate --snapshot-out FILE` writes it.
//
// What: `device_traces` holds device 0's allocator events in order (a segment taken from the
// driver, an expandable segment's pages mapped or unmapped, each block handed out, its free
// requested and completed, a segment given back), with
// `time_us` from the step's start and, as frames, the buffer's name (tensor, "workspace of
// conv1", "conv1_out (fp16)") and the op it serves; `segments` the allocator's state at the
// step's end, each segment tiled by its blocks (live ones `active_allocated` with their request,
// the gaps `inactive`). Under the caching allocator model a segment is one of its segments, at an
// address of its own; under the arena model the arena is one segment, as large as its highest
// end in use (Timeline::peak_reserved_bytes), there from the start; an expandable segment is an
// address space of its own whose runs of mapped pages are the dump's segments, as c10 lists them.
// `allocator_settings` are the machine's. Sizes are the blocks as the
// allocator rounds them, `requested_size` what the buffer asked for; an event's `size` is the
// request, as PyTorch's trace entries give it, so that the live bytes over the trace peak where
// the simulator's do (Timeline::peak_bytes), to the byte.
//
// How: the timeline's AllocatorEvents (recorded with the memory curve) replayed into segments and
// blocks, written with pickle protocol 2's opcodes for dicts, lists, strings, integers and
// booleans only (importers/snapshot/pickle.hpp reads them back).
#include <string>

#include "core/machine.hpp"
#include "core/program.hpp"
#include "core/workload.hpp"
#include "sim/timeline.hpp"

namespace memplan::sim {

/// The snapshot of `timeline` (recorded with its memory curve, feasible) of `program`, lowered
/// from `workload` and run on `machine`, as pickle bytes.
std::string memory_snapshot_pickle(const Timeline& timeline, const Program& program,
                                   const Workload& workload, const Machine& machine);

}  // namespace memplan::sim
