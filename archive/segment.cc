#include "archive/segment.h"

#include <openssl/evp.h>
#include <zstd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <utility>

#include "core/json.h"
#include "core/json_delta.h"
#include "core/names.h"
#include "core/partitioner.h"

namespace sluice::archive {
namespace {

// The layout is docs/archive.md#segment-files; keep the two in step.
constexpr std::string_view kMagic{"sluiceSG", 8};
// magic, version u32, partition u32, first u64, last u64, events u64, body_size u64, type_len u8.
constexpr size_t kFixedHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 1;
constexpr size_t kShaBytes = 32;
// What a decoded row costs beyond its strings, as kMaxSegmentRowBytes counts it.
constexpr uint64_t kRowOverheadBytes = 256;

constexpr uint8_t kDeleted = 0x01;
constexpr uint8_t kHasExpectedVersion = 0x02;
constexpr uint8_t kHasState = 0x04;
constexpr uint8_t kHasDelta = 0x08;
constexpr uint8_t kKnownFlags = kDeleted | kHasExpectedVersion | kHasState | kHasDelta;

using Sha256 = std::array<unsigned char, kShaBytes>;

Sha256 Digest(std::string_view a, std::string_view b = {}) {
  Sha256 out{};
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned int n = 0;
  // Failing here means OpenSSL has no SHA-256 or no memory: nothing a caller can handle.
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), a.data(), a.size()) != 1 || EVP_DigestUpdate(ctx.get(), b.data(), b.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), out.data(), &n) != 1 || n != kShaBytes) {
    std::fprintf(stderr, "sluice: OpenSSL SHA-256 failed\n");
    std::abort();
  }
  return out;
}

std::string_view View(const Sha256& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutBytes(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}

uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// Reads the fields of a header or body; every Get* is false past the end.
class Cursor {
 public:
  explicit Cursor(std::string_view in) : in_(in) {}
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }

  bool GetLe(uint64_t& v, int bytes) {
    if (in_.size() - pos_ < static_cast<size_t>(bytes)) return false;
    v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
    pos_ += bytes;
    return true;
  }
  // Unsigned LEB128 of at most 10 bytes whose value fits 64 bits.
  bool GetVarint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == in_.size()) return false;
      const uint8_t b = static_cast<unsigned char>(in_[pos_++]);
      if (shift == 63 && b > 1) return false;
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool GetBytes(std::string_view& s, uint64_t max) {
    uint64_t n = 0;
    if (!GetVarint(n) || n > max || n > in_.size() - pos_) return false;
    s = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool GetString(std::string& s, uint64_t max) {
    std::string_view v;
    if (!GetBytes(v, max)) return false;
    s.assign(v);
    return true;
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

std::string PartitionDigits(uint32_t partition) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03u", partition);
  return buf;
}

std::string EventIdDigits(uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(id));
  return buf;
}

// "account/p003 events 1..1000", for messages.
std::string Describe(const SegmentHeader& h) {
  return h.entity_type + "/p" + PartitionDigits(h.partition) + " events " + std::to_string(h.first_event_id) + ".." +
         std::to_string(h.last_event_id);
}

uint64_t RowBytes(const sql::EventRow& r) {
  return kRowOverheadBytes + r.entity_id.size() + r.command_id.size() + r.command_name.size() + r.request.size() +
         r.response.size() + r.state.size() + r.delta.size();
}

// The latest row of an entity seen so far in a segment, and its state as a
// parsed document when a delta was applied to get it (the next delta of a
// chain then applies without parsing the state text again).
struct EntityAt {
  uint64_t version = 0;
  bool deleted = false;
  size_t row = 0;
  std::optional<Json> state;
};

// `base` (the document, or else the text parsed) with the delta text applied.
Result<Json> Rebuilt(const std::optional<Json>& base_doc, const std::string& base_text, std::string_view delta) {
  Json parsed;
  if (!base_doc) {
    ASSIGN_OR_RETURN(parsed, ParseJson(base_text));
  }
  ASSIGN_OR_RETURN(Json ops, ParseJson(delta));
  return ApplyJsonDelta(base_doc ? *base_doc : parsed, ops);
}

// What follows a delta row: the previous row of its entity in the segment
// is its version - 1 and not a delete.
bool Follows(const EntityAt& at, const sql::EventRow& row) { return !at.deleted && at.version + 1 == row.version; }

struct ZstdCctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct ZstdDctxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

Status Damaged(std::string_view what) { return Internal("segment is damaged: " + std::string(what)); }
Status Damaged(const SegmentHeader& h, std::string_view what) {
  return Internal("segment " + Describe(h) + " is damaged: " + std::string(what));
}

}  // namespace

std::string SegmentKey(const std::string& type, uint32_t partition, uint64_t first_event_id,
                       uint64_t last_event_id) {
  return "segments/" + type + "/p" + PartitionDigits(partition) + "/" + EventIdDigits(first_event_id) + "-" +
         EventIdDigits(last_event_id) + ".seg";
}

std::optional<SegmentHeader> ParseSegmentKey(std::string_view key) {
  constexpr std::string_view kPrefix = "segments/";
  constexpr std::string_view kSuffix = ".seg";
  if (key.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  key.remove_prefix(kPrefix.size());
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos || !IsValidTypeName(key.substr(0, slash))) return std::nullopt;
  SegmentHeader h;
  h.entity_type.assign(key.substr(0, slash));
  key.remove_prefix(slash + 1);
  const size_t slash2 = key.find('/');
  if (slash2 == std::string_view::npos || slash2 < 4 || slash2 > 11 || key[0] != 'p') return std::nullopt;
  uint64_t partition = 0;
  for (const char c : key.substr(1, slash2 - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    partition = partition * 10 + static_cast<uint64_t>(c - '0');
  }
  if (partition > UINT32_MAX) return std::nullopt;
  h.partition = static_cast<uint32_t>(partition);
  if (PartitionDigits(h.partition) != key.substr(1, slash2 - 1)) return std::nullopt;  // another padding
  key.remove_prefix(slash2 + 1);
  if (key.size() != 20 + 1 + 20 + kSuffix.size() || key[20] != '-' || key.substr(41) != kSuffix) return std::nullopt;
  auto digits20 = [](std::string_view s, uint64_t& out) {
    out = 0;
    for (const char c : s) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<uint64_t>(c - '0');
    }
    return s <= "18446744073709551615";  // the largest uint64_t, as 20 digits
  };
  if (!digits20(key.substr(0, 20), h.first_event_id) || !digits20(key.substr(21, 20), h.last_event_id)) {
    return std::nullopt;
  }
  if (h.first_event_id > h.last_event_id) return std::nullopt;
  return h;
}

Result<std::string> EncodeSegment(const Segment& segment, const SegmentEncodeOptions& options) {
  const SegmentHeader& h = segment.header;
  const std::string name = "segment " + Describe(h);
  if (!IsValidTypeName(h.entity_type)) return InvalidArgument(name + ": '" + h.entity_type + "' is not a type name");
  if (h.first_event_id > h.last_event_id) return InvalidArgument(name + ": the range is empty (first > last)");
  if (h.events != segment.rows.size()) {
    return InvalidArgument(name + ": the header says " + std::to_string(h.events) + " events, but there are " +
                           std::to_string(segment.rows.size()) + " rows");
  }
  if (options.partitions > 0 && h.partition >= options.partitions) {
    return InvalidArgument(name + ": the type has only " + std::to_string(options.partitions) + " partitions");
  }
  uint64_t row_bytes = 0;
  for (const sql::EventRow& r : segment.rows) row_bytes += RowBytes(r);
  if (row_bytes > kMaxSegmentRowBytes) {
    return InvalidArgument(name + ": its rows hold " + std::to_string(row_bytes) + " bytes, more than the " +
                           std::to_string(kMaxSegmentRowBytes) + " a segment may; split the range");
  }

  std::string body;
  std::unordered_map<std::string, EntityAt> entities;
  for (size_t i = 0; i < segment.rows.size(); ++i) {
    const sql::EventRow& r = segment.rows[i];
    auto what = [&] { return name + ": row " + std::to_string(i) + " (event " + std::to_string(r.event_id) + ")"; };
    if (r.event_id < h.first_event_id || r.event_id > h.last_event_id) {
      return InvalidArgument(what() + " is outside the segment's range");
    }
    if (i > 0 && r.event_id <= segment.rows[i - 1].event_id) {
      return InvalidArgument(what() + " does not follow event " + std::to_string(segment.rows[i - 1].event_id) +
                             " (rows go in strictly increasing event_id order)");
    }
    if (r.deleted && !r.state.empty()) return InvalidArgument(what() + " is a delete but has a state");
    if (!r.deleted && r.state.empty()) {
      return InvalidArgument(what() + " has no state: pass every row with its whole state");
    }
    if (r.entity_id.size() > kMaxEntityIdBytes || r.command_name.size() > kMaxCommandNameBytes ||
        r.command_id.size() > kMaxCommandIdBytes) {
      return InvalidArgument(what() + " has an entity id, command id or command name longer than its column");
    }
    if (options.partitions > 0 && PartitionOf(r.entity_id, options.partitions) != h.partition) {
      return InvalidArgument(what() + ": its entity belongs to partition " +
                             std::to_string(PartitionOf(r.entity_id, options.partitions)));
    }

    auto [it, first_of_entity] = entities.try_emplace(r.entity_id);
    EntityAt& at = it->second;
    bool whole = !r.deleted;
    std::optional<Json> doc;
    if (!r.deleted && !r.delta.empty() && !first_of_entity && Follows(at, r)) {
      // Only a delta that gives back the very same text may stand in for the state.
      Result<Json> rebuilt = Rebuilt(at.state, segment.rows[at.row].state, r.delta);
      if (rebuilt.ok() && CanonicalJson(*rebuilt) == r.state) {
        whole = false;
        doc = std::move(*rebuilt);
      }
    }
    at = EntityAt{r.version, r.deleted, i, std::move(doc)};

    uint8_t flags = 0;
    if (r.deleted) flags |= kDeleted;
    if (r.expected_version) flags |= kHasExpectedVersion;
    if (whole) flags |= kHasState;
    if (!r.delta.empty()) flags |= kHasDelta;
    body.push_back(static_cast<char>(flags));
    PutVarint(body, r.event_id);
    PutBytes(body, r.entity_id);
    PutVarint(body, r.version);
    PutBytes(body, r.command_id);
    PutBytes(body, r.command_name);
    if (r.expected_version) PutVarint(body, *r.expected_version);
    PutBytes(body, r.request);
    PutBytes(body, r.response);
    if (whole) PutBytes(body, r.state);
    if (!r.delta.empty()) PutBytes(body, r.delta);
    PutVarint(body, ZigZag(r.committed_at_us));
    if (body.size() > kMaxSegmentBodyBytes) {
      return InvalidArgument(name + ": its body would pass the " + std::to_string(kMaxSegmentBodyBytes) +
                             " bytes a segment may hold; split the range");
    }
  }

  std::string out;
  out.append(kMagic);
  PutLe(out, kSegmentFormatVersion, 4);
  PutLe(out, h.partition, 4);
  PutLe(out, h.first_event_id, 8);
  PutLe(out, h.last_event_id, 8);
  PutLe(out, h.events, 8);
  PutLe(out, body.size(), 8);
  out.push_back(static_cast<char>(h.entity_type.size()));
  out.append(h.entity_type);
  out.append(View(Digest(body)));

  std::unique_ptr<ZSTD_CCtx, ZstdCctxFree> cctx(ZSTD_createCCtx());
  if (!cctx) return Internal(name + ": zstd could not make a compression context");
  auto set = [&](ZSTD_cParameter p, int v) { return !ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), p, v)); };
  if (!set(ZSTD_c_compressionLevel, options.zstd_level) || !set(ZSTD_c_contentSizeFlag, 1) ||
      !set(ZSTD_c_checksumFlag, 0) ||
      (options.long_distance_matching &&
       (!set(ZSTD_c_enableLongDistanceMatching, 1) || !set(ZSTD_c_windowLog, kSegmentZstdWindowLog)))) {
    return InvalidArgument(name + ": zstd refused the compression parameters (level " +
                           std::to_string(options.zstd_level) + ")");
  }
  const size_t header_size = out.size();
  out.resize(header_size + ZSTD_compressBound(body.size()));
  const size_t n = ZSTD_compress2(cctx.get(), out.data() + header_size, out.size() - header_size, body.data(),
                                  body.size());
  if (ZSTD_isError(n)) return Internal(name + ": zstd failed: " + ZSTD_getErrorName(n));
  out.resize(header_size + n);
  out.append(View(Digest(out)));
  return out;
}

Result<Segment> DecodeSegment(std::string_view bytes) {
  // The whole file's checksum first: nothing of a damaged file is parsed
  // further, decompressed or allocated for.
  if (bytes.size() < kFixedHeaderBytes + kShaBytes + kShaBytes) {
    return Damaged("it has " + std::to_string(bytes.size()) + " bytes, fewer than any segment");
  }
  if (bytes.substr(0, kMagic.size()) != kMagic) return Damaged("it does not start with the magic \"sluiceSG\"");
  Cursor in(bytes);
  uint64_t version = 0, partition = 0, events = 0, body_size = 0, type_len = 0;
  Segment seg;
  SegmentHeader& h = seg.header;
  uint64_t skip = 0;
  (void)in.GetLe(skip, 8);  // the magic
  (void)in.GetLe(version, 4);
  if (version == 0 || version > kSegmentFormatVersion) {
    return FailedPrecondition("segment format version " + std::to_string(version) +
                              " is unknown to this binary (it reads 1 to " + std::to_string(kSegmentFormatVersion) +
                              "): a newer sluice wrote it, or the file is damaged");
  }
  const std::string_view file = bytes.substr(0, bytes.size() - kShaBytes);
  if (View(Digest(file)) != bytes.substr(file.size())) {
    return Damaged("the file's checksum (its last 32 bytes) does not match its contents");
  }
  (void)in.GetLe(partition, 4);
  (void)in.GetLe(h.first_event_id, 8);
  (void)in.GetLe(h.last_event_id, 8);
  (void)in.GetLe(events, 8);
  (void)in.GetLe(body_size, 8);
  (void)in.GetLe(type_len, 1);
  h.partition = static_cast<uint32_t>(partition);
  h.events = events;
  if (in.pos() + type_len + kShaBytes > file.size()) return Damaged("its header runs past its end");
  h.entity_type.assign(file.substr(in.pos(), type_len));
  if (!IsValidTypeName(h.entity_type)) return Damaged("its type name is not a valid one");
  const std::string_view body_sha = file.substr(in.pos() + type_len, kShaBytes);
  if (h.first_event_id > h.last_event_id) return Damaged(h, "its range is empty (first > last)");
  if (events > h.last_event_id - h.first_event_id + 1 && h.last_event_id - h.first_event_id + 1 != 0) {
    return Damaged(h, "it counts more events than its range holds");
  }
  if (body_size > kMaxSegmentBodyBytes) {
    return Damaged(h, "its body declares " + std::to_string(body_size) + " bytes, more than the " +
                          std::to_string(kMaxSegmentBodyBytes) + " a segment may hold");
  }

  const std::string_view frame = file.substr(in.pos() + type_len + kShaBytes);
  if (frame.size() < 4 || static_cast<uint8_t>(frame[0]) != 0x28 || static_cast<uint8_t>(frame[1]) != 0xb5 ||
      static_cast<uint8_t>(frame[2]) != 0x2f || static_cast<uint8_t>(frame[3]) != 0xfd) {
    return Damaged(h, "its body is not a zstd frame");
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(frame_size) || frame_size != frame.size()) {
    return Damaged(h, "its body is not exactly one zstd frame");
  }
  const unsigned long long content_size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (content_size != body_size) {
    return Damaged(h, "its zstd frame does not declare the body's size, " + std::to_string(body_size) + " bytes");
  }
  std::string body(body_size, '\0');
  std::unique_ptr<ZSTD_DCtx, ZstdDctxFree> dctx(ZSTD_createDCtx());
  if (!dctx) return Internal("segment " + Describe(h) + ": zstd could not make a decompression context");
  // The output buffer is the bound on memory here, not the window.
  (void)ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax,
                               ZSTD_dParam_getBounds(ZSTD_d_windowLogMax).upperBound);
  const size_t got = ZSTD_decompressDCtx(dctx.get(), body.data(), body.size(), frame.data(), frame.size());
  if (ZSTD_isError(got)) return Damaged(h, std::string("zstd: ") + ZSTD_getErrorName(got));
  if (got != body_size) return Damaged(h, "its zstd frame holds fewer bytes than it declares");
  if (View(Digest(body)) != body_sha) return Damaged(h, "the body's checksum does not match the body");

  Cursor b(body);
  std::unordered_map<std::string, EntityAt> entities;
  uint64_t row_bytes = 0;
  for (uint64_t i = 0; i < events; ++i) {
    auto what = [i] { return "row " + std::to_string(i); };
    if (b.done()) return Damaged(h, "it has " + std::to_string(i) + " rows, not " + std::to_string(events));
    sql::EventRow& r = seg.rows.emplace_back();
    uint64_t flags = 0, committed = 0, expected = 0;
    std::string_view delta;
    if (!b.GetLe(flags, 1) || (flags & ~uint64_t{kKnownFlags}) != 0) return Damaged(h, what() + ": unknown flags");
    r.deleted = (flags & kDeleted) != 0;
    const bool has_state = (flags & kHasState) != 0;
    const bool has_delta = (flags & kHasDelta) != 0;
    if (r.deleted ? has_state : !has_state && !has_delta) {
      return Damaged(h, what() + ": its flags say neither a state nor a delete");
    }
    if (!b.GetVarint(r.event_id) || !b.GetString(r.entity_id, kMaxEntityIdBytes) || !b.GetVarint(r.version) ||
        !b.GetString(r.command_id, kMaxCommandIdBytes) || !b.GetString(r.command_name, kMaxCommandNameBytes) ||
        ((flags & kHasExpectedVersion) != 0 && !b.GetVarint(expected)) ||
        !b.GetString(r.request, kMaxSegmentBodyBytes) || !b.GetString(r.response, kMaxSegmentBodyBytes) ||
        (has_state && !b.GetString(r.state, kMaxSegmentBodyBytes)) ||
        (has_delta && !b.GetBytes(delta, kMaxSegmentBodyBytes)) ||
        !b.GetVarint(committed)) {
      return Damaged(h, what() + ": a field runs past the body's end or is malformed");
    }
    if ((flags & kHasExpectedVersion) != 0) r.expected_version = expected;
    r.committed_at_us = UnZigZag(committed);
    r.delta.assign(delta);
    if (r.event_id < h.first_event_id || r.event_id > h.last_event_id) {
      return Damaged(h, what() + " has event_id " + std::to_string(r.event_id) + ", outside the range");
    }
    if (i > 0 && r.event_id <= seg.rows[i - 1].event_id) {
      return Damaged(h, what() + " has event_id " + std::to_string(r.event_id) + ", not after the row before it");
    }

    auto [it, first_of_entity] = entities.try_emplace(r.entity_id);
    EntityAt& at = it->second;
    std::optional<Json> doc;
    if (!r.deleted && !has_state) {
      if (first_of_entity || !Follows(at, r)) {
        return Damaged(h, what() + " (event " + std::to_string(r.event_id) +
                              ") stores only a delta, but its entity's previous version is not before it");
      }
      Result<Json> rebuilt = Rebuilt(at.state, seg.rows[at.row].state, r.delta);
      if (!rebuilt.ok()) {
        return Damaged(h, what() + " (event " + std::to_string(r.event_id) + "): its delta does not apply: " +
                              rebuilt.status().message());
      }
      r.state = CanonicalJson(*rebuilt);
      doc = std::move(*rebuilt);
    }
    at = EntityAt{r.version, r.deleted, static_cast<size_t>(i), std::move(doc)};
    row_bytes += RowBytes(r);
    if (row_bytes > kMaxSegmentRowBytes) {
      return Damaged(h, "its rows would take more than the " + std::to_string(kMaxSegmentRowBytes) +
                            " bytes a segment may hold");
    }
  }
  if (!b.done()) return Damaged(h, "its body goes on after its " + std::to_string(events) + " rows");
  return seg;
}

std::string Sha256Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const Sha256 d = Digest(bytes);
  std::string out;
  out.reserve(2 * d.size());
  for (const unsigned char c : d) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

}  // namespace sluice::archive
