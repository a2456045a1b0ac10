// NoticeListener: the engine's UDP socket for the writers' commit notices
// (core/commit_notice.h). Each datagram that decodes goes to `on_notice`
// (SyncEngine: HeadWatcher::Announce); anything else is dropped and counted
// in the log, rate-limited. A notice only makes the engine read a partition
// sooner, so a forged one costs a read at most.
//
// The address writers send to is published with the engine's heartbeat in
// sluice_members (group "engine", engine/lease_keeper.h): `advertise`, or
// the bound address.
//
// Threads: one, `sluice-notices`, blocked in poll() on the socket.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "core/commit_notice.h"
#include "core/status.h"

namespace sluice::engine {

class NoticeListener {
 public:
  using OnNotice = std::function<void(const CommitNotice&)>;
  NoticeListener(std::string host, uint16_t port, OnNotice on_notice);
  ~NoticeListener();  // calls Stop()

  // Binds the socket (port 0: any free one) and starts the thread.
  Status Start();
  void Stop();
  // "udp:HOST:PORT" of the bound socket ("udp:[v6]:PORT" for IPv6).
  std::string address() const;

 private:
  void Run();

  const std::string host_;
  uint16_t port_;
  const OnNotice on_notice_;
  int fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace sluice::engine
