// NoticeSender: tells the sync engines of this database about each commit
// of this writer (core/commit_notice.h), so that they read the partition at
// once instead of finding the commit at their next look (engine/head_watcher.h).
//
// The engines are the live members of group "engine" in sluice_members
// whose address is "udp:HOST:PORT" (each engine publishes where its
// NoticeListener listens), read again every `refresh`. Announce() only
// queues; the thread packs everything queued since its last send into
// datagrams and sends each to every engine. Nothing waits for an answer: a
// lost notice costs latency (the engine's fallback look finds the commit),
// never an event.
//
// Threads: one, `sluice-announce`, with its own session (the members
// table). Announce() from any thread (partition workers after a commit).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sql/tables.h"

namespace sluice::writer {

class NoticeSender {
 public:
  struct Options {
    std::shared_ptr<sql::Storage> storage;
    std::chrono::milliseconds refresh{2000};       // how often the engines' addresses are read again
    std::chrono::milliseconds member_ttl{10'000};  // an engine silent for longer is left out (engine.lease_ttl)
  };
  explicit NoticeSender(Options options);
  ~NoticeSender();  // calls Stop()

  void Start();
  void Stop();
  // (type, partition) committed up to `head`: queued for the next send.
  void Announce(const std::string& type, uint32_t partition, uint64_t head);
  // Sends nothing to the engine at `address` (the engine of this process,
  // which the writer announces its commits to directly).
  void Skip(std::string address);

 private:
  struct Engine;
  void Run();
  void Refresh(sql::LeaseTable& members);
  void Send(const std::vector<std::string>& datagrams);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::pair<std::string, uint32_t>, uint64_t> pending_;  // (type, partition) -> head
  std::string skip_;  // Skip()
  // Sender thread.
  std::vector<Engine> engines_;
  int fd4_ = -1, fd6_ = -1;
  std::thread thread_;
};

}  // namespace sluice::writer
