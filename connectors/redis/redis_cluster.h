// Redis Cluster for the redis sink: which of the cluster's masters holds a
// key, and a connection to each of them.
//
// A cluster splits the key space into 16,384 hash slots (CRC16 of the key,
// or of its {hash tag}, modulo 16,384), each served by one master. The map
// from slot to master is learnt from CLUSTER SLOTS, asked of any node the
// sink knows, and learnt again whenever a node answers MOVED (the slot has a
// new owner) or a connection to a master fails (a failover). ASK (a slot
// being migrated) sends one command to the target with ASKING before it.
//
// Following the Redis Cluster specification ("Keys distribution model",
// "Redirection and resharding"); the same rules every cluster client keeps.
//
// Threads: one thread at a time (the sink's).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/redis/redis_connection.h"
#include "core/status.h"

namespace sluice::connectors::redis {

inline constexpr uint16_t kClusterSlots = 16384;

// The hash slot of `key`: CRC16 (XMODEM) of the key, or of the text between
// its first '{' and the first '}' after it when that text is not empty.
uint16_t KeySlot(std::string_view key);

// Whether `key` has a hash tag (KeySlot hashes only a part of it).
bool HasHashTag(std::string_view key);

// A key in the same slot as `key`, for keys that must live beside it (the
// sink's tombstones): `key` + suffix when key has a hash tag (the tag still
// decides), "{" + key + "}" + suffix when the whole of key is hashed and
// holds no '}'; otherwise "{T}" + key + suffix for a short T of the same slot.
std::string SameSlotKey(std::string_view key, std::string_view suffix);

// A redirection in an error reply: "MOVED 3999 127.0.0.1:6381" or "ASK ...".
struct Redirect {
  bool ask = false;  // ASK: this command only; MOVED: the slot moved for good
  uint16_t slot = 0;
  std::string host;
  uint16_t port = 0;
};
std::optional<Redirect> ParseRedirect(std::string_view error);
// Whether a script's error says a key it touched is on another node.
bool IsNonLocalKeyError(std::string_view error);

class RedisCluster {
 public:
  // Opens a ready connection to one node (connected, authenticated, the
  // sink's script loaded) or says why not.
  using Opener = std::function<Result<std::unique_ptr<RedisConnection>>(const std::string& host, uint16_t port)>;

  RedisCluster(std::vector<std::pair<std::string, uint16_t>> seeds, Opener open);

  // Learns the slot map: asks the masters it knows, then the seeds, for
  // CLUSTER SLOTS. Unavailable (naming every node it tried and why) when
  // none answers, or when a slot has no master (the cluster is down).
  Status Refresh();
  bool has_map() const { return !masters_.empty(); }

  // The master serving `slot` (0 to kClusterSlots - 1), connected.
  Result<RedisConnection*> ForSlot(uint16_t slot);
  // A node by address (an ASK target), connected.
  Result<RedisConnection*> At(const std::string& host, uint16_t port);
  // Every master of the map, connected; their "host:port" in *names.
  Result<std::vector<RedisConnection*>> Masters(std::vector<std::string>* names = nullptr);
  // The address of every master of the map (learning it first if need be).
  Result<std::vector<std::pair<std::string, uint16_t>>> MasterAddresses();
  // "host:port" of the node behind a connection this class made.
  std::string NameOf(const RedisConnection* c) const;

  // Forgets every connection (one failed: its pipeline is unusable, and the
  // map may be stale too). The next call connects again.
  void DropConnections();

 private:
  struct Node {
    std::string host;
    uint16_t port = 0;
    std::unique_ptr<RedisConnection> conn;  // null until used
  };
  Result<RedisConnection*> Connected(size_t node);
  size_t NodeIndex(const std::string& host, uint16_t port);
  Status AskSlots(RedisConnection& c, const std::string& asked_host);

  std::vector<std::pair<std::string, uint16_t>> seeds_;
  Opener open_;
  std::vector<Node> nodes_;             // every node ever named; connections of the current masters
  std::vector<size_t> masters_;         // indexes into nodes_ of the map's masters
  std::array<uint16_t, kClusterSlots> slot_node_{};  // slot -> index into nodes_
};

}  // namespace sluice::connectors::redis
