#include "cli/json_report.h"

#include "core/units.h"

#include <cstdio>
#include <ctime>
#include <fstream>

#include "cli/command.h"

namespace kiln::cli {
nlohmann::ordered_json ReportHeader(const std::string& command) {
  return {{"command", command}, {"kiln_version", KILN_VERSION}, {"date", UtcTimestamp()}};
}

void WriteJson(const std::string& command, const std::string& path,
               const nlohmann::ordered_json& report) {
  std::ofstream f(path);
  // NOTE: replace, not throw: generated texts (kiln eval compare) may end inside a UTF-8
  // sequence.
  if (f) f << report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  if (!f) Fail(command, IoError("cannot write " + path));
  std::fprintf(stderr, "kiln %s: wrote %s\n", command.c_str(), path.c_str());
}

}  // namespace kiln::cli
