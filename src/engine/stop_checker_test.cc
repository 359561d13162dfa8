#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kiln {
namespace {

using Update = StopStringMatcher::Update;

void ExpectUpdate(const Update& u, const std::string& text, std::optional<int32_t> stop_index) {
  EXPECT_EQ(u.text, text);
  EXPECT_EQ(u.stop_index, stop_index);
}

TEST(StopStringMatcherTest, NoStopsPassesThroughWithoutHoldingBack) {
  StopStringMatcher m({}, false);
  ExpectUpdate(m.Push("Hel"), "Hel", std::nullopt);
  ExpectUpdate(m.Push(""), "", std::nullopt);
  ExpectUpdate(m.Push("lo\xE4\xB8"), "lo\xE4\xB8", std::nullopt);  // even a cut character
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.is_stopped());
}

TEST(StopStringMatcherTest, StopSplitAcrossThreePushes) {
  StopStringMatcher m({"world!"}, false);
  ExpectUpdate(m.Push("Hello, wor"), "Hello, ", std::nullopt);
  ExpectUpdate(m.Push("ld"), "", std::nullopt);
  ExpectUpdate(m.Push("! And more"), "", 0);
  EXPECT_TRUE(m.is_stopped());
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, IncludeStopStrEndsRightAfterIt) {
  StopStringMatcher m({"world!"}, true);
  ExpectUpdate(m.Push("Hello, wor"), "Hello, ", std::nullopt);
  ExpectUpdate(m.Push("ld"), "", std::nullopt);
  ExpectUpdate(m.Push("! And more"), "world!", 0);

  StopStringMatcher one_push({"STOP"}, true);
  ExpectUpdate(one_push.Push("foo STOP bar STOP"), "foo STOP", 0);
}

TEST(StopStringMatcherTest, HeldBackTextIsReleasedWhenItCannotMatch) {
  StopStringMatcher m({"world!"}, false);
  ExpectUpdate(m.Push("Hello, wor"), "Hello, ", std::nullopt);
  ExpectUpdate(m.Push("k is"), "work is", std::nullopt);
  ExpectUpdate(m.Push(" worl"), " ", std::nullopt);
  ExpectUpdate(m.Push("d?"), "world?", std::nullopt);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, PartialReleaseKeepsTheLongestPossibleStart) {
  StopStringMatcher m({"aab"}, false);
  ExpectUpdate(m.Push("xaa"), "x", std::nullopt);
  ExpectUpdate(m.Push("a"), "a", std::nullopt);  // "aaa": the last "aa" may still start "aab"
  ExpectUpdate(m.Push("a"), "a", std::nullopt);
  ExpectUpdate(m.Push("b"), "", 0);
}

TEST(StopStringMatcherTest, OverlappingPrefixes) {
  {
    StopStringMatcher m({"ab", "abc"}, false);
    ExpectUpdate(m.Push("xa"), "x", std::nullopt);
    ExpectUpdate(m.Push("bc"), "", 0);  // both start at the same place: the first in the list
  }
  {
    StopStringMatcher m({"abc", "ab"}, true);
    ExpectUpdate(m.Push("xabcd"), "xabc", 0);  // same start: the first in the list
  }
  {
    // "ab" completes first; "abc" would start at the same place but is not complete yet.
    StopStringMatcher m({"abc", "ab"}, true);
    ExpectUpdate(m.Push("xa"), "x", std::nullopt);
    ExpectUpdate(m.Push("b"), "ab", 1);
  }
  {
    // Both complete in the same push: the one that starts earliest wins, whatever the order.
    StopStringMatcher m({"bc", "abc"}, false);
    ExpectUpdate(m.Push("zabcd"), "z", 1);
  }
  {
    // A held prefix of two different stops, released when neither can match.
    StopStringMatcher m({"abc", "abd"}, false);
    ExpectUpdate(m.Push("ab"), "", std::nullopt);
    ExpectUpdate(m.Push("e"), "abe", std::nullopt);
    ExpectUpdate(m.Push("abd"), "", 1);
  }
  {
    // The NOTE in stop_checker.h: a stop completing first wins over a longer earlier one.
    StopStringMatcher m({"xyz", "y"}, false);
    ExpectUpdate(m.Push("xy"), "x", 1);
  }
}

TEST(StopStringMatcherTest, MultiByteUtf8) {
  // "世界" = E4 B8 96 E7 95 8C; "你好" = E4 BD A0 E5 A5 BD.
  StopStringMatcher m({"世界"}, false);
  ExpectUpdate(m.Push("你好世"), "你好", std::nullopt);
  ExpectUpdate(m.Push("不"), "世不", std::nullopt);  // 不 = E4 B8 8D shares two bytes with 世
  ExpectUpdate(m.Push("世"), "", std::nullopt);
  ExpectUpdate(m.Push("界!"), "", 0);

  // é = C3 A9 and ç = C3 A7 share their first byte: the held-back part is the whole character.
  StopStringMatcher accents({"é!"}, true);
  ExpectUpdate(accents.Push("ça é"), "ça ", std::nullopt);
  ExpectUpdate(accents.Push("ç"), "éç", std::nullopt);
  ExpectUpdate(accents.Push("é!ok"), "é!", 0);
}

TEST(StopStringMatcherTest, FlushReturnsHeldBackText) {
  StopStringMatcher m({"</answer>"}, false);
  ExpectUpdate(m.Push("42 </ans"), "42 ", std::nullopt);
  EXPECT_EQ(m.Flush(), "</ans");
  EXPECT_EQ(m.Flush(), "");
  EXPECT_FALSE(m.is_stopped());
}

TEST(StopStringMatcherTest, EmptyPushesChangeNothing) {
  StopStringMatcher m({"END"}, false);
  ExpectUpdate(m.Push(""), "", std::nullopt);
  ExpectUpdate(m.Push("E"), "", std::nullopt);
  ExpectUpdate(m.Push(""), "", std::nullopt);
  ExpectUpdate(m.Push("ND"), "", 0);
}

// The longest suffix of `text` that is a proper prefix of some stop: the model's held-back part.
size_t ModelHeldBack(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t len = text.size(); len > 0; --len) {
    for (const std::string& stop : stops) {
      if (stop.size() > len && stop.compare(0, len, text, text.size() - len, len) == 0) return len;
    }
  }
  return 0;
}

// Against a trivially correct model: after each push, recompute everything from the whole text
// seen so far.
TEST(StopStringMatcherTest, RandomizedAgainstWholeTextModel) {
  std::mt19937 rng(1234);
  auto random_string = [&](size_t min_len, size_t max_len) {
    std::string s(std::uniform_int_distribution<size_t>(min_len, max_len)(rng), 'a');
    for (char& c : s) c = static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng));
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const int num_stops = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int i = 0; i < num_stops; ++i) stops.push_back(random_string(1, 4));
    const bool include = trial % 2 == 1;
    StopStringMatcher m(stops, include);

    std::string seen;     // all text pushed so far
    std::string emitted;  // all text returned so far
    bool stopped = false;
    for (int step = 0; step < 12 && !stopped; ++step) {
      const std::string chunk = random_string(0, 3);
      seen += chunk;
      const Update u = m.Push(chunk);
      emitted += u.text;

      // The model: the earliest complete match in the whole text, first in the list on ties.
      size_t match_pos = std::string::npos;
      int32_t match_index = -1;
      for (size_t i = 0; i < stops.size(); ++i) {
        const size_t pos = seen.find(stops[i]);
        if (pos < match_pos) {
          match_pos = pos;
          match_index = static_cast<int32_t>(i);
        }
      }
      if (match_index >= 0) {
        ASSERT_EQ(u.stop_index, match_index) << "trial " << trial;
        const size_t end = include ? match_pos + stops[match_index].size() : match_pos;
        ASSERT_EQ(emitted, seen.substr(0, end)) << "trial " << trial;
        stopped = true;
      } else {
        ASSERT_EQ(u.stop_index, std::nullopt) << "trial " << trial;
        ASSERT_EQ(emitted, seen.substr(0, seen.size() - ModelHeldBack(seen, stops)))
            << "trial " << trial;
      }
    }
    if (!stopped) {
      EXPECT_EQ(emitted + m.Flush(), seen) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace kiln
