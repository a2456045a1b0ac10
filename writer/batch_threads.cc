#include "writer/batch_threads.h"

#include <algorithm>
#include <atomic>

#include "core/failpoint.h"
#include "core/thread_name.h"

namespace sluice::writer {

BatchThreads::BatchThreads(Options options) : options_(std::move(options)) {
  const size_t n = std::max<size_t>(options_.threads, 1);
  for (size_t i = 0; i < n; ++i) slots_.push_back(std::make_unique<Slot>());
}

BatchThreads::~BatchThreads() { Stop(); }

void BatchThreads::Add(size_t key, Client* client) {
  Slot& s = SlotOf(key);
  std::lock_guard lock(s.mu);
  s.clients.push_back(client);
}

void BatchThreads::Remove(size_t key, Client* client) {
  Slot& s = SlotOf(key);
  std::lock_guard lock(s.mu);
  s.clients.erase(std::remove(s.clients.begin(), s.clients.end(), client), s.clients.end());
  s.line.erase(std::remove(s.line.begin(), s.line.end(), client), s.line.end());
}

void BatchThreads::Ready(size_t key, Client* client) {
  Slot& s = SlotOf(key);
  std::thread ended;
  {
    std::lock_guard lock(s.mu);
    s.line.push_back(client);
    if (s.running) {
      s.cv.notify_one();
      return;
    }
    // The thread that ended idle said so under the lock and takes it no
    // more; it may still be closing its sessions, joined below (Stop()
    // waits for that join too).
    ended = std::move(s.thread);
    if (ended.joinable()) ++s.joining;
    s.running = true;
    s.thread = StartNamedThread("sluice-commit", [this, &s] { Loop(s); });
  }
  if (!ended.joinable()) return;
  ended.join();
  {
    std::lock_guard lock(s.mu);
    --s.joining;
  }
  s.joined.notify_all();
}

uint64_t BatchThreads::NewSessions() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool BatchThreads::AfterBatch(size_t key) {
  Slot& s = SlotOf(key);
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<void>> dropped;  // destroyed after the lock
  std::lock_guard lock(s.mu);
  // The client being served is handed out: the sweep leaves it alone.
  if (now - s.last_sweep >= options_.idle_exit) SweepLocked(s, now, dropped);
  return !s.line.empty();
}

void BatchThreads::Loop(Slot& slot) {
  auto lane = std::make_unique<Lane>();
  lane->log = options_.storage->OpenEventLog();
  if (options_.overlap_commits) {
    lane->spare = options_.storage->OpenEventLog();
    lane->stage = std::make_unique<CommitStage>();
  }
  std::vector<std::shared_ptr<void>> dropped;  // caches the sweeps dropped
  {
    std::unique_lock lock(slot.mu);
    for (;;) {
      if (slot.line.empty()) {
        const bool work = slot.cv.wait_for(lock, options_.idle_exit,
                                           [&slot] { return slot.stopping || !slot.line.empty(); });
        if (!work) {
          // Nothing served for idle_exit: the workers drop their caches
          // now, not at a sweep that may not come.
          SweepLocked(slot, std::chrono::steady_clock::now(), dropped);
          break;
        }
        if (slot.line.empty()) break;  // stopping
        continue;
      }
      if (grouping()) {
        std::vector<Client*> turn;
        while (!slot.line.empty() && turn.size() < options_.group_commit_max) {
          turn.push_back(slot.line.front());
          slot.line.pop_front();
        }
        lock.unlock();
        GroupTurn(turn, *lane);
        std::vector<Client*> more;
        for (Client* c : turn) {
          if (c->EndTurn()) more.push_back(c);
        }
        lock.lock();
        for (Client* c : more) slot.line.push_back(c);
      } else {
        Client* client = slot.line.front();
        slot.line.pop_front();
        lock.unlock();
        const bool more = client->Serve(*lane);
        lock.lock();
        if (more) slot.line.push_back(client);
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - slot.last_sweep >= options_.idle_exit) {
        SweepLocked(slot, now, dropped);
        lock.unlock();
        dropped.clear();
        lock.lock();
      }
    }
    slot.running = false;
  }
  // Its sessions close, then the dropped caches go (a Ready() meanwhile
  // starts another thread, with sessions of its own, and joins this one).
  lane.reset();
  dropped.clear();
}

void BatchThreads::GroupTurn(const std::vector<Client*>& clients, Lane& lane) {
  // The kept appends by server, servers in the order they first came.
  std::vector<std::vector<std::pair<Client*, sql::EventAppend*>>> by_server;
  for (Client* c : clients) {
    sql::EventAppend* append = c->PlanBatch(lane);
    if (append == nullptr) continue;
    auto it = std::find_if(by_server.begin(), by_server.end(),
                           [&](const auto& g) { return g.front().second->server() == append->server(); });
    if (it == by_server.end()) it = by_server.emplace(by_server.end());
    it->emplace_back(c, append);
  }
  for (auto& group : by_server) {
    if (group.size() == 1) {
      group.front().first->Resume(lane, Client::Stored::kAlone, Status::Ok());
      continue;
    }
    Client::Stored stored = Client::Stored::kCommitted;
    Status st = Status::Ok();
    if (SLUICE_FAILPOINT("writer.before_commit")) {
      st = Unavailable("failpoint writer.before_commit");
      stored = Client::Stored::kUnknown;
    } else {
      for (auto& [client, append] : group) {
        // A failed Stage leaves nothing staged: the transaction is gone.
        st = lane.log->Stage(*append);
        if (!st.ok()) break;
      }
      if (!st.ok()) {
        stored = Client::Stored::kNotStored;
      } else if (st = lane.log->Commit(); !st.ok()) {
        // Refused at COMMIT (a deadlock, Galera's certification): rolled
        // back. Otherwise (the session lost during the COMMIT) it may have landed.
        stored = st.code() == StatusCode::kAborted ? Client::Stored::kNotStored : Client::Stored::kUnknown;
      }
    }
    for (auto& [client, append] : group) client->Resume(lane, stored, st);
  }
}

void BatchThreads::SweepLocked(Slot& slot, std::chrono::steady_clock::time_point now,
                               std::vector<std::shared_ptr<void>>& dropped) {
  slot.last_sweep = now;
  for (Client* c : slot.clients) {
    if (auto d = c->DropIfIdleSince(now - options_.idle_exit)) dropped.push_back(std::move(d));
  }
}

void BatchThreads::Stop() {
  for (auto& s : slots_) {
    {
      std::lock_guard lock(s->mu);
      s->stopping = true;
    }
    s->cv.notify_all();
  }
  for (auto& s : slots_) {
    std::thread t;
    {
      std::lock_guard lock(s->mu);
      t = std::move(s->thread);
    }
    if (t.joinable()) t.join();
    // And a thread that ended idle, which a Ready() is joining.
    std::unique_lock lock(s->mu);
    s->joined.wait(lock, [&s] { return s->joining == 0; });
  }
}

size_t BatchThreads::running() const {
  size_t n = 0;
  for (const auto& s : slots_) {
    std::lock_guard lock(s->mu);
    n += s->running ? 1 : 0;
  }
  return n;
}

}  // namespace sluice::writer
