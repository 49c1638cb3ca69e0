#pragma once
// ProgramWalk: the order in which a Program's instructions are handed out, shared by the engine
// (which prices them in simulated time) and the runtime interpreter (which enqueues them on a
// device). Each stream goes through its list in order, as far as it can; a wait whose event has
// not been recorded yet blocks its stream, and the walk moves to the next stream. Rounds over the
// streams repeat until every list is done. So every record is handed out before any wait on
// its event (which CUDA needs: a wait on an event not yet recorded is a no-op there), and streams
// interact only through events: O(1) per instruction, no event queue.
//
// What to do with an instruction is the driver's: `Step step(StreamId, std::size_t index, const
// Instruction&, State&)` is called for every instruction once, in the walk's order, records and
// waits included (a wait only once its event is recorded). `State enter(StreamId)` and `void
// leave(StreamId, const State&)` bracket each stretch of one stream: the driver's per-stream state
// (the engine's clock of that stream) lives in a local of the walk meanwhile, where the compiler
// keeps it in a register. The walk is a template over the driver so that the engine's
// per-instruction work inlines into the loop.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/check.hpp"
#include "core/program.hpp"

namespace memplan::sim {

/// What a driver did with an instruction.
enum class Step : std::uint8_t {
  kNext,   // done; the stream goes on with its next instruction
  kPause,  // done; the stream pauses until the other streams have moved as far as they can
  kStop,   // not done; the walk ends here (an allocation that did not fit)
};

/// How a walk ended.
enum class WalkEnd : std::uint8_t {
  kFinished,  // every stream reached the end of its list
  kStopped,   // the driver stopped it
};

class ProgramWalk {
 public:
  /// Walks `program` from its start; keeps its buffers between walks.
  template <class Driver>
  [[gnu::always_inline]] WalkEnd run(const Program& program, Driver& driver) {
    recorded_.assign(program.events.size(), 0);
    const std::size_t streams = program.streams.size();
    position_.assign(streams, 0);
    executed_ = 0;
    bool moved = true;
    while (moved) {
      moved = false;
      for (std::size_t s = 0; s < streams; ++s) {
        const Advance a = advance(program, static_cast<StreamId>(s), driver);
        if (a == Advance::kStopped) return WalkEnd::kStopped;
        if (a == Advance::kMoved) moved = true;
      }
    }
    for (std::size_t s = 0; s < streams; ++s) {
      MEMPLAN_CHECK(
          position_[s] == program.streams[s].size(),
          "every wait has a matching record that is reached (the program does not deadlock)");
    }
    return WalkEnd::kFinished;
  }

  /// Instructions handed out (and done) by the last walk.
  [[nodiscard]] std::size_t executed() const { return executed_; }

 private:
  enum class Advance : std::uint8_t { kStill, kMoved, kStopped };

  /// Hands out the instructions of `stream` until one blocks, pauses or stops the walk.
  template <class Driver>
  Advance advance(const Program& program, StreamId stream, Driver& driver) {
    const auto s = static_cast<std::size_t>(stream);
    // Locals, not members, so that they stay in registers across the driver's calls.
    const Instruction* const list = program.streams[s].data();
    const std::size_t size = program.streams[s].size();
    std::uint8_t* const recorded = recorded_.data();
    const std::size_t from = position_[s];
    std::size_t i = from;
    Step step = Step::kNext;
    auto state = driver.enter(stream);
    for (; i < size; ++i) {
      const Instruction& in = list[i];
      if (in.kind == InstrKind::kWait && recorded[index(in.event())] == 0) break;
      if (in.kind == InstrKind::kRecord) recorded[index(in.event())] = 1;
      step = driver.step(stream, i, in, state);
      if (step != Step::kNext) break;
    }
    driver.leave(stream, state);
    if (step == Step::kPause) ++i;  // done, and counts as a move even at the end of the list
    executed_ += i - from;
    position_[s] = i;
    if (step == Step::kStop) return Advance::kStopped;
    return i != from || step == Step::kPause ? Advance::kMoved : Advance::kStill;
  }

  std::vector<std::uint8_t> recorded_;  // per event
  std::vector<std::size_t> position_;  // per stream
  std::size_t executed_ = 0;
};

}  // namespace memplan::sim
