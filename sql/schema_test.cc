#include "sql/schema.h"

#include <gtest/gtest.h>

namespace sluice::sql {
namespace {

TEST(Schema, TableNames) {
  EXPECT_EQ(EventTableName("account", 3), "ev_account_p003");
  EXPECT_EQ(EventTableName("order_line", 1023), "ev_order_line_p1023");
}

TEST(Schema, DdlDeclaresTheInvariantKeys) {
  const std::string ddl = EventTableDdl("account", 0);
  EXPECT_NE(ddl.find("PRIMARY KEY (event_id)"), std::string::npos);
  EXPECT_NE(ddl.find("UNIQUE KEY uk_entity_version (entity_id, version)"), std::string::npos);
  EXPECT_NE(ddl.find("UNIQUE KEY uk_entity_command (entity_id, command_id)"), std::string::npos);
  EXPECT_EQ(ddl.find("AUTO_INCREMENT"), std::string::npos);  // I3: ids are assigned, never auto
}

TEST(Schema, DuplicateKeyNameParsesBothServers) {
  EXPECT_EQ(DuplicateKeyName(Aborted("Duplicate entry '5' for key 'PRIMARY' (MySQL error 1062)")), "PRIMARY");
  EXPECT_EQ(DuplicateKeyName(Aborted(
                "Duplicate entry 'a-2' for key 'ev_account_p000.uk_entity_version' (MySQL error 1062)")),
            "uk_entity_version");
  EXPECT_EQ(DuplicateKeyName(Aborted("Deadlock found (MySQL error 1213)")), "");
  EXPECT_EQ(DuplicateKeyName(Unavailable("gone")), "");
}

TEST(Schema, DurabilityRule) {
  Durability d;
  d.innodb_flush_log_at_trx_commit = 1;
  d.sync_binlog = 0;
  EXPECT_TRUE(d.durable());
  d.log_bin = true;
  EXPECT_FALSE(d.durable());
  d.sync_binlog = 1;
  EXPECT_TRUE(d.durable());
  // A Galera node must also be in the primary component.
  d.galera = true;
  d.cluster_status = "non-Primary";
  EXPECT_FALSE(d.durable());
  d.cluster_status = "Primary";
  EXPECT_TRUE(d.durable());
  EXPECT_NE(d.Describe().find("wsrep_cluster_status=Primary"), std::string::npos) << d.Describe();
  d.innodb_flush_log_at_trx_commit = 2;
  EXPECT_FALSE(d.durable());
}

}  // namespace
}  // namespace sluice::sql
