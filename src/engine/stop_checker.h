// Stop strings (SamplingParams::stop), matched across token boundaries in the detokenized output.
//
// The detokenizer hands over the new text of each step; a stop string may straddle steps:
//
//   push 1: "Hello, wor"   stop "world!"   emit "Hello, "   hold "wor" (could start "world!")
//   push 2: "ld"                           emit ""          hold "world"
//   push 3: "! And"                        match: emit "" (or "world!" with include_stop_str)
//
// Text that could still be the start of a stop string is held back until it cannot be, so that a
// client never receives text that a later step reveals to be (the start of) a stop string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Watches one sequence's output text for stop strings. Not thread-safe; one per sequence.
//
// Matching is byte-wise. With valid UTF-8 text and stop strings every cut falls on a character
// boundary (a match or a held-back prefix starts where a stop string starts, on a lead byte).
//
// Which stop wins: a decision is made in the push where the first stop string completes (the
// engine must stop generating there). Among the stop strings complete in that text, the one that
// starts earliest wins; at the same start, the first in the list. NOTE: a longer stop string that
// would have started earlier but is not complete yet does not wait to win: with stops
// {"xyz", "y"}, pushes "xy" then "z" stop at "y" (text "x").
//
// Invariants: held_ is the longest suffix of the text seen so far that is a proper prefix of
// some stop string (so it never contains a complete stop string), everything before it has been
// returned; held_.size() < the longest stop string.
class StopStringMatcher {
 public:
  // REQUIRES: every stop string is non-empty (SamplingParams::Validate checks it).
  StopStringMatcher(std::vector<std::string> stops, bool include_stop_str_in_output);

  struct Update {
    std::string text;                   // safe to emit now
    std::optional<int32_t> stop_index;  // set when a stop string matched: index into `stops`
  };

  // Feeds the newly decoded text of one step (UTF-8, may be empty) and returns the text that can
  // be emitted now. On a match, `text` ends right before the stop string (right after it when
  // include_stop_str_in_output), stop_index says which one, and the rest of the step's text is
  // dropped. With no stop strings the text passes through unchanged and nothing is held back.
  // REQUIRES: no earlier Push() returned a match.
  Update Push(std::string_view new_text);

  // The held-back text, for when generation ends without a stop (eos, max_tokens); empties it.
  std::string Flush();

  bool is_stopped() const { return is_stopped_; }
  const std::string& stop(int32_t index) const { return stops_[index]; }

 private:
  // The length of the longest suffix of `text` that is a proper prefix of some stop string.
  size_t HeldBackLength(std::string_view text) const;

  std::vector<std::string> stops_;
  bool include_stop_str_in_output_ = false;
  size_t max_stop_length_ = 0;
  std::string held_;
  bool is_stopped_ = false;
};

}  // namespace kiln
