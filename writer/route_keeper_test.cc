// RouteKeeper over sql::MemoryStorage: writers split the partitions through
// leases and each learns where the others' are; one that leaves hands its
// share over at the next round; a second process under a taken name routes
// nothing (every command handled where it arrives).
#include "writer/route_keeper.h"

#include <gtest/gtest.h>

#include <set>

#include "sql/memory_tables.h"

namespace sluice::writer {
namespace {

std::unique_ptr<RouteKeeper> Writer(const std::string& member, std::shared_ptr<sql::Storage> storage) {
  RouteKeeper::Options o;
  o.member = member;
  o.ttl = std::chrono::seconds(10);
  o.storage = std::move(storage);
  o.types = {{"account", 8}, {"order", 3}};
  auto k = std::make_unique<RouteKeeper>(std::move(o));
  k->SetUrl("http://" + member + ":8080");
  return k;
}

TEST(RouteKeeper, WritersSplitThePartitionsAndRouteToEachOther) {
  auto storage = sql::MemoryStorage::Create();
  auto k1 = Writer("w1", storage);
  auto k2 = Writer("w2", storage);
  RouteKeeper& w1 = *k1;
  RouteKeeper& w2 = *k2;
  // Alone, w1 takes everything and forwards nothing.
  ASSERT_TRUE(w1.Round().ok());
  EXPECT_EQ(w1.Held()["account"].size(), 8u);
  for (uint32_t p = 0; p < 8; ++p) EXPECT_EQ(w1.OwnerUrl("account", p), "");
  // w2 joins: w1 gives up w2's share at its next round, w2 takes it at its next.
  ASSERT_TRUE(w2.Round().ok());
  ASSERT_TRUE(w1.Round().ok());
  ASSERT_TRUE(w2.Round().ok());
  ASSERT_TRUE(w1.Round().ok());
  for (const auto& [type, partitions] : std::map<std::string, uint32_t>{{"account", 8}, {"order", 3}}) {
    const auto h1 = w1.Held()[type];
    const auto h2 = w2.Held()[type];
    EXPECT_EQ(h1.size() + h2.size(), partitions) << type;
    EXPECT_GE(h1.size(), partitions / 2) << type;
    EXPECT_GE(h2.size(), partitions / 2) << type;
    const std::set<uint32_t> mine1(h1.begin(), h1.end());
    for (uint32_t p = 0; p < partitions; ++p) {
      const bool first = mine1.count(p) != 0;
      EXPECT_EQ(w1.OwnerUrl(type, p), first ? "" : "http://w2:8080") << type << " " << p;
      EXPECT_EQ(w2.OwnerUrl(type, p), first ? "http://w1:8080" : "") << type << " " << p;
    }
  }
  EXPECT_EQ(w1.OwnerUrl("unknown", 0), "");
  EXPECT_EQ(w1.OwnerUrl("account", 99), "");
  // w2 stops cleanly: its leases are released and w1 routes nothing to it,
  // then takes them at its next round.
  w2.Leave();
  ASSERT_TRUE(w1.Round().ok());
  EXPECT_EQ(w1.Held()["account"].size(), 8u);
  for (uint32_t p = 0; p < 8; ++p) EXPECT_EQ(w1.OwnerUrl("account", p), "");
}

TEST(RouteKeeper, ASecondProcessUnderATakenNameRoutesNothing) {
  auto storage = sql::MemoryStorage::Create();
  auto w1 = Writer("w1", storage);
  auto w2 = Writer("w2", storage);
  ASSERT_TRUE(w1->Round().ok());
  ASSERT_TRUE(w2->Round().ok());
  ASSERT_TRUE(w1->Round().ok());  // gives up w2's share
  ASSERT_TRUE(w2->Round().ok());  // takes it
  ASSERT_FALSE(w2->Held()["account"].empty());
  // Routing, the twin would send w2's partitions to http://w2:8080.
  auto twin = Writer("w1", storage);
  ASSERT_TRUE(twin->Round().ok());
  EXPECT_TRUE(twin->Held().empty());
  for (uint32_t p = 0; p < 8; ++p) EXPECT_EQ(twin->OwnerUrl("account", p), "");
  // The running w1 is unaffected.
  ASSERT_TRUE(w1->Round().ok());
  EXPECT_FALSE(w1->Held()["account"].empty());
}

}  // namespace
}  // namespace sluice::writer
