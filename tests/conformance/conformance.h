// The connector conformance kit: the properties sinks must have, checked
// against their real servers (DESIGN 4.2, 4.3, 5). Three suites:
//
// SinkConformance, every sink (point views and logs alike):
//   IdempotentReapply            the same batch twice: the second time all stale, nothing changes
//   OneRejectedEventDoesNotFailTheBatch  a poison event is rejected alone; its neighbours apply
//   RestartFromAnOldOffset       a new sink instance replaying an old range (after newer events) moves nothing backwards
//   FlushedEventsOutliveTheInstance  after Flush(), a new instance (the first never closed: a crash) finds
//                                everything acknowledged in the view and answers it stale
//   AReopenedSinkAppliesWhatItsCloseDropped  acknowledged but not flushed, closed, reopened: the same
//                                batch again is applied or stale, and after a flush the view is exact
// PointViewConformance, sinks that keep one current row per entity (every
// built-in sink but kafka, and the example plugin):
//   StaleVersionsAreSkipped      an older version after a newer one never overwrites it
//   VersionedDeletesNeverResurrect  a delete leaves a tombstone; older puts stay out, newer ones come back
//   (in repair_conformance.cc, for sinks whose capabilities claim them:)
//   EntityChecksCompareOnlyTheGivenEntitiesAndSayWhichVersionTheViewHolds  VerifyEntities
//   RepairNotOlderRewritesTheSameVersionButNeverAnOlderOne          Repair(kNotOlder)
//   RepairAnyOverwritesANewerVersionAndRemovesEntitiesWithTheirTombstones  Repair(kAny)
// OutageConformance, sinks whose server the kit can cut:
//   ServerDownIsBatchLevelUnavailable  while the server is unreachable: kUnavailable for the batch
//                                (no per-event results), Health() unavailable; after it is back
//                                the same batch re-applies and the view is exact
//
// A log (kafka) is not held to the point-view properties: it deduplicates by
// source position, and an older version under a newer event id, which main
// storage never produces for one entity (I1), is a new record there. Its
// ReadBack is the last record of each key.
//
// Adding a connector is one ConnectorUnderTest subclass and one line:
//
//   class MySinkUnderTest : public sluice::conformance::ConnectorUnderTest { ... };
//   SLUICE_CONFORMANCE_CONNECTOR(MySink, MySinkUnderTest);            // a point view that can be cut
//   SLUICE_CONFORMANCE_LOG_CONNECTOR(MyLog, MyLogUnderTest);          // a log, not cuttable
//
// in a file added to the conformance_test sources in tests/CMakeLists.txt
// (see tests/conformance/README.md and docs/connectors.md). Every test gets
// a new ConnectorUnderTest, whose SetUp() makes a fresh, uniquely named view.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"

namespace sluice::testing {
class TcpProxy;
}  // namespace sluice::testing

namespace sluice::conformance {

// What the view holds for one entity, read back without the sink under test.
struct ViewRow {
  uint64_t version = 0;
  bool deleted = false;  // a tombstone is visible (sinks that drop deleted rows report nullopt instead)
  std::optional<int64_t> n;  // the state's "/n" as the view holds it; nullopt when absent or deleted
};

// One connector, as the kit drives it. Events of the kit have entity type
// "account" and states {"n": <int>, "name": "<text>"}; a view must map at
// least "/n" so that ReadBack can tell versions apart by content.
class ConnectorUnderTest {
 public:
  virtual ~ConnectorUnderTest() = default;

  // Prepares a fresh, empty view with unique names (database, key prefix,
  // file...). A failure (or a missing server) fails the test, or skips it
  // when the server is missing and CI is not set: see SkipOrFail.
  virtual Status SetUp() = 0;

  // The sink's own keys as YAML flow-mapping members, as a user would write
  // them (e.g. "type: redis, url: \"redis://...\""); the kit adds name and
  // entity ("account") and wraps it into a whole file. A connector that can
  // go down points the sink at its cuttable route (e.g. a TcpProxy).
  virtual std::string SinkYaml() = 0;

  // Top-level sections the file needs besides storage, entities and sinks
  // (e.g. "plugins: [...]\n"); empty by default.
  virtual std::string ExtraYaml() { return ""; }

  // The storage.mysql section's inner text ("{database: x}" or with
  // host/port); default: the test MariaDB server with a scratch database.
  virtual std::string StorageYaml();

  // What the view holds for `entity_id`, read directly from the server or
  // file (not through the sink under test); nullopt when the view holds
  // nothing for it (no row and no visible tombstone).
  virtual Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) = 0;

  // An event this connector refuses for good (rejected, not unavailable),
  // built from `base`; by default `base` with a state that is not JSON.
  virtual connectors::ChangeEvent PoisonEvent(connectors::ChangeEvent base);

  // Whether SetServerDown can make the server unreachable; when false, the
  // server-down test is skipped for this connector with that reason.
  virtual bool CanGoDown() const { return false; }
  virtual void SetServerDown(bool /*down*/) {}
};

// A connector whose server the kit cuts with a testing::TcpProxy: call
// StartProxy() in SetUp() and point the sink at 127.0.0.1:proxy_port().
class ProxiedConnector : public ConnectorUnderTest {
 public:
  ProxiedConnector();
  ~ProxiedConnector() override;
  bool CanGoDown() const override { return true; }
  void SetServerDown(bool down) override;

 protected:
  void StartProxy(const std::string& host, uint16_t port);
  uint16_t proxy_port() const;

 private:
  std::unique_ptr<testing::TcpProxy> proxy_;
};

// Builds a connector for one test.
using ConnectorFactory = std::function<std::unique_ptr<ConnectorUnderTest>()>;

// The test parameter: a connector's name and factory.
struct ConnectorParam {
  std::string name;
  ConnectorFactory make;
};

// For gtest's parameter printing.
inline void PrintTo(const ConnectorParam& p, std::ostream* os) { *os << p.name; }

// The shared fixture (its TEST_Ps are in conformance_test.cc).
class SinkConformance : public ::testing::TestWithParam<ConnectorParam> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Makes and opens a new instance of the sink (a "restart").
  std::unique_ptr<connectors::Sink> OpenSink();
  // Applies, then flushes (as the engine does before it saves offsets), and
  // returns a per-event result string: A applied, S stale, R rejected; or
  // the failure of either call.
  std::string Apply(connectors::Sink& sink, const std::vector<connectors::ChangeEvent>& events);
  // ReadBack, failing the test on error.
  std::optional<ViewRow> Row(const std::string& id);

  std::unique_ptr<ConnectorUnderTest> connector_;
  std::optional<config::Config> config_;
  std::string config_dir_;
};

// An event of entity `id` at `version` with state {"n": n, "name": ...};
// event ids grow with each call.
connectors::ChangeEvent Put(const std::string& id, uint64_t version, int64_t n);
// A delete of `id` at `version`.
connectors::ChangeEvent Del(const std::string& id, uint64_t version);

// A name unique to this process and test run, [a-z0-9_], for databases,
// key prefixes and files.
std::string UniqueName(const std::string& prefix);

// The point-view and outage suites: the same fixture under other names, so
// that a connector is registered only with the suites whose properties it has.
class PointViewConformance : public SinkConformance {};
class OutageConformance : public SinkConformance {};

}  // namespace sluice::conformance

// In a test of the fixture: the view holds `id` live at `version` with n == `n`.
#define EXPECT_LIVE(id, version_, n_)                                             \
  do {                                                                            \
    const auto row = Row(id);                                                     \
    ASSERT_TRUE(row.has_value()) << id << " is missing from the view";            \
    EXPECT_FALSE(row->deleted) << id << " is a tombstone";                        \
    EXPECT_EQ(row->version, static_cast<uint64_t>(version_)) << id;               \
    EXPECT_EQ(row->n, std::optional<int64_t>(n_)) << id;                          \
  } while (0)

// The view holds nothing live for `id` (absent, or a tombstone).
#define EXPECT_NOT_LIVE(id)                                                       \
  do {                                                                            \
    const auto row = Row(id);                                                     \
    EXPECT_TRUE(!row.has_value() || row->deleted)                                 \
        << id << " is live at version " << row->version;                          \
  } while (0)

// Instantiates one suite for one connector; every test is named ".../all".
#define SLUICE_CONFORMANCE_SUITE_(suite, name, type)                                         \
  INSTANTIATE_TEST_SUITE_P(                                                                  \
      name, suite,                                                                           \
      ::testing::Values(::sluice::conformance::ConnectorParam{                               \
          #name,                                                                             \
          [] { return std::unique_ptr<::sluice::conformance::ConnectorUnderTest>(std::make_unique<type>()); }}), \
      [](const auto&) { return std::string("all"); })

// Registers a point-view connector with all three suites, as
// <name>/SinkConformance.<test>/all, <name>/PointViewConformance.<test>/all
// and <name>/OutageConformance.<test>/all. Use it inside namespace
// sluice::conformance (gtest pastes the suite name into identifiers).
#define SLUICE_CONFORMANCE_CONNECTOR(name, type)          \
  SLUICE_CONFORMANCE_SUITE_(SinkConformance, name, type); \
  SLUICE_CONFORMANCE_SUITE_(PointViewConformance, name, type); \
  SLUICE_CONFORMANCE_SUITE_(OutageConformance, name, type)

// Registers a log connector (not a point view, server not cuttable by the
// kit) with SinkConformance only.
#define SLUICE_CONFORMANCE_LOG_CONNECTOR(name, type) SLUICE_CONFORMANCE_SUITE_(SinkConformance, name, type)
