#include "writer/route_keeper.h"

#include <algorithm>
#include <set>

#include "core/assignment.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::writer {

RouteKeeper::RouteKeeper(Options options)
    : options_(std::move(options)), leases_(options_.storage->OpenLeases()) {}

RouteKeeper::~RouteKeeper() { Stop(); }

void RouteKeeper::Start(std::string url) {
  url_ = std::move(url);
  if (Status st = Round(); !st.ok()) {
    LogRateLimited(LogLevel::kWarn, "writer.routes", "writer: lease round failed: " + st.message());
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = StartNamedThread("sluice-routes", [this] { Loop(); });
}

void RouteKeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RouteKeeper::Leave() {
  if (!claimed_) return;
  for (auto& [type, held] : held_) {
    if (Status st = leases_->Release(kWriterScope, type, held, options_.member); !st.ok()) {
      Log(LogLevel::kWarn, "writer: releasing its leases failed (they expire by themselves): " + st.message());
    }
    held.clear();
  }
  (void)leases_->Leave(kWriterGroup, options_.member);
  Publish(nullptr);
}

void RouteKeeper::Loop() {
  const auto every = std::max(options_.ttl / 4, std::chrono::milliseconds(1));
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, every, [this] { return stopping_; });
      if (stopping_) return;
    }
    if (Status st = Round(); !st.ok()) {
      LogRateLimited(LogLevel::kWarn, "writer.routes", "writer: lease round failed: " + st.message());
      std::shared_ptr<const Table> table;
      {
        std::lock_guard lock(mu_);
        table = table_;
      }
      // Too old to trust: every command is handled where it arrives.
      if (table && std::chrono::steady_clock::now() - table->made > options_.ttl) Publish(nullptr);
    }
  }
}

Status RouteKeeper::Round() {
  const auto began = std::chrono::steady_clock::now();
  if (!claimed_) {
    ASSIGN_OR_RETURN(claimed_, leases_->Claim(kWriterGroup, options_.member));
    if (!claimed_) {
      LogRateLimited(LogLevel::kWarn, "writer.routes.claim",
                     "writer: another writer process runs under the name '" + options_.member +
                         "' (writer.id): this one takes no partition and forwards nothing until it stops; "
                         "give each writer its own writer.id");
      Publish(nullptr);
      return Status::Ok();
    }
  }
  RETURN_IF_ERROR(leases_->Heartbeat(kWriterGroup, options_.member, url_));
  ASSIGN_OR_RETURN(auto members, leases_->Members(kWriterGroup, options_.ttl));
  std::vector<std::string> names;
  std::map<std::string, std::string> url_of;
  for (const sql::MemberRow& m : members) {
    names.push_back(m.member);
    url_of[m.member] = m.address;
  }
  if (std::find(names.begin(), names.end(), options_.member) == names.end()) names.push_back(options_.member);
  for (const auto& [type, partitions] : options_.types) {
    std::vector<uint32_t> want;
    for (const auto& [p, member] : Assign(kWriterScope, type, partitions, names)) {
      if (member == options_.member) want.push_back(p);
    }
    std::map<uint32_t, uint64_t>& held = held_[type];
    const Status renewed = [&]() -> Status {
      // Held but no longer ours to take (a writer joined): given up at once.
      std::map<uint32_t, uint64_t> extra;
      for (const auto& [p, token] : held) {
        if (!std::binary_search(want.begin(), want.end(), p)) extra[p] = token;
      }
      if (!extra.empty()) {
        RETURN_IF_ERROR(leases_->Release(kWriterScope, type, extra, options_.member));
        for (const auto& [p, token] : extra) held.erase(p);
      }
      ASSIGN_OR_RETURN(held, leases_->Acquire(kWriterScope, type, want, options_.member, options_.ttl, held));
      return Status::Ok();
    }();
    if (!renewed.ok()) {
      // A storage server of the type's partitions did not answer: the other
      // types' leases go on (routing is a hint; its commands are handled
      // wherever they arrive meanwhile).
      LogRateLimited(LogLevel::kWarn, "writer.routes." + type,
                     "writer: the routing leases of " + type + " were not renewed: " + renewed.message());
    }
  }
  ASSIGN_OR_RETURN(auto rows, leases_->List(kWriterScope));
  auto table = std::make_shared<Table>();
  table->made = began;
  for (const auto& [type, partitions] : options_.types) table->url[type].assign(partitions, "");
  for (const sql::LeaseRow& row : rows) {
    auto it = table->url.find(row.entity_type);
    if (it == table->url.end() || row.partition >= it->second.size()) continue;
    if (row.owner.empty() || row.owner == options_.member || row.expires_in_ms <= 0) continue;
    if (const auto u = url_of.find(row.owner); u != url_of.end()) it->second[row.partition] = u->second;
  }
  Publish(std::move(table));
  return Status::Ok();
}

void RouteKeeper::Publish(std::shared_ptr<const Table> table) {
  std::map<std::string, std::vector<uint32_t>> held;
  for (const auto& [type, h] : held_) {
    for (const auto& [p, token] : h) held[type].push_back(p);
  }
  std::lock_guard lock(mu_);
  table_ = std::move(table);
  held_copy_ = std::move(held);
}

std::string RouteKeeper::OwnerUrl(const std::string& type, uint32_t partition) const {
  std::shared_ptr<const Table> table;
  {
    std::lock_guard lock(mu_);
    table = table_;
  }
  if (!table) return "";
  const auto it = table->url.find(type);
  if (it == table->url.end() || partition >= it->second.size()) return "";
  return it->second[partition];
}

std::map<std::string, std::vector<uint32_t>> RouteKeeper::Held() const {
  std::lock_guard lock(mu_);
  return held_copy_;
}

}  // namespace sluice::writer
