// Human-written quantities on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

// Parses a byte size: "80GB", "141 GiB", "512MB", "1.5TB", "5G" or a plain number of bytes.
// Decimal units (KB, MB, GB, TB, or K, M, G, T) are powers of 1000, binary units (KiB, MiB, GiB,
// TiB) powers of 1024, as in HF's max_shard_size and vLLM's flags. Case-insensitive; spaces are
// ignored. InvalidArgument names the text for anything else, and for sizes under 1 byte or
// over 9e18 bytes.
Result<int64_t> ParseByteSize(std::string_view text);

// The current time in UTC as ISO 8601 with seconds: "2026-11-22T09:30:00Z".
std::string UtcTimestamp();

}  // namespace kiln
