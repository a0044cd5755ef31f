// Prefix snapshots on disk (see snapshot_file.h).
//
// Layout (little-endian, as the host writes it; a file is only read back by the same build):
//   "KVSNAP2\n"  u64 header_length  header  u64 header_checksum  tensors  u64 tensor_checksum
// header: str model_fingerprint, str strategy, str space, i64 hits, i8 retention class,
//   u8 named, [named: str qualified name, i64 created_at (Unix microseconds), i64 ttl
//   (microseconds, -1 for none), str cache_implementation], i8 scalar type, u64 token count,
//   i32 tokens..., u32 layer count, per layer 4 x i64 key sizes and 4 x i64 value sizes;
//   str = u32 length + bytes. tensors: per layer keys then values, raw.
// Format 1 ("KVSNAP1\n", without class and name) is refused: its entries are cache, not state.
#include "cache/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/snapshot.h"

namespace kvserve::cache {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'N', 'A', 'P', '2', '\n'};
constexpr char kMagicV1[8] = {'K', 'V', 'S', 'N', 'A', 'P', '1', '\n'};
constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;

// A fast 64-bit checksum (multiply-xor over 8-byte words); not cryptographic.
uint64_t Checksum(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h ^= w;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  h ^= n;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

constexpr uint64_t kSeed = 0x6B7673657276ull;

class Writer {
 public:
  void Bytes(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  template <typename T>
  void Put(T value) {
    Bytes(&value, sizeof(value));
  }
  void Str(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool Bytes(void* data, size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(data, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Get(T* value) {
    return Bytes(value, sizeof(T));
  }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!Get(&n) || in_.size() - pos_ < n) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }
  size_t left() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

struct LayerSizes {
  int64_t keys[4];
  int64_t values[4];
};

struct ParsedHeader {
  SnapshotFileHeader header;
  at::ScalarType dtype = at::ScalarType::Float;
  std::vector<LayerSizes> layers;
  uint64_t header_length = 0;
  int64_t tensor_bytes = 0;
};

std::string EncodeHeader(const Snapshot& snapshot, std::string_view space, int64_t hits,
                         const SnapshotFileIdentity& identity, const SnapshotFileExtras& extras) {
  Writer w;
  w.Str(identity.model_fingerprint);
  w.Str(identity.strategy);
  w.Str(space);
  w.Put<int64_t>(hits);
  w.Put<int8_t>(static_cast<int8_t>(extras.retention));
  w.Put<uint8_t>(extras.named.has_value() ? 1 : 0);
  if (extras.named) {
    const PrefixInfo& named = *extras.named;
    w.Str(named.name);
    w.Put<int64_t>(absl::ToUnixMicros(named.created_at));
    w.Put<int64_t>(named.options.ttl == absl::InfiniteDuration()
                       ? int64_t{-1}
                       : absl::ToInt64Microseconds(named.options.ttl));
    w.Str(named.options.cache_implementation);
  }
  w.Put<int8_t>(static_cast<int8_t>(snapshot.keys(0).scalar_type()));
  w.Put<uint64_t>(static_cast<uint64_t>(snapshot.num_tokens()));
  w.Bytes(snapshot.token_ids().data(), snapshot.token_ids().size() * sizeof(int32_t));
  w.Put<uint32_t>(static_cast<uint32_t>(snapshot.num_layers()));
  for (int i = 0; i < snapshot.num_layers(); ++i) {
    for (const at::Tensor* t : {&snapshot.keys(i), &snapshot.values(i)}) {
      for (int d = 0; d < 4; ++d) w.Put<int64_t>(t->size(d));
    }
  }
  return std::move(w.out());
}

int64_t ElementBytes(at::ScalarType type) {
  switch (type) {
    case at::ScalarType::Float:
      return 4;
    case at::ScalarType::Half:
    case at::ScalarType::BFloat16:
      return 2;
    default:
      return 0;
  }
}

std::string Errno(int error) { return std::strerror(error); }

// Reads exactly `n` bytes at the file's position; false at end of file or on an error.
bool ReadFully(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFully(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return false;
    if (put == 0) {
      errno = ENOSPC;
      return false;
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now; false (errno set) when close reports a write error.
  bool Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

// Opens `path` and parses its header; leaves the file positioned at the tensors.
absl::StatusOr<ParsedHeader> OpenAndParse(const std::string& path,
                                          const SnapshotFileIdentity& expected, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat '", path, "': ", Errno(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a regular file"));
  }
  const int64_t size = st.st_size;
  char magic[8];
  uint64_t header_length = 0;
  if (!ReadFully(fd, magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    if (std::memcmp(magic, kMagicV1, sizeof(kMagicV1)) == 0) {
      return absl::DataLossError(absl::StrCat(
          "'", path, "' is of the first snapshot file format (no retention class or name)"));
    }
    return absl::DataLossError(absl::StrCat("'", path, "' is not a kvserve snapshot file"));
  }
  if (!ReadFully(fd, &header_length, sizeof(header_length)) || header_length > kMaxHeaderBytes ||
      static_cast<int64_t>(header_length + 32) > size) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated or has a corrupt header"));
  }
  std::string header(header_length, '\0');
  uint64_t header_checksum = 0;
  if (!ReadFully(fd, header.data(), header.size()) ||
      !ReadFully(fd, &header_checksum, sizeof(header_checksum))) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated in its header"));
  }
  if (Checksum(kSeed, header.data(), header.size()) != header_checksum) {
    return absl::DataLossError(absl::StrCat("'", path, "' has a corrupt header (checksum)"));
  }
  ParsedHeader parsed;
  parsed.header_length = header_length;
  SnapshotFileHeader& h = parsed.header;
  Reader r(header);
  int8_t dtype = 0;
  uint64_t num_tokens = 0;
  uint32_t num_layers = 0;
  int8_t retention = 0;
  uint8_t named = 0;
  bool ok = r.Str(&h.model_fingerprint) && r.Str(&h.strategy) && r.Str(&h.space) &&
            r.Get(&h.hits) && r.Get(&retention) && r.Get(&named) && named <= 1 &&
            retention >= static_cast<int8_t>(RetentionClass::kLow) &&
            retention <= static_cast<int8_t>(RetentionClass::kHigh);
  if (ok && named == 1) {
    PrefixInfo& info = h.named.emplace();
    int64_t created_us = 0, ttl_us = 0;
    ok = r.Str(&info.name) && r.Get(&created_us) && r.Get(&ttl_us) &&
         r.Str(&info.options.cache_implementation) && !info.name.empty() &&
         (ttl_us == -1 || ttl_us > 0);
    info.created_at = absl::FromUnixMicros(created_us);
    info.options.ttl = ttl_us == -1 ? absl::InfiniteDuration() : absl::Microseconds(ttl_us);
    info.options.pinned = false;  // only unpinned named prefixes leave the device store
    info.options.retention = static_cast<RetentionClass>(retention);
  }
  ok = ok && r.Get(&dtype) && r.Get(&num_tokens) && num_tokens <= r.left() / sizeof(int32_t) &&
       num_tokens > 0;
  h.retention = static_cast<RetentionClass>(retention);
  if (ok) {
    h.tokens.resize(num_tokens);
    ok = r.Bytes(h.tokens.data(), num_tokens * sizeof(int32_t)) && r.Get(&num_layers) &&
         num_layers > 0 && num_layers <= r.left() / sizeof(LayerSizes);
  }
  if (!ok) return absl::DataLossError(absl::StrCat("'", path, "' has a malformed header"));
  parsed.dtype = static_cast<at::ScalarType>(dtype);
  const int64_t element_bytes = ElementBytes(parsed.dtype);
  if (element_bytes == 0) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' names an unsupported element type (", int{dtype}, ")"));
  }
  h.dtype = std::string(c10::toString(parsed.dtype));
  if (h.named) {
    h.named->num_tokens = static_cast<int64_t>(num_tokens);
    h.named->hits = h.hits;
  }
  parsed.layers.resize(num_layers);
  int64_t tensor_bytes = 0;
  for (LayerSizes& layer : parsed.layers) {
    if (!r.Bytes(&layer, sizeof(layer))) {
      return absl::DataLossError(absl::StrCat("'", path, "' has a malformed header"));
    }
    for (const int64_t* sizes : {layer.keys, layer.values}) {
      if (sizes[0] != 1 || sizes[2] != static_cast<int64_t>(num_tokens) || sizes[1] < 1 ||
          sizes[3] < 1 || sizes[1] > (int64_t{1} << 16) || sizes[3] > (int64_t{1} << 16)) {
        return absl::DataLossError(absl::StrCat("'", path, "' has malformed tensor sizes"));
      }
      tensor_bytes += sizes[1] * sizes[2] * sizes[3] * element_bytes;
    }
  }
  if (!r.done()) return absl::DataLossError(absl::StrCat("'", path, "' has a malformed header"));
  parsed.tensor_bytes = tensor_bytes;
  if (h.named) {
    h.named->bytes = tensor_bytes;
    h.named->fingerprint = h.model_fingerprint;
  }
  h.file_bytes = static_cast<int64_t>(sizeof(kMagic) + 8 + header_length + 8) + tensor_bytes + 8;
  if (size != h.file_bytes) {
    return absl::DataLossError(absl::StrCat("'", path, "' is ", size, " bytes but its header says ",
                                            h.file_bytes,
                                            size < h.file_bytes ? " (truncated)" : ""));
  }
  if (h.model_fingerprint != expected.model_fingerprint || h.strategy != expected.strategy) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' was written for model '", h.model_fingerprint, "' strategy '",
                     h.strategy, "', not this server's model '", expected.model_fingerprint,
                     "' strategy '", expected.strategy, "'"));
  }
  return parsed;
}

}  // namespace

std::string SnapshotFileName(std::string_view space, absl::Span<const int32_t> tokens) {
  uint64_t h = Checksum(kSeed, space.data(), space.size());
  h = Checksum(h, tokens.data(), tokens.size() * sizeof(int32_t));
  return absl::StrFormat("%016x.kvsnap", h);
}

int64_t SnapshotFileBytes(const Snapshot& snapshot, std::string_view space,
                          const SnapshotFileIdentity& identity, const SnapshotFileExtras& extras) {
  return static_cast<int64_t>(sizeof(kMagic) + 8 +
                              EncodeHeader(snapshot, space, 0, identity, extras).size() + 8 + 8) +
         snapshot.bytes();
}

absl::Status WriteSnapshotFile(const std::string& path, const Snapshot& snapshot,
                               std::string_view space, int64_t hits,
                               const SnapshotFileIdentity& identity,
                               const SnapshotFileExtras& extras) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
  const std::string header = EncodeHeader(snapshot, space, hits, identity, extras);
  const uint64_t header_length = header.size();
  const uint64_t header_checksum = Checksum(kSeed, header.data(), header.size());
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return absl::InternalError(absl::StrCat("cannot create '", temp, "': ", Errno(errno)));
  }
  auto fail = [&](int error) {
    ::unlink(temp.c_str());
    const std::string message =
        absl::StrCat("cannot write prefix snapshot file '", path, "': ", Errno(error));
    return error == ENOSPC || error == EFBIG || error == EDQUOT
               ? absl::ResourceExhaustedError(message)
               : absl::InternalError(message);
  };
  bool ok = WriteFully(fd.get(), kMagic, sizeof(kMagic)) &&
            WriteFully(fd.get(), &header_length, sizeof(header_length)) &&
            WriteFully(fd.get(), header.data(), header.size()) &&
            WriteFully(fd.get(), &header_checksum, sizeof(header_checksum));
  uint64_t tensor_checksum = kSeed;
  for (int i = 0; ok && i < snapshot.num_layers(); ++i) {
    for (const at::Tensor* t : {&snapshot.keys(i), &snapshot.values(i)}) {
      // Device tensors are copied to the host first.
      const at::Tensor host = t->device().is_cpu() ? t->contiguous() : t->to(at::kCPU).contiguous();
      const size_t n = host.nbytes();
      tensor_checksum = Checksum(tensor_checksum, host.data_ptr(), n);
      ok = ok && WriteFully(fd.get(), host.data_ptr(), n);
    }
  }
  ok = ok && WriteFully(fd.get(), &tensor_checksum, sizeof(tensor_checksum));
  if (!ok) return fail(errno);
  if (!fd.Close()) return fail(errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail(errno);
  return absl::OkStatus();
}

absl::StatusOr<SnapshotFileHeader> ReadSnapshotFileHeader(const std::string& path,
                                                          const SnapshotFileIdentity& expected) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    return error == ENOENT
               ? absl::NotFoundError(absl::StrCat("'", path, "' does not exist"))
               : absl::InternalError(absl::StrCat("cannot open '", path, "': ", Errno(error)));
  }
  absl::StatusOr<ParsedHeader> parsed = OpenAndParse(path, expected, fd.get());
  if (!parsed.ok()) return parsed.status();
  return std::move(parsed->header);
}

absl::StatusOr<std::shared_ptr<const Snapshot>> ReadSnapshotFile(
    const std::string& path, const SnapshotFileIdentity& expected,
    absl::Span<const int32_t> expected_tokens) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    return error == ENOENT
               ? absl::NotFoundError(absl::StrCat("'", path, "' does not exist"))
               : absl::InternalError(absl::StrCat("cannot open '", path, "': ", Errno(error)));
  }
  absl::StatusOr<ParsedHeader> parsed = OpenAndParse(path, expected, fd.get());
  if (!parsed.ok()) return parsed.status();
  if (absl::Span<const int32_t>(parsed->header.tokens) != expected_tokens) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", path, "' holds other tokens than its entry (", parsed->header.tokens.size(),
        " tokens, ", expected_tokens.size(), " expected)"));
  }
  std::vector<at::Tensor> keys, values;
  uint64_t checksum = kSeed;
  const auto options = at::TensorOptions().dtype(parsed->dtype).device(at::kCPU);
  for (const LayerSizes& layer : parsed->layers) {
    for (const int64_t* sizes : {layer.keys, layer.values}) {
      at::Tensor t = at::empty({sizes[0], sizes[1], sizes[2], sizes[3]}, options);
      if (!ReadFully(fd.get(), t.data_ptr(), t.nbytes())) {
        return absl::DataLossError(absl::StrCat("'", path, "' is truncated in its tensors"));
      }
      checksum = Checksum(checksum, t.data_ptr(), t.nbytes());
      (sizes == layer.keys ? keys : values).push_back(std::move(t));
    }
  }
  uint64_t stored = 0;
  if (!ReadFully(fd.get(), &stored, sizeof(stored))) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated (no checksum)"));
  }
  if (stored != checksum) {
    return absl::DataLossError(absl::StrCat("'", path, "' has corrupt tensors (checksum)"));
  }
  return Snapshot::FromTensors(std::move(parsed->header.tokens), expected.model_fingerprint,
                               std::move(keys), std::move(values));
}

}  // namespace kvserve::cache
