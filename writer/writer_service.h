// WriterService: the writer half of sluice. It serves the HTTP API of
// DESIGN 3.4, validates every request before anything is queued, routes each
// command to the PartitionWorker of its (type, partition), and serves reads
// from main storage through a ReaderPool.
//
// Several writers (writer.routing, the default): a RouteKeeper holds leases
// on the partitions this writer should batch, and a valid command for a
// partition another live writer owns is forwarded to it once (marked with
// the Sluice-Forwarded-By header, which the owner never forwards again) with
// its Idempotency-Key (the one generated here when the client gave none),
// and the owner's answer is relayed. If the owner cannot be reached the
// command is handled here: a command the owner did commit is then answered
// from storage by its Idempotency-Key, never applied twice. Every command
// reply carries Sluice-Writer: the writer that handled it.
//
// Lifecycle: construct with a validated Config, Start(), later Stop() (which
// finishes queued commands before closing connections). Start/Stop from one
// thread; requests are handled on the HTTP event-loop threads.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "sql/tables.h"
#include "writer/api.h"
#include "http/forwarder.h"
#include "http/server.h"
#include "writer/partition_worker.h"
#include "writer/reader_pool.h"
#include "writer/notice_sender.h"
#include "writer/route_keeper.h"

namespace sluice::writer {

class WriterService {
 public:
  // on_commit: see PartitionWorkerOptions::on_commit.
  // registry: where the writer's metrics go; null: a registry nobody
  // scrapes. It must outlive the service.
  explicit WriterService(config::Config config, CommitHook on_commit = nullptr,
                         metrics::Registry* registry = nullptr);
  ~WriterService();  // calls Stop()
  // The notice address of the engine in this process (which on_commit
  // reaches directly): no datagram goes there.
  void SkipNoticeAddress(std::string address) {
    if (notices_) notices_->Skip(std::move(address));
  }
  WriterService(const WriterService&) = delete;
  WriterService& operator=(const WriterService&) = delete;

  // What GET /readyz answers (called on an HTTP thread: must be cheap).
  // Without one, /readyz answers 503. Call before Start().
  void SetReadiness(metrics::ReadinessFn readiness) { readiness_ = std::move(readiness); }
  // The writer's metric handles, e.g. ForPush(sink) for the push path.
  metrics::WriterMetrics& metrics() { return metrics_; }
  Status Start();
  void Stop();
  // The HTTP port actually bound (useful with listen port 0).
  uint16_t port() const;

 private:
  struct TypeState {
    uint32_t partitions = 0;
    // Per push sink of the type, push_threads pushers (at most one per
    // partition) shared by the workers: partition p pushes through p mod n.
    std::vector<std::unique_ptr<Pusher>> pushers;
    std::vector<std::unique_ptr<PartitionWorker>> workers;
    metrics::WriterTypeMetrics* metrics = nullptr;
    std::array<metrics::CommandMetrics*, 4> builtin_metrics{};  // create, put, patch, delete
    std::shared_ptr<const handlers::HandlerScript> handlers;  // null: built-in commands only
  };

  void Handle(http::Request&& req, http::Responder respond);
  void HandleCommand(Route& route, http::Request& req, http::Responder respond);
  // Queues a valid command on its partition's worker; its reply goes to `respond`.
  void Submit(Command cmd, const TypeState& type, uint32_t partition, metrics::CommandMetrics& command_metrics,
              std::chrono::steady_clock::time_point received, http::Responder respond);
  // Sends the command to the writer at `owner_url`; Submit()s it here when that fails.
  void Forward(const std::string& owner_url, http::Request& req, Command cmd, const TypeState& type,
               uint32_t partition, metrics::CommandMetrics& command_metrics,
               std::chrono::steady_clock::time_point received, http::Responder respond);
  void HandleGetEntity(const Route& route, http::Responder respond);
  void HandleGetEvents(const Route& route, http::Responder respond);
  void HandleReady(const http::Responder& respond) const;
  // The handles of one command of `type`, resolved once for built-in commands.
  metrics::CommandMetrics& CommandMetricsOf(const TypeState& type, const std::string& type_name,
                                            const std::string& command);
  // 404 unless the type is configured and the id valid; the type's state.
  const TypeState* CheckEntity(const Route& route, const http::Responder& respond) const;

  const config::Config config_;
  metrics::WriterMetrics metrics_;
  metrics::HttpListenerMetrics http_metrics_;  // the API listener's connections
  metrics::ReadinessFn readiness_;
  // Main storage's event tables, shared by the partition workers and the readers.
  std::shared_ptr<sql::Storage> storage_;
  // The threads and sessions that run every partition's batches (declared
  // before types_: the workers leave it when they are destroyed).
  std::unique_ptr<BatchThreads> batch_threads_;
  std::map<std::string, TypeState> types_;
  std::unique_ptr<ReaderPool> readers_;
  std::unique_ptr<NoticeSender> notices_;  // engine.notices: announces commits to the engines
  std::unique_ptr<http::Server> http_;
  // writer.routing: which writer owns each partition, and the client that forwards to it.
  std::string member_;  // writer.id or the host name
  std::unique_ptr<RouteKeeper> routes_;
  std::unique_ptr<http::Forwarder> forwarder_;
  bool started_ = false;
  Status handlers_status_;  // why the handler files did not load; Start() returns it
  Status archive_status_;   // why the archive's store could not be opened; Start() returns it
};

}  // namespace sluice::writer
