#include "archive/segment.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/json_delta.h"
#include "core/partitioner.h"

namespace sluice::archive {
namespace {

using sql::EventRow;

// ---- an independent reader and writer of the layout in docs/archive.md ----

uint64_t Le(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

std::string LeBytes(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

std::string Unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

// A segment file taken apart: the header fields, the body's checksum and
// the uncompressed body.
struct Parts {
  uint32_t version = 0;
  SegmentHeader header;
  uint64_t body_size = 0;
  std::string body_sha;
  std::string body;
};

Parts TakeApart(std::string_view file) {
  Parts p;
  EXPECT_EQ(file.substr(0, 8), "sluiceSG");
  EXPECT_EQ(Unhex(Sha256Hex(file.substr(0, file.size() - 32))), file.substr(file.size() - 32));
  p.version = static_cast<uint32_t>(Le(file, 8, 4));
  p.header.partition = static_cast<uint32_t>(Le(file, 12, 4));
  p.header.first_event_id = Le(file, 16, 8);
  p.header.last_event_id = Le(file, 24, 8);
  p.header.events = Le(file, 32, 8);
  p.body_size = Le(file, 40, 8);
  const size_t type_len = static_cast<unsigned char>(file[48]);
  p.header.entity_type = std::string(file.substr(49, type_len));
  p.body_sha = std::string(file.substr(49 + type_len, 32));
  const std::string_view frame = file.substr(49 + type_len + 32, file.size() - (49 + type_len + 32) - 32);
  p.body.resize(p.body_size);
  const size_t n = ZSTD_decompress(p.body.data(), p.body.size(), frame.data(), frame.size());
  EXPECT_FALSE(ZSTD_isError(n));
  EXPECT_EQ(n, p.body_size);
  EXPECT_EQ(Unhex(Sha256Hex(p.body)), p.body_sha);
  return p;
}

// The file for these parts, with both checksums computed (or `body_sha` as given when not empty).
std::string PutTogether(const Parts& p) {
  std::string out = "sluiceSG" + LeBytes(p.version, 4) + LeBytes(p.header.partition, 4) +
                    LeBytes(p.header.first_event_id, 8) + LeBytes(p.header.last_event_id, 8) +
                    LeBytes(p.header.events, 8) + LeBytes(p.body_size, 8) +
                    LeBytes(p.header.entity_type.size(), 1) + p.header.entity_type +
                    (p.body_sha.empty() ? Unhex(Sha256Hex(p.body)) : p.body_sha);
  std::string frame(ZSTD_compressBound(p.body.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), p.body.data(), p.body.size(), 3));
  out += frame;
  return out + Unhex(Sha256Hex(out));
}

// One record of a body as docs/archive.md lays it out.
struct Record {
  uint8_t flags = 0;
  uint64_t event_id = 0;
  std::string entity_id;
  bool has_state = false;
  bool has_delta = false;
};

std::vector<Record> Records(std::string_view body) {
  std::vector<Record> out;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const uint8_t b = static_cast<unsigned char>(body.at(at++));
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
  };
  auto bytes = [&] {
    const uint64_t n = varint();
    std::string s(body.substr(at, n));
    at += n;
    return s;
  };
  while (at < body.size()) {
    Record r;
    r.flags = static_cast<unsigned char>(body[at++]);
    r.event_id = varint();
    r.entity_id = bytes();
    varint();  // version
    bytes();   // command_id
    bytes();   // command_name
    if (r.flags & 0x02) varint();
    bytes();  // request
    bytes();  // response
    r.has_state = (r.flags & 0x04) != 0;
    r.has_delta = (r.flags & 0x08) != 0;
    if (r.has_state) bytes();
    if (r.has_delta) bytes();
    varint();  // committed_at_us
    out.push_back(r);
  }
  return out;
}

// ---- histories like the writer's ----

void ExpectSameRow(const EventRow& want, const EventRow& got) {
  EXPECT_EQ(got.event_id, want.event_id);
  EXPECT_EQ(got.entity_id, want.entity_id);
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.command_id, want.command_id);
  EXPECT_EQ(got.command_name, want.command_name);
  EXPECT_EQ(got.expected_version, want.expected_version);
  EXPECT_EQ(got.request, want.request);
  EXPECT_EQ(got.response, want.response);
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(got.delta, want.delta);
  EXPECT_EQ(got.deleted, want.deleted);
  EXPECT_EQ(got.committed_at_us, want.committed_at_us);
  EXPECT_EQ(got.deltas_since_snapshot, 0u);
  EXPECT_EQ(got.delta_bytes_since_snapshot, 0u);
}

std::string RandomBytes(std::mt19937_64& rng, size_t max) {
  std::string s(rng() % (max + 1), '\0');
  for (char& c : s) {
    const uint64_t k = rng() % 4;
    c = k == 0 ? '\0' : k == 1 ? '\xff' : static_cast<char>(rng());
  }
  return s;
}

Json RandomValue(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 2 ? 6 : 8)) {
    case 0: return nullptr;
    case 1: return static_cast<int64_t>(rng());
    case 2: return std::vector<double>{0.5, -0.0, 1e300, 3.0}[rng() % 4];
    case 3: return std::string("\"h\u00e9\\ \n") + std::to_string(rng() % 1000);
    case 4: return rng() % 2 == 0;
    case 5: return uint64_t{18446744073709551615u};
    case 6: {
      Json a = Json::array();
      for (uint64_t n = rng() % 4; n > 0; --n) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (uint64_t n = rng() % 4; n > 0; --n) o["m" + std::to_string(rng() % 6)] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

Json RandomState(std::mt19937_64& rng) {
  Json o = Json::object();
  for (uint64_t n = 1 + rng() % 5; n > 0; --n) o["k" + std::to_string(rng() % 8)] = RandomValue(rng, 1);
  return o;
}

Json Edited(std::mt19937_64& rng, Json state) {
  for (uint64_t n = 1 + rng() % 3; n > 0; --n) {
    const std::string key = "k" + std::to_string(rng() % 8);
    switch (rng() % 4) {
      case 0: state.erase(key); break;
      case 1:
        if (state.contains(key) && state[key].is_array()) {
          state[key].push_back(RandomValue(rng, 2));
          break;
        }
        [[fallthrough]];
      case 2:
        if (state.contains(key) && state[key].is_object()) {
          state[key]["m" + std::to_string(rng() % 6)] = RandomValue(rng, 2);
          break;
        }
        [[fallthrough]];
      default: state[key] = RandomValue(rng, 1);
    }
  }
  return state;
}

// A partition's event table as the writer fills it: creates, edits stored
// as deltas or whole (a snapshot), deletes, creates after a delete, gaps in
// event_id; every row with its whole state, as the access layer reads it.
std::vector<EventRow> RandomHistory(std::mt19937_64& rng, size_t events) {
  const std::vector<std::string> ids = {"alice", std::string("\0nul\0", 5), std::string(64, '\xff'), "",
                                        std::string("b\xc3\x28\x80", 4), "carol"};
  struct Entity {
    uint64_t version = 0;
    std::optional<Json> state;
  };
  std::map<std::string, Entity> entities;
  std::vector<EventRow> rows;
  uint64_t event_id = 1 + rng() % 3;
  for (size_t i = 0; i < events; ++i) {
    EventRow r;
    r.event_id = event_id;
    event_id += rng() % 4 == 0 ? 2 + rng() % 5 : 1;
    r.entity_id = ids[rng() % ids.size()];
    Entity& e = entities[r.entity_id];
    r.version = ++e.version;
    r.command_id = RandomBytes(rng, 128);
    r.command_name = rng() % 5 == 0 ? "" : RandomBytes(rng, 64);
    if (rng() % 2 == 0) r.expected_version = rng() % 3 == 0 ? uint64_t{0} : r.version - 1;
    r.request = rng() % 4 == 0 ? "" : CanonicalJson(RandomValue(rng, 0));
    r.response = rng() % 4 == 0 ? "" : CanonicalJson(RandomValue(rng, 0));
    r.committed_at_us = static_cast<int64_t>(rng());
    if (!e.state) {
      e.state = RandomState(rng);
      r.state = CanonicalJson(*e.state);
    } else if (rng() % 8 == 0) {
      e.state.reset();
      r.deleted = true;
    } else {
      Json next = Edited(rng, *e.state);
      if (rng() % 4 != 0) r.delta = CanonicalJson(*JsonDelta(*e.state, next));
      e.state = std::move(next);
      r.state = CanonicalJson(*e.state);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

Segment Window(const std::vector<EventRow>& rows, size_t from, size_t to, uint64_t first, uint64_t last) {
  Segment s;
  s.header = SegmentHeader{"account", 7, first, last, to - from};
  s.rows.assign(rows.begin() + static_cast<std::ptrdiff_t>(from), rows.begin() + static_cast<std::ptrdiff_t>(to));
  return s;
}

Segment Decoded(const std::string& file) {
  Result<Segment> got = DecodeSegment(file);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  return got.ok() ? std::move(got).value() : Segment{};
}

std::string Encoded(const Segment& s, const SegmentEncodeOptions& options = {}) {
  Result<std::string> file = EncodeSegment(s, options);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(file).value() : std::string();
}

TEST(Segment, RandomHistoriesComeBackFieldForField) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const std::vector<EventRow> rows = RandomHistory(rng, 300);
    // Windows that start anywhere, often in the middle of an entity's deltas.
    for (int w = 0; w < 5; ++w) {
      size_t from = rng() % rows.size();
      size_t to = from + rng() % (rows.size() - from + 1);
      const uint64_t first = from < rows.size() ? rows[from].event_id - rng() % 2 : rows.back().event_id + 1;
      const uint64_t last = to > from ? rows[to - 1].event_id + rng() % 3 : first;
      const Segment s = Window(rows, from, to, first, last);
      const std::string file = Encoded(s);
      const Segment got = Decoded(file);
      EXPECT_EQ(got.header, s.header);
      ASSERT_EQ(got.rows.size(), s.rows.size());
      for (size_t i = 0; i < s.rows.size(); ++i) {
        SCOPED_TRACE("row " + std::to_string(i));
        ExpectSameRow(s.rows[i], got.rows[i]);
      }
      // Which rows hold whole states: each entity's first (unless a delete),
      // and a later one only when its hot row had no delta.
      const std::vector<Record> records = Records(TakeApart(file).body);
      ASSERT_EQ(records.size(), s.rows.size());
      std::map<std::string, const EventRow*> previous;
      for (size_t i = 0; i < s.rows.size(); ++i) {
        const EventRow& r = s.rows[i];
        const EventRow* before = previous[r.entity_id];
        const bool chained = before != nullptr && !before->deleted && !r.delta.empty() && !r.deleted;
        EXPECT_EQ(records[i].has_state, !r.deleted && !chained) << "row " << i;
        EXPECT_EQ(records[i].has_delta, !r.delta.empty()) << "row " << i;
        previous[r.entity_id] = &r;
      }
    }
  }
}

// Version `version` of "alice", stored by the hot table as the delta from `before`.
EventRow PatchRow(uint64_t event_id, uint64_t version, const Json& before, const Json& after) {
  EventRow r;
  r.event_id = event_id;
  r.entity_id = "alice";
  r.version = version;
  r.command_id = "c" + std::to_string(version);
  r.command_name = "patch";
  r.request = "{}";
  r.response = "{}";
  r.state = CanonicalJson(after);
  r.delta = CanonicalJson(*JsonDelta(before, after));
  return r;
}

TEST(Segment, AnEntitysFirstRowHoldsItsWholeStateEvenWhenTheHotRowWasADelta) {
  const Json v1 = Json::parse(R"({"balance":100,"owner":"Alice"})");
  const Json v2 = Json::parse(R"({"balance":150,"owner":"Alice"})");
  const Json v3 = Json::parse(R"({"balance":150,"owner":"Alice","tags":["vip"]})");
  // The hot table holds version 1 whole (archived in an earlier segment);
  // versions 2 and 3 are deltas, and this segment starts at version 2.
  Segment s;
  s.header = SegmentHeader{"account", 0, 2, 3, 2};
  s.rows = {PatchRow(2, 2, v1, v2), PatchRow(3, 3, v2, v3)};
  const std::string file = Encoded(s);
  const Segment got = Decoded(file);
  ASSERT_EQ(got.rows.size(), 2u);
  EXPECT_EQ(got.rows[0].state, R"({"balance":150,"owner":"Alice"})");
  EXPECT_EQ(got.rows[0].delta, R"([["s",["balance"],150]])");
  EXPECT_EQ(got.rows[1].state, R"({"balance":150,"owner":"Alice","tags":["vip"]})");
  EXPECT_EQ(got.rows[1].delta, R"([["s",["tags"],["vip"]]])");
  const std::vector<Record> records = Records(TakeApart(file).body);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_TRUE(records[0].has_state && records[0].has_delta);
  EXPECT_TRUE(!records[1].has_state && records[1].has_delta);
}

// The example of docs/archive.md#example, byte for byte.
TEST(Segment, TheDocumentedExample) {
  auto row = [](uint64_t event_id, std::string entity, uint64_t version, std::string command_id,
                std::string command_name, std::optional<uint64_t> expected, std::string request) {
    EventRow r;
    r.event_id = event_id;
    r.entity_id = std::move(entity);
    r.version = version;
    r.command_id = std::move(command_id);
    r.command_name = std::move(command_name);
    r.expected_version = expected;
    r.request = std::move(request);
    r.response = "{}";
    r.committed_at_us = 1700000000000000 + static_cast<int64_t>(event_id) - 101;
    return r;
  };
  Segment s;
  s.header = SegmentHeader{"account", 3, 101, 103, 3};
  s.rows.push_back(row(101, "alice", 1, "k1", "create", std::nullopt, R"({"balance":100})"));
  s.rows.back().state = R"({"balance":100})";
  s.rows.push_back(row(102, "bob", 4, "k2", "delete", 3, "{}"));
  s.rows.back().deleted = true;
  s.rows.push_back(row(103, "alice", 2, "k3", "patch", 1, R"({"balance":150})"));
  s.rows.back().state = R"({"balance":150})";
  s.rows.back().delta = R"([["s",["balance"],150]])";
  const std::string file = Encoded(s);
  EXPECT_EQ(Hex(file.substr(0, 88)),
            "736c7569636553470100000003000000650000000000000067000000000000000300000000000000a40000000000000007"
            "6163636f756e745b37e781aac3cff9c5c235da9a63816e307a7a7aaad4703ee28f1d0bb145fe05");
  EXPECT_EQ(file.substr(88, 4), "\x28\xb5\x2f\xfd");
  EXPECT_EQ(Hex(TakeApart(file).body),
            "046505616c69636501026b31066372656174650f7b2262616c616e6365223a3130307d027b7d0f7b2262616c616e6365"
            "223a3130307d8080f28183898506036603626f6204026b320664656c65746503027b7d027b7d8280f281838985060a6705"
            "616c69636502026b33057061746368010f7b2262616c616e6365223a3135307d027b7d175b5b2273222c5b2262616c616e"
            "6365225d2c3135305d5d8480f28183898506");
  const Segment got = Decoded(file);
  ASSERT_EQ(got.rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) ExpectSameRow(s.rows[i], got.rows[i]);
  EXPECT_EQ(SegmentKey("account", 3, 101, 103), "segments/account/p003/00000000000000000101-00000000000000000103.seg");
}

TEST(Segment, AStateItsDeltaDoesNotGiveBackByteForByteIsStoredWhole) {
  Segment s;
  s.header = SegmentHeader{"account", 0, 1, 2, 2};
  s.rows.resize(2);
  s.rows[0].event_id = 1;
  s.rows[0].version = 1;
  s.rows[0].state = R"({"a":1})";
  s.rows[1].event_id = 2;
  s.rows[1].version = 2;
  s.rows[1].state = R"({ "a": 2 })";  // not the canonical text the delta would give
  s.rows[1].delta = R"([["s",["a"],2]])";
  const std::string file = Encoded(s);
  EXPECT_EQ(Decoded(file).rows[1].state, R"({ "a": 2 })");
  EXPECT_TRUE(Records(TakeApart(file).body)[1].has_state);
}

TEST(Segment, EmptyAndDeletedOnly) {
  Segment empty;
  empty.header = SegmentHeader{"order", 12, 5, 9, 0};
  const Segment got = Decoded(Encoded(empty));
  EXPECT_EQ(got.header, empty.header);
  EXPECT_TRUE(got.rows.empty());

  Segment deleted;
  deleted.header = SegmentHeader{"order", 0, 1, 1, 1};
  deleted.rows.resize(1);
  deleted.rows[0].event_id = 1;
  deleted.rows[0].deleted = true;
  deleted.rows[0].committed_at_us = -1;
  const Segment back = Decoded(Encoded(deleted));
  ASSERT_EQ(back.rows.size(), 1u);
  ExpectSameRow(deleted.rows[0], back.rows[0]);
}

// ---- size ----

std::string RandomHex(std::mt19937_64& rng, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = kHex[rng() % 16];
  return s;
}

// 1,000 versions of one ~100 KB state, each a small edit: the hot table
// stores deltas with a whole state every `snapshot_every` versions.
std::vector<EventRow> ManyVersions(size_t snapshot_every, uint64_t& whole_bytes) {
  std::mt19937_64 rng(42);
  Json state = Json::object();
  for (int k = 0; k < 1000; ++k) state["member" + std::to_string(k)] = RandomHex(rng, 80);
  std::vector<EventRow> rows;
  whole_bytes = 0;
  for (uint64_t v = 1; v <= 1000; ++v) {
    EventRow r;
    r.event_id = v;
    r.entity_id = "big";
    r.version = v;
    r.command_id = "cmd-" + std::to_string(v);
    r.command_name = "patch";
    r.request = "{}";
    r.response = "{}";
    r.committed_at_us = 1700000000000000 + static_cast<int64_t>(v) * 1000;
    Json next = state;
    next["member" + std::to_string(rng() % 1000)] = RandomHex(rng, 80);
    next["counter"] = v;
    if (v > 1 && (v - 1) % snapshot_every != 0) r.delta = CanonicalJson(*JsonDelta(state, next));
    state = std::move(next);
    r.state = CanonicalJson(state);
    whole_bytes += r.state.size();
    rows.push_back(std::move(r));
  }
  return rows;
}

TEST(Segment, AThousandSmallEditsOfA100KBStateTakeWellUnderOnePercent) {
  for (const size_t snapshot_every : {size_t{1000}, size_t{50}}) {
    uint64_t whole = 0;
    Segment s;
    s.rows = ManyVersions(snapshot_every, whole);
    s.header = SegmentHeader{"doc", 0, 1, 1000, 1000};
    const auto t0 = std::chrono::steady_clock::now();
    const std::string file = Encoded(s);
    const auto t1 = std::chrono::steady_clock::now();
    const Segment got = Decoded(file);
    const auto t2 = std::chrono::steady_clock::now();
    ASSERT_EQ(got.rows.size(), 1000u);
    for (size_t i = 0; i < got.rows.size(); ++i) ASSERT_EQ(got.rows[i].state, s.rows[i].state) << i;
    const double ratio = static_cast<double>(file.size()) / static_cast<double>(whole);
    std::printf("1000 versions, a whole state every %zu in the hot table: %zu bytes of %llu in whole states "
                "(%.3f%%); encode %.0f ms, decode %.0f ms\n",
                snapshot_every, file.size(), static_cast<unsigned long long>(whole), 100 * ratio,
                std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::milli>(t2 - t1).count());
    EXPECT_LT(ratio, 0.005);
  }
}

// Many entities whose whole states lie megabytes apart in the body (the
// hot table stored no deltas): what long-distance matching gains.
TEST(Segment, LongDistanceMatchingFindsWholeStatesMegabytesApart) {
  std::mt19937_64 rng(7);
  constexpr int kEntities = 200;
  constexpr int kVersions = 8;
  std::vector<Json> states(kEntities);
  for (Json& st : states) {
    st = Json::object();
    for (int k = 0; k < 200; ++k) st["m" + std::to_string(k)] = RandomHex(rng, 80);
  }
  Segment s;
  uint64_t whole = 0;
  for (int v = 1; v <= kVersions; ++v) {
    for (int e = 0; e < kEntities; ++e) {
      states[e]["m" + std::to_string(rng() % 200)] = RandomHex(rng, 80);
      EventRow r;
      r.event_id = s.rows.size() + 1;
      r.entity_id = "e" + std::to_string(e);
      r.version = static_cast<uint64_t>(v);
      r.command_id = "c";
      r.command_name = "put";
      r.request = "{}";
      r.response = "{}";
      r.state = CanonicalJson(states[e]);
      whole += r.state.size();
      s.rows.push_back(std::move(r));
    }
  }
  s.header = SegmentHeader{"doc", 0, 1, s.rows.size(), s.rows.size()};
  size_t sizes[2] = {0, 0};
  for (const bool ldm : {false, true}) {
    SegmentEncodeOptions options;
    options.long_distance_matching = ldm;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string file = Encoded(s, options);
    const auto t1 = std::chrono::steady_clock::now();
    const Segment got = Decoded(file);
    const auto t2 = std::chrono::steady_clock::now();
    ASSERT_EQ(got.rows.size(), s.rows.size());
    EXPECT_EQ(got.rows.back().state, s.rows.back().state);
    sizes[ldm] = file.size();
    std::printf("%d entities x %d whole states, long-distance matching %s: %zu bytes of %llu (%.2f%%); "
                "encode %.0f ms, decode %.0f ms\n",
                kEntities, kVersions, ldm ? "on" : "off", file.size(), static_cast<unsigned long long>(whole),
                100.0 * static_cast<double>(file.size()) / static_cast<double>(whole),
                std::chrono::duration<double, std::milli>(t1 - t0).count(),
                std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  EXPECT_LT(sizes[1] * 3, sizes[0]);
}

// ---- damage ----

Segment Small() {
  std::mt19937_64 rng(3);
  const std::vector<EventRow> rows = RandomHistory(rng, 200);
  std::vector<EventRow> few;
  for (const EventRow& r : rows) {
    if (few.size() < 5 && r.entity_id == "alice") few.push_back(r);
  }
  for (EventRow& r : few) {
    r.command_id.resize(std::min<size_t>(r.command_id.size(), 4));
    r.command_name = "patch";
  }
  EXPECT_EQ(few.size(), 5u);
  Segment s;
  s.header = SegmentHeader{"account", 3, few.front().event_id, few.back().event_id, few.size()};
  s.rows = few;
  return s;
}

TEST(Segment, EverySingleByteCorruptionIsDetected) {
  const std::string file = Encoded(Small());
  ASSERT_TRUE(DecodeSegment(file).ok());
  std::printf("the small segment is %zu bytes\n", file.size());
  for (size_t pos = 0; pos < file.size(); ++pos) {
    for (int x = 1; x < 256; ++x) {
      std::string bad = file;
      bad[pos] = static_cast<char>(bad[pos] ^ x);
      const Result<Segment> got = DecodeSegment(bad);
      ASSERT_FALSE(got.ok()) << "byte " << pos << " xor " << x;
      if (pos >= 12) {
        ASSERT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
        ASSERT_NE(got.status().message().find("is damaged"), std::string::npos) << got.status().ToString();
      }
    }
  }
}

TEST(Segment, EveryTruncationAndAnyTrailingByteIsDetected) {
  const std::string file = Encoded(Small());
  for (size_t n = 0; n < file.size(); ++n) {
    ASSERT_FALSE(DecodeSegment(std::string_view(file).substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeSegment(file + '\0').ok());
  EXPECT_FALSE(DecodeSegment(file + file).ok());
}

TEST(Segment, DamageInsideACorrectlyChecksummedFileIsDetected) {
  const std::string file = Encoded(Small());
  const Parts good = TakeApart(file);
  ASSERT_TRUE(DecodeSegment(PutTogether(good)).ok());

  // A body that is not the one its checksum was taken of.
  Parts p = good;
  p.body[p.body.size() / 2] ^= 0x20;
  auto says = [](const std::string& bytes, const std::string& what) {
    const Result<Segment> got = DecodeSegment(bytes);
    EXPECT_FALSE(got.ok()) << what;
    EXPECT_NE(got.status().message().find(what), std::string::npos) << got.status().ToString();
  };
  says(PutTogether(p), "the body's checksum does not match");

  // Records that do not parse or do not fit, with both checksums right.
  p = good;
  p.body_sha.clear();
  p.body[0] = static_cast<char>(0x10);
  says(PutTogether(p), "unknown flags");
  p = good;
  p.body_sha.clear();
  p.body.push_back('\0');
  p.body_size = p.body.size();
  says(PutTogether(p), "goes on after");
  p = good;
  p.body_sha.clear();
  p.header.events += 1;
  says(PutTogether(p), "rows, not");
  p = good;
  p.body_sha.clear();
  p.header.first_event_id = good.header.first_event_id + 1;
  says(PutTogether(p), "outside the range");
  p = good;
  p.body_sha.clear();
  p.body_size = good.body_size + 1;
  says(PutTogether(p), "does not declare the body's size");
  p = good;
  p.body_sha.clear();
  p.header.entity_type = "Not A Type";
  says(PutTogether(p), "not a valid one");
  // A record that stores only a delta, with no row of its entity before it:
  // the second record of a two-row segment alone.
  const Json v1 = Json::parse(R"({"a":1})");
  const Json v2 = Json::parse(R"({"a":2})");
  EventRow create = PatchRow(1, 1, Json::object(), v1);
  create.delta.clear();
  Segment one;
  one.header = SegmentHeader{"account", 0, 1, 2, 1};
  one.rows = {create};
  Segment two = one;
  two.header.events = 2;
  two.rows.push_back(PatchRow(2, 2, v1, v2));
  p = TakeApart(Encoded(two));
  ASSERT_FALSE(Records(p.body)[1].has_state);
  p.body = p.body.substr(TakeApart(Encoded(one)).body.size());
  p.body_size = p.body.size();
  p.body_sha.clear();
  p.header.events = 1;
  says(PutTogether(p), "stores only a delta, but its entity's previous version is not before it");
  // A delta that does not apply to the state before it.
  p = TakeApart(Encoded(two));
  const size_t at = p.body.rfind(R"([["s",["a"],2]])");
  ASSERT_NE(at, std::string::npos);
  p.body[at + 3] = 'r';  // ["r",["a"],2]: a remove takes no value
  p.body_sha.clear();
  says(PutTogether(p), "its delta does not apply");

  // A declared body past the cap is refused before anything is allocated for it.
  p = good;
  p.body_sha.clear();
  std::string big = PutTogether(p);
  const std::string huge = LeBytes(uint64_t{2} << 30, 8);
  big.replace(40, 8, huge);
  big.replace(big.size() - 32, 32, Unhex(Sha256Hex(std::string_view(big).substr(0, big.size() - 32))));
  says(big, "more than the 1073741824");

  // A newer format.
  p = good;
  p.version = 2;
  const Result<Segment> newer = DecodeSegment(PutTogether(p));
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer sluice"), std::string::npos);
}

// ---- what EncodeSegment refuses ----

TEST(Segment, EncodeRefusesRowsItCannotKeep) {
  const Segment good = Small();
  ASSERT_TRUE(EncodeSegment(good).ok());
  auto refused = [](const Segment& s, const std::string& what, const SegmentEncodeOptions& o = {}) {
    const Result<std::string> got = EncodeSegment(s, o);
    ASSERT_FALSE(got.ok()) << what;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(what), std::string::npos) << got.status().ToString();
  };
  Segment s = good;
  std::swap(s.rows[1], s.rows[2]);
  refused(s, "strictly increasing");
  s = good;
  s.rows[2].event_id = s.rows[1].event_id;
  refused(s, "strictly increasing");
  s = good;
  s.header.first_event_id = good.rows[0].event_id + 1;
  refused(s, "outside the segment's range");
  s = good;
  s.header.last_event_id = good.rows.back().event_id - 1;
  refused(s, "outside the segment's range");
  s = good;
  s.rows[1].deleted = false;
  s.rows[1].state.clear();
  refused(s, "has no state");
  s = good;
  s.rows[1].deleted = true;
  s.rows[1].state = "{}";
  refused(s, "is a delete but has a state");
  s = good;
  s.header.events = 4;
  refused(s, "there are 5 rows");
  s = good;
  s.header.entity_type = "../x";
  refused(s, "not a type name");
  s = good;
  s.header.first_event_id = 10;
  s.header.last_event_id = 9;
  refused(s, "range is empty");
  s = good;
  s.rows[0].entity_id = std::string(65, 'x');
  refused(s, "longer than its column");
  s = good;
  s.rows[0].command_id = std::string(129, 'x');
  refused(s, "longer than its column");

  // The partition, when the caller says how many the type has.
  Segment p;
  p.header = SegmentHeader{"account", PartitionOf("alice", 8), 1, 2, 2};
  p.rows.resize(2);
  for (uint64_t i = 0; i < 2; ++i) {
    p.rows[i].event_id = i + 1;
    p.rows[i].version = 1;
    p.rows[i].state = "{}";
  }
  p.rows[0].entity_id = "alice";
  p.rows[1].entity_id = "alice";
  EXPECT_TRUE(EncodeSegment(p, {.partitions = 8}).ok());
  for (int n = 0; PartitionOf(p.rows[1].entity_id, 8) == p.header.partition; ++n) {
    p.rows[1].entity_id = "bob" + std::to_string(n);
  }
  refused(p, "belongs to partition", {.partitions = 8});
  EXPECT_TRUE(EncodeSegment(p).ok());  // no partition count: not checked
}

// ---- keys and checksums ----

TEST(SegmentKey, RoundTripsAndSortsInEventIdOrder) {
  EXPECT_EQ(SegmentKey("account", 3, 1, 1000), "segments/account/p003/00000000000000000001-00000000000000001000.seg");
  EXPECT_EQ(SegmentKey("order_line", 1234, 18446744073709551615u, 18446744073709551615u),
            "segments/order_line/p1234/18446744073709551615-18446744073709551615.seg");
  const SegmentHeader cases[] = {{"account", 0, 0, 0, 0},
                                 {"a", 7, 1, 1000, 0},
                                 {"order_line2", 999, 5, 18446744073709551615u, 0},
                                 {"x", 4294967295u, 18446744073709551615u, 18446744073709551615u, 0}};
  for (const SegmentHeader& h : cases) {
    const std::string key = SegmentKey(h.entity_type, h.partition, h.first_event_id, h.last_event_id);
    const std::optional<SegmentHeader> got = ParseSegmentKey(key);
    ASSERT_TRUE(got.has_value()) << key;
    EXPECT_EQ(*got, h) << key;
  }
  EXPECT_LT(SegmentKey("a", 1, 9, 99), SegmentKey("a", 1, 100, 200));
}

TEST(SegmentKey, RejectsAnythingElse) {
  const std::string good = "segments/account/p003/00000000000000000001-00000000000000001000.seg";
  ASSERT_TRUE(ParseSegmentKey(good).has_value());
  const std::string junk[] = {
      "",
      "segments/",
      "segments/account/p003/",
      good + ".tmp",
      good.substr(0, good.size() - 1),
      "/" + good,
      "archive/account/p003/00000000000000000001-00000000000000001000.seg",
      "segments/Account/p003/00000000000000000001-00000000000000001000.seg",
      "segments/acc/ount/p003/00000000000000000001-00000000000000001000.seg",
      "segments//p003/00000000000000000001-00000000000000001000.seg",
      "segments/account/p03/00000000000000000001-00000000000000001000.seg",
      "segments/account/p0003/00000000000000000001-00000000000000001000.seg",
      "segments/account/q003/00000000000000000001-00000000000000001000.seg",
      "segments/account/p-03/00000000000000000001-00000000000000001000.seg",
      "segments/account/p4294967296/00000000000000000001-00000000000000001000.seg",
      "segments/account/p003/0000000000000000001-00000000000000001000.seg",
      "segments/account/p003/00000000000000000001_00000000000000001000.seg",
      "segments/account/p003/0000000000000000000a-00000000000000001000.seg",
      "segments/account/p003/00000000000000001000-00000000000000000001.seg",
      "segments/account/p003/18446744073709551616-18446744073709551616.seg",
      "segments/account/p003/00000000000000000001-00000000000000001000.SEG",
      "segments/account/p003/x/00000000000000000001-00000000000000001000.seg",
  };
  for (const std::string& key : junk) EXPECT_FALSE(ParseSegmentKey(key).has_value()) << key;
}

TEST(Sha256Hex, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace sluice::archive
