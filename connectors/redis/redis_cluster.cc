#include "connectors/redis/redis_cluster.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <string>
#include <utility>

namespace sluice::connectors::redis {
namespace {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis
// Cluster's key slots use it.
uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (unsigned char byte : s) {
    crc ^= static_cast<uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : crc << 1;
  }
  return crc;
}

// The part of `key` that is hashed: its hash tag, or all of it.
std::string_view HashedPart(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

// For each slot, a short tag whose hash is that slot (found once, by
// trying 1- to 3-character strings of [0-9A-Za-z] in order).
const std::array<std::string, kClusterSlots>& TagPerSlot() {
  static const std::array<std::string, kClusterSlots> tags = [] {
    static constexpr std::string_view kChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::array<std::string, kClusterSlots> t;
    size_t found = 0;
    std::string s;
    const auto consider = [&](const std::string& tag) {
      std::string& slot = t[Crc16(tag) % kClusterSlots];
      if (slot.empty()) {
        slot = tag;
        ++found;
      }
    };
    for (char a : kChars) consider(std::string(1, a));
    for (char a : kChars) {
      for (char b : kChars) consider(std::string{a, b});
    }
    for (char a : kChars) {
      for (char b : kChars) {
        for (char c : kChars) consider(std::string{a, b, c});
      }
    }
    for (size_t slot = 0; found < kClusterSlots && slot < kClusterSlots; ++slot) {
      // Not reached with these 242,234 candidates; kept so that no slot is ever empty.
      for (uint32_t n = 0; t[slot].empty(); ++n) {
        std::string tag = "x" + std::to_string(n);
        if (Crc16(tag) % kClusterSlots == slot) {
          t[slot] = tag;
          ++found;
        }
      }
    }
    return t;
  }();
  return tags;
}

template <typename T>
bool ParseDecimal(std::string_view s, T* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

std::string Name(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string_view Text(const redisReply& r) { return {r.str, r.len}; }

}  // namespace

uint16_t KeySlot(std::string_view key) { return Crc16(HashedPart(key)) % kClusterSlots; }

bool HasHashTag(std::string_view key) { return HashedPart(key).size() != key.size(); }

std::string SameSlotKey(std::string_view key, std::string_view suffix) {
  std::string out;
  if (HasHashTag(key)) {
    out.reserve(key.size() + suffix.size());
    out.append(key);
  } else if (key.find('}') == std::string_view::npos) {
    out.reserve(key.size() + suffix.size() + 2);
    out.append("{").append(key).append("}");
  } else {
    const std::string& tag = TagPerSlot()[KeySlot(key)];
    out.append("{").append(tag).append("}").append(key);
  }
  out.append(suffix);
  return out;
}

std::optional<Redirect> ParseRedirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  const size_t colon = error.rfind(':');
  if (space == std::string_view::npos || colon == std::string_view::npos || colon < space) return std::nullopt;
  if (!ParseDecimal(error.substr(0, space), &r.slot) || r.slot >= kClusterSlots) return std::nullopt;
  if (!ParseDecimal(error.substr(colon + 1), &r.port) || r.port == 0) return std::nullopt;
  std::string_view host = error.substr(space + 1, colon - space - 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return std::nullopt;
  r.host = std::string(host);
  return r;
}

bool IsNonLocalKeyError(std::string_view error) {
  return error.find("non local key") != std::string_view::npos ||
         error.find("do not hash to the same slot") != std::string_view::npos;
}

RedisCluster::RedisCluster(std::vector<std::pair<std::string, uint16_t>> seeds, Opener open)
    : seeds_(std::move(seeds)), open_(std::move(open)) {}

size_t RedisCluster::NodeIndex(const std::string& host, uint16_t port) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].host == host && nodes_[i].port == port) return i;
  }
  nodes_.push_back(Node{host, port, nullptr});
  return nodes_.size() - 1;
}

Result<RedisConnection*> RedisCluster::Connected(size_t node) {
  Node& n = nodes_[node];
  if (!n.conn) {
    Result<std::unique_ptr<RedisConnection>> c = open_(n.host, n.port);
    if (!c.ok()) return c.status().WithContext("cluster node " + Name(n.host, n.port));
    n.conn = std::move(c).value();
  }
  return n.conn.get();
}

// CLUSTER SLOTS: [[start, end, [host, port, id...], replica...]...]. An
// empty host means the node that was asked.
Status RedisCluster::AskSlots(RedisConnection& c, const std::string& asked_host) {
  const char* argv[] = {"CLUSTER", "SLOTS"};
  const size_t lens[] = {7, 5};
  ASSIGN_OR_RETURN(ReplyPtr reply, c.Command(2, argv, lens));
  const redisReply& r = *reply;
  if (r.type == REDIS_REPLY_ERROR) return Unavailable("CLUSTER SLOTS: " + std::string(Text(r)));
  if (r.type != REDIS_REPLY_ARRAY) return Unavailable("CLUSTER SLOTS: unexpected reply");
  std::array<bool, kClusterSlots> covered{};
  std::array<uint16_t, kClusterSlots> map{};
  std::vector<size_t> masters;
  for (size_t i = 0; i < r.elements; ++i) {
    const redisReply& range = *r.element[i];
    if (range.type != REDIS_REPLY_ARRAY || range.elements < 3 || range.element[0]->type != REDIS_REPLY_INTEGER ||
        range.element[1]->type != REDIS_REPLY_INTEGER || range.element[2]->type != REDIS_REPLY_ARRAY ||
        range.element[2]->elements < 2 || range.element[2]->element[0]->type != REDIS_REPLY_STRING ||
        range.element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      return Unavailable("CLUSTER SLOTS: unexpected reply");
    }
    const long long start = range.element[0]->integer;
    const long long end = range.element[1]->integer;
    const redisReply& master = *range.element[2];
    const long long port = master.element[1]->integer;
    if (start < 0 || end >= kClusterSlots || start > end || port <= 0 || port > 65535) {
      return Unavailable("CLUSTER SLOTS: a slot range or port out of bounds");
    }
    std::string host(Text(*master.element[0]));
    if (host.empty() || host == "?") host = asked_host;
    const size_t node = NodeIndex(host, static_cast<uint16_t>(port));
    bool listed = false;
    for (size_t m : masters) listed = listed || m == node;
    if (!listed) masters.push_back(node);
    for (long long s = start; s <= end; ++s) {
      covered[s] = true;
      map[s] = static_cast<uint16_t>(node);
    }
  }
  for (size_t s = 0; s < kClusterSlots; ++s) {
    if (!covered[s]) return Unavailable("slot " + std::to_string(s) + " has no master (the cluster is down)");
  }
  // Connections to nodes that are no longer masters (demoted by a failover) are dropped.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    bool master = false;
    for (size_t m : masters) master = master || m == i;
    if (!master) nodes_[i].conn.reset();
  }
  slot_node_ = map;
  masters_ = std::move(masters);
  return Status::Ok();
}

Status RedisCluster::Refresh() {
  std::string tried;
  std::vector<std::pair<std::string, uint16_t>> ask;
  for (size_t m : masters_) ask.emplace_back(nodes_[m].host, nodes_[m].port);
  for (const auto& seed : seeds_) ask.push_back(seed);
  for (const auto& [host, port] : ask) {
    const size_t node = NodeIndex(host, port);
    Result<RedisConnection*> c = Connected(node);
    if (!c.ok()) {
      tried += "; " + c.status().message();
      continue;
    }
    Status asked = AskSlots(**c, host);
    if (asked.ok()) return asked;
    nodes_[node].conn.reset();
    tried += "; cluster node " + Name(host, port) + ": " + asked.message();
  }
  masters_.clear();
  return Unavailable("no node of the cluster gave its slots" + tried);
}

Result<RedisConnection*> RedisCluster::ForSlot(uint16_t slot) {
  if (!has_map()) RETURN_IF_ERROR(Refresh());
  return Connected(slot_node_[slot]);
}

Result<RedisConnection*> RedisCluster::At(const std::string& host, uint16_t port) {
  return Connected(NodeIndex(host, port));
}

Result<std::vector<RedisConnection*>> RedisCluster::Masters(std::vector<std::string>* names) {
  if (!has_map()) RETURN_IF_ERROR(Refresh());
  std::vector<RedisConnection*> out;
  for (size_t m : masters_) {
    ASSIGN_OR_RETURN(RedisConnection * c, Connected(m));
    out.push_back(c);
    if (names) names->push_back(Name(nodes_[m].host, nodes_[m].port));
  }
  return out;
}

Result<std::vector<std::pair<std::string, uint16_t>>> RedisCluster::MasterAddresses() {
  if (!has_map()) RETURN_IF_ERROR(Refresh());
  std::vector<std::pair<std::string, uint16_t>> out;
  for (size_t m : masters_) out.emplace_back(nodes_[m].host, nodes_[m].port);
  return out;
}

std::string RedisCluster::NameOf(const RedisConnection* c) const {
  for (const Node& n : nodes_) {
    if (n.conn.get() == c) return Name(n.host, n.port);
  }
  return "?";
}

void RedisCluster::DropConnections() {
  for (Node& n : nodes_) n.conn.reset();
  masters_.clear();
}

}  // namespace sluice::connectors::redis
