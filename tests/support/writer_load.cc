#include "tests/support/writer_load.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "sql/schema.h"

namespace sluice::testing {

RandomWriterLoad::RandomWriterLoad(std::vector<uint16_t> ports, std::string type, int clients, int commands,
                                   int entities, std::string key_prefix)
    : ports_(std::move(ports)),
      type_(std::move(type)),
      clients_(clients),
      commands_(commands),
      entities_(entities),
      key_prefix_(std::move(key_prefix)) {}

RandomWriterLoad::~RandomWriterLoad() { Join(); }

void RandomWriterLoad::Start() {
  for (int t = 0; t < clients_; ++t) {
    threads_.emplace_back([this, t] {
      std::mt19937 rng(100 + t);
      std::vector<std::unique_ptr<HttpClient>> conns;
      for (const uint16_t port : ports_) conns.push_back(std::make_unique<HttpClient>(port, std::chrono::seconds(10)));
      for (int i = next_++; i < commands_; i = next_++) {
        const std::string entity = "a" + std::to_string(rng() % entities_);
        const std::string key = key_prefix_ + std::to_string(i);
        const std::string body = R"({"n":)" + std::to_string(i) + "}";
        for (int attempt = 0; attempt < 60; ++attempt) {
          const size_t n = rng() % conns.size();
          const HttpReply r = conns[n]->Post("/v1/entities/" + type_ + "/" + entity + "/commands/patch", body,
                                             {{"Idempotency-Key", key}});
          {
            std::lock_guard lock(mu_);
            ++statuses_[r.status];
            if (r.status == 200 || r.status == 201) {
              acknowledged_[key] = entity;
              const auto w = r.headers.find("sluice-writer");
              handled_by_[entity].insert(w == r.headers.end() ? "" : w->second);
              break;
            }
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(r.status == 0 ? 100 : 10));
        }
      }
    });
  }
}

void RandomWriterLoad::Join() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::string RandomWriterLoad::StatusText() const {
  std::string out;
  for (const auto& [status, count] : statuses_) out += " " + std::to_string(status) + "x" + std::to_string(count);
  return out;
}

void RunKillingAWriter(RandomWriterLoad& load, int commands, std::vector<std::unique_ptr<SluiceProcess>>& writers,
                       size_t which, const std::string& path, uint16_t port) {
  load.Start();
  while (load.started() < commands / 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  writers[which]->Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  writers[which] = StartSluice("writer", path, port);
  load.Join();
}

void ExpectEveryCommandAcknowledged(const RandomWriterLoad& load, int commands) {
  const std::string seen = load.StatusText();
  EXPECT_EQ(load.acknowledged().size(), static_cast<size_t>(commands)) << "answers:" << seen;
  EXPECT_EQ(load.statuses().count(409), 0u) << "answers:" << seen;
  EXPECT_EQ(load.statuses().count(500), 0u) << "answers:" << seen;
}

void ExpectStoredExactlyOnce(TestDatabase& db, const std::string& type, uint32_t partitions,
                             const std::map<std::string, std::string>& acknowledged, int64_t commands) {
  ExpectStoredExactlyOnce([&db](uint32_t) -> TestDatabase& { return db; }, type, partitions, acknowledged, commands);
}

void ExpectStoredExactlyOnce(const std::function<TestDatabase&(uint32_t)>& db_of, const std::string& type,
                             uint32_t partitions, const std::map<std::string, std::string>& acknowledged,
                             int64_t commands) {
  std::map<std::string, int> stored;
  std::map<std::string, std::string> entity_of;
  int64_t events = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    TestDatabase& db = db_of(p);
    const std::string table = sql::EventTableName(type, p);
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM " + table),
              db.Scalar("SELECT COALESCE(MAX(event_id), 0) FROM " + table))
        << table << " has a gap or a duplicate event_id";
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM (SELECT entity_id FROM " + table +
                        " GROUP BY entity_id HAVING COUNT(*) <> MAX(version)) x"),
              0)
        << table << ": an entity's versions are not 1..n";
    for (const auto& r : db.Query("SELECT command_id, entity_id FROM " + table)) {
      ++stored[*r[0]];
      entity_of[*r[0]] = *r[1];
      ++events;
    }
  }
  EXPECT_EQ(events, commands);
  for (const auto& [key, entity] : acknowledged) {
    ASSERT_EQ(stored[key], 1) << key;
    EXPECT_EQ(entity_of[key], entity) << key;
  }
}

}  // namespace sluice::testing
