#include "builder/safetensors_writer.h"

#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

namespace kiln {
namespace {

using nlohmann::json;

std::string ShardFileName(int index, int count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", index + 1, count);
  return buf;
}

// The bytes before a shard's data: u64 LE header length, then the JSON header padded with
// spaces so that the data starts at a multiple of 8.
std::string ShardPrefix(std::span<const SafetensorsTensorSpec> tensors,
                        std::span<const int> order) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (int t : order) {
    const SafetensorsTensorSpec& tensor = tensors[t];
    const int64_t nbytes = *DTypeByteSize(tensor.dtype, tensor.shape.numel());
    json shape = json::array();
    for (int64_t d : tensor.shape) shape.push_back(d);
    header[tensor.name] = {{"dtype", *SafetensorsDTypeName(tensor.dtype)},
                           {"shape", std::move(shape)},
                           {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return prefix + text;
}

std::string Errno(int err) { return std::strerror(err); }

Status WriteError(const std::string& path, int err) {
  std::string msg = path + ": write failed: " + Errno(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhausted(msg + " (free some disk space)");
  return IoError(msg);
}

// pwrite of the whole range, resuming after short writes and EINTR.
Status PwriteAll(int fd, const std::string& path, const void* data, size_t nbytes, int64_t off) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t n = ::pwrite(fd, p, nbytes, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return WriteError(path, errno);
    }
    if (n == 0) return WriteError(path, EIO);
    p += n;
    nbytes -= static_cast<size_t>(n);
    off += n;
  }
  return Status::Ok();
}

}  // namespace

int64_t SafetensorsLayout::TotalFileBytes() const {
  int64_t n = 0;
  for (const Shard& s : shards) n += s.file_size;
  return n;
}

Result<SafetensorsLayout> PlanSafetensorsShards(std::span<const SafetensorsTensorSpec> tensors,
                                                int64_t max_shard_bytes) {
  if (tensors.empty()) return InvalidArgument("a safetensors checkpoint needs at least one tensor");
  if (max_shard_bytes <= 0) {
    return InvalidArgument("max shard size must be positive, got " +
                           std::to_string(max_shard_bytes));
  }
  SafetensorsLayout layout;
  layout.placements.resize(tensors.size());
  std::unordered_set<std::string_view> names;
  std::vector<std::vector<int>> groups;
  int64_t group_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensorSpec& t = tensors[i];
    if (t.name.empty()) return InvalidArgument("tensor " + std::to_string(i) + " has no name");
    if (!names.insert(t.name).second) return InvalidArgument("duplicate tensor name " + t.name);
    KILN_RETURN_IF_ERROR(SafetensorsDTypeName(t.dtype).status().WithContext(t.name));
    KILN_ASSIGN_OR_RETURN(const int64_t nbytes, DTypeByteSize(t.dtype, t.shape.numel()));
    if (groups.empty() || (group_bytes > 0 && group_bytes + nbytes > max_shard_bytes)) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(static_cast<int>(i));
    group_bytes += nbytes;
    layout.placements[i].nbytes = nbytes;
    layout.total_size += nbytes;
  }
  const int num_shards = static_cast<int>(groups.size());
  for (int s = 0; s < num_shards; ++s) {
    SafetensorsLayout::Shard shard;
    shard.file_name = ShardFileName(s, num_shards);
    shard.tensors = std::move(groups[s]);
    shard.prefix = ShardPrefix(tensors, shard.tensors);
    int64_t offset = static_cast<int64_t>(shard.prefix.size());
    for (int t : shard.tensors) {
      layout.placements[t].shard = s;
      layout.placements[t].file_offset = offset;
      offset += layout.placements[t].nbytes;
    }
    shard.file_size = offset;
    layout.shards.push_back(std::move(shard));
  }
  return layout;
}

std::string SafetensorsIndexJson(const SafetensorsLayout& layout,
                                 std::span<const SafetensorsTensorSpec> tensors) {
  CHECK_EQ(layout.placements.size(), tensors.size());
  json weight_map = json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    weight_map[tensors[i].name] = layout.shards[layout.placements[i].shard].file_name;
  }
  json index = {{"metadata", {{"total_size", layout.total_size}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

Result<SafetensorsWriter> SafetensorsWriter::Create(
    const std::string& dir, const SafetensorsLayout& layout,
    std::span<const SafetensorsTensorSpec> tensors) {
  CHECK_EQ(layout.placements.size(), tensors.size());
  SafetensorsWriter w;
  w.dir_ = dir;
  w.layout_ = layout;
  if (layout.shards.size() > 1) w.index_json_ = SafetensorsIndexJson(layout, tensors);
  for (const SafetensorsLayout::Shard& shard : layout.shards) {
    const std::string path = dir + "/" + shard.file_name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(path + ": cannot create: " + Errno(errno));
    w.fds_.push_back(fd);
    if (::ftruncate(fd, static_cast<off_t>(shard.file_size)) != 0) {
      return WriteError(path, errno);
    }
    KILN_RETURN_IF_ERROR(PwriteAll(fd, path, shard.prefix.data(), shard.prefix.size(), 0));
  }
  return w;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& other) noexcept
    : dir_(std::move(other.dir_)),
      layout_(std::move(other.layout_)),
      index_json_(std::move(other.index_json_)),
      fds_(std::exchange(other.fds_, {})) {}

SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& other) noexcept {
  if (this != &other) {
    CloseAll();
    dir_ = std::move(other.dir_);
    layout_ = std::move(other.layout_);
    index_json_ = std::move(other.index_json_);
    fds_ = std::exchange(other.fds_, {});
  }
  return *this;
}

SafetensorsWriter::~SafetensorsWriter() { CloseAll(); }

void SafetensorsWriter::CloseAll() {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

Status SafetensorsWriter::WriteTensorBytes(int tensor, int64_t offset, const void* data,
                                           size_t nbytes) {
  CHECK(tensor >= 0 && tensor < static_cast<int>(layout_.placements.size())) << tensor;
  const SafetensorsLayout::Placement& p = layout_.placements[tensor];
  CHECK(offset >= 0 && offset + static_cast<int64_t>(nbytes) <= p.nbytes)
      << "tensor " << tensor << " range [" << offset << ", +" << nbytes << ") of " << p.nbytes;
  const int fd = fds_[p.shard];
  CHECK_GE(fd, 0);
  return PwriteAll(fd, dir_ + "/" + layout_.shards[p.shard].file_name, data, nbytes,
                   p.file_offset + offset);
}

Status SafetensorsWriter::Finish() {
  Status status;
  for (size_t s = 0; s < fds_.size(); ++s) {
    if (fds_[s] < 0) continue;
    if (::close(fds_[s]) != 0 && status.ok()) {
      status = WriteError(dir_ + "/" + layout_.shards[s].file_name, errno);
    }
    fds_[s] = -1;
  }
  KILN_RETURN_IF_ERROR(status);
  if (layout_.shards.size() > 1) {
    KILN_RETURN_IF_ERROR(WriteTextFile(dir_ + "/model.safetensors.index.json", index_json_));
  }
  return Status::Ok();
}

Status WriteTextFile(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(path + ": cannot create: " + Errno(errno));
  Status s = PwriteAll(fd, path, text.data(), text.size(), 0);
  if (::close(fd) != 0 && s.ok()) s = WriteError(path, errno);
  return s;
}

}  // namespace kiln
