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
  s.line.erase(std::remove_if(s.line.begin(), s.line.end(), [client](const auto& e) { return e.second == client; }),
               s.line.end());
}

void BatchThreads::Ready(size_t key, Client* client) {
  Slot& s = SlotOf(key);
  std::thread ended;
  {
    std::lock_guard lock(s.mu);
    s.line.emplace_back(key, client);
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
        std::vector<std::pair<size_t, Client*>> turn;
        while (!slot.line.empty() && turn.size() < options_.group_commit_max) {
          turn.push_back(slot.line.front());
          slot.line.pop_front();
        }
        lock.unlock();
        GroupTurn(turn, *lane);
        std::vector<std::pair<size_t, Client*>> more;
        for (const auto& e : turn) {
          if (e.second->EndTurn()) more.push_back(e);
        }
        lock.lock();
        for (const auto& e : more) slot.line.push_back(e);
      } else {
        const auto served = slot.line.front();
        slot.line.pop_front();
        lock.unlock();
        const bool more = served.second->Serve(*lane);
        lock.lock();
        if (more) slot.line.push_back(served);
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

struct BatchThreads::Member {
  size_t key;
  Client* client;
  sql::EventAppend* append;
  uint64_t sessions;  // the lane's when it was planned
  Client::Stored stored = Client::Stored::kLeftOut;
  Status status = Status::Ok();
};

void BatchThreads::GroupTurn(const std::vector<std::pair<size_t, Client*>>& clients, Lane& lane) {
  std::vector<Member> members;
  for (const auto& [key, client] : clients) {
    sql::EventAppend* append = client->PlanBatch(lane);
    if (append != nullptr) members.push_back(Member{key, client, append, lane.sessions});
  }
  // By server, then by key: each server's tables are locked in the order of
  // the partitions, as every other writer does.
  std::vector<Member*> order;
  for (Member& m : members) order.push_back(&m);
  std::stable_sort(order.begin(), order.end(), [](const Member* a, const Member* b) {
    return std::pair(a->append->server(), a->key) < std::pair(b->append->server(), b->key);
  });
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    std::vector<Member*> together;
    for (; j < order.size() && order[j]->append->server() == order[i]->append->server(); ++j) {
      // Planned on caches that an outage since may have made stale (another
      // worker of the turn, or a store of another server, found the
      // session broken): planned again (kLeftOut).
      if (order[j]->sessions == lane.sessions) together.push_back(order[j]);
    }
    i = j;
    if (together.size() == 1) StoreAlone(*together.front(), lane);
    if (together.size() > 1) StoreTogether(std::move(together), lane);
  }
  // Every batch of the turn is stored or not: now each lands (caches, the
  // engines' notices, pushes, replies), in the order of the line.
  for (Member& m : members) m.client->Resume(lane, m.stored, m.status);
}

void BatchThreads::StoreAlone(Member& m, Lane& lane) {
  if (FailBeforeCommit({&m}, lane)) return;
  // One autocommit INSERT: one round trip.
  m.status = lane.log->Append(*m.append);
  if (m.status.ok()) {
    m.stored = Client::Stored::kCommitted;
    if (options_.metrics) options_.metrics->TransactionCommitted(1);
  } else if (m.status.code() == StatusCode::kAborted) {
    m.stored = Client::Stored::kConflict;
  } else {
    m.stored = Client::Stored::kUnknown;
    Outage(lane);
  }
}

void BatchThreads::StoreTogether(std::vector<Member*> members, Lane& lane) {
  for (int round = 0; members.size() > 1; ++round) {
    if (FailBeforeCommit(members, lane)) return;
    Status st = Status::Ok();
    size_t failed = 0;
    for (; failed < members.size(); ++failed) {
      // A failed Stage leaves nothing staged: the transaction is gone.
      st = lane.log->Stage(*members[failed]->append);
      if (!st.ok()) break;
    }
    if (st.ok()) {
      st = lane.log->Commit();
      if (!st.ok() && st.code() != StatusCode::kAborted) Outage(lane);
      if (st.ok() && options_.metrics) options_.metrics->TransactionCommitted(members.size());
      for (Member* m : members) {
        m->status = st;
        if (st.ok()) {
          m->stored = Client::Stored::kCommitted;
        } else if (st.code() == StatusCode::kAborted) {
          // Refused at COMMIT (a deadlock, Galera's certification): rolled back.
          m->stored = Client::Stored::kNotStored;
        } else {
          // The session lost during the COMMIT: it may have landed.
          m->stored = Client::Stored::kUnknown;
          if (st.code() != StatusCode::kUnavailable) m->status = Unavailable(st.message());
        }
      }
      return;
    }
    if (st.code() == StatusCode::kUnavailable) Outage(lane);
    if (st.code() != StatusCode::kAborted) return;  // nothing staged is left: each planned again, alone (kLeftOut)
    // Its rows conflict (or its statement met a deadlock): it resolves
    // that alone; the others go in again without it, once: after a second
    // conflict they too are planned again and stored alone, so that a
    // thread whose partitions all conflict (two writers racing) does not
    // insert its batches again and again.
    members[failed]->stored = Client::Stored::kConflict;
    members[failed]->status = st;
    members.erase(members.begin() + static_cast<std::ptrdiff_t>(failed));
    if (round == 1) return;
  }
  if (members.size() == 1) StoreAlone(*members.front(), lane);
}

bool BatchThreads::FailBeforeCommit(const std::vector<Member*>& members, Lane& lane) {
  if (!SLUICE_FAILPOINT("writer.before_commit")) return false;
  // As a session lost before the store: may have landed, an outage.
  for (Member* m : members) {
    m->stored = Client::Stored::kUnknown;
    m->status = Unavailable("failpoint writer.before_commit");
  }
  Outage(lane);
  return true;
}

void BatchThreads::Outage(Lane& lane) {
  // Commits may have been lost: every worker of the thread reads again.
  lane.sessions = NewSessions();
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
