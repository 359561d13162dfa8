#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace kiln {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops,
                                     bool include_stop_str_in_output)
    : stops_(std::move(stops)), include_stop_str_in_output_(include_stop_str_in_output) {
  for (const std::string& stop : stops_) {
    CHECK(!stop.empty()) << "empty stop string";
    max_stop_length_ = std::max(max_stop_length_, stop.size());
  }
}

size_t StopStringMatcher::HeldBackLength(std::string_view text) const {
  // Try the longest candidate suffix first; a stop string of length L can have a proper prefix
  // of at most L - 1 bytes at the end of the text.
  const size_t longest = std::min(text.size(), max_stop_length_ - 1);
  for (size_t len = longest; len > 0; --len) {
    const std::string_view suffix = text.substr(text.size() - len);
    for (const std::string& stop : stops_) {
      if (stop.size() > len && std::string_view(stop).starts_with(suffix)) return len;
    }
  }
  return 0;
}

StopStringMatcher::Update StopStringMatcher::Push(std::string_view new_text) {
  CHECK(!is_stopped_) << "Push() after a stop string matched";
  if (stops_.empty()) return {std::string(new_text), std::nullopt};

  // Every match starts inside held_ + new_text: text already returned cannot start one.
  std::string text = std::move(held_);
  held_.clear();
  text.append(new_text);

  // The earliest complete match; at the same start, the first stop in the list.
  size_t match_pos = std::string::npos;
  int32_t match_index = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = text.find(stops_[i]);
    if (pos < match_pos) {
      match_pos = pos;
      match_index = static_cast<int32_t>(i);
    }
  }
  if (match_index >= 0) {
    is_stopped_ = true;
    const size_t end =
        include_stop_str_in_output_ ? match_pos + stops_[match_index].size() : match_pos;
    text.resize(end);
    return {std::move(text), match_index};
  }

  const size_t held_length = HeldBackLength(text);
  held_ = text.substr(text.size() - held_length);
  text.resize(text.size() - held_length);
  return {std::move(text), std::nullopt};
}

std::string StopStringMatcher::Flush() { return std::exchange(held_, std::string()); }

}  // namespace kiln
