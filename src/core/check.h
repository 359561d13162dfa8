// CHECK: aborts with file, line and a message when an invariant is broken. Use it for
// programming errors and impossible states, never for bad user input (return a Status then).
//
//   CHECK(block_id < num_blocks) << "block " << block_id << " of " << num_blocks;
//   CHECK_EQ(a.size(), b.size());
//   DCHECK(...)  // compiled only in debug builds (NDEBUG unset)
#pragma once

#include <sstream>
#include <string_view>

namespace kiln::internal {

// Collects the message of a failed CHECK and aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, std::string_view condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `CHECK(x) << ...` a void expression in both branches of the ternary below.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kiln::internal

#define CHECK(cond)                      \
  (cond) ? (void)0                       \
         : ::kiln::internal::Voidify() & \
               ::kiln::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define KILN_CHECK_OP_(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) KILN_CHECK_OP_(a, ==, b)
#define CHECK_NE(a, b) KILN_CHECK_OP_(a, !=, b)
#define CHECK_LT(a, b) KILN_CHECK_OP_(a, <, b)
#define CHECK_LE(a, b) KILN_CHECK_OP_(a, <=, b)
#define CHECK_GT(a, b) KILN_CHECK_OP_(a, >, b)
#define CHECK_GE(a, b) KILN_CHECK_OP_(a, >=, b)

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif
