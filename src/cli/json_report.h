// The JSON reports the measuring commands write with --json (`kiln bench`, `kiln eval`): a
// common header, then the command's own figures.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kiln::cli {

// {"command": command, "kiln_version": ..., "date": "2026-11-22T12:00:00Z"}: the header every
// report starts with.
nlohmann::ordered_json ReportHeader(const std::string& command);

// Writes `report` (indented; invalid UTF-8 in strings replaced by U+FFFD) to `path` and says so
// on stderr; fails the command `command` with an IoError naming the path when it cannot.
void WriteJson(const std::string& command, const std::string& path,
               const nlohmann::ordered_json& report);

}  // namespace kiln::cli
