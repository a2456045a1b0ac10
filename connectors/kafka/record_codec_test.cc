#include "connectors/kafka/record_codec.h"

#include <gtest/gtest.h>

#include "core/json.h"

namespace sluice::connectors::kafka {
namespace {

using Format = KafkaSinkOptions::Format;

ChangeEvent Sample() {
  ChangeEvent e;
  e.entity_type = "account";
  e.partition = 7;
  e.event_id = 123456789012ULL;
  e.entity_id = "acc-\"42\"\n";
  e.version = 9;
  e.state = R"({"balance":10,"owner":{"name":"ann"}})";
  e.command_name = "deposit";
  e.command_id = "cmd-1";
  e.committed_at_us = 1700000000123456;
  return e;
}

TEST(KafkaTopicName, ReplacesEveryTypePlaceholder) {
  EXPECT_EQ(TopicName("sluice.{type}.changes", "account"), "sluice.account.changes");
  EXPECT_EQ(TopicName("{type}-{type}", "a"), "a-a");
  EXPECT_EQ(TopicName("fixed", "account"), "fixed");
}

TEST(KafkaRecordValue, JsonRoundTripsEveryField) {
  const ChangeEvent e = Sample();
  const std::string value = EncodeValue(e, Format::kJson);
  auto j = ParseJson(value);
  ASSERT_TRUE(j.ok()) << value;
  EXPECT_EQ((*j)["state"]["owner"]["name"], "ann");  // an object, not a string
  EXPECT_EQ((*j)["id"], e.entity_id);
  auto back = DecodeValue(value, Format::kJson);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->entity_type, e.entity_type);
  EXPECT_EQ(back->entity_id, e.entity_id);
  EXPECT_EQ(back->version, e.version);
  EXPECT_FALSE(back->deleted);
  EXPECT_EQ(*ParseJson(back->state), *ParseJson(e.state));
  EXPECT_EQ(back->partition, e.partition);
  EXPECT_EQ(back->event_id, e.event_id);
  EXPECT_EQ(back->command_name, e.command_name);
  EXPECT_EQ(back->command_id, e.command_id);
  EXPECT_EQ(back->committed_at_us, e.committed_at_us);
}

TEST(KafkaRecordValue, JsonBytesAreExactAndAppendValueAppends) {
  ChangeEvent e = Sample();
  e.entity_id = "acc-42";
  e.committed_at_us = -5;  // before 1970: a sign, no wrap-around
  const std::string expected =
      R"({"type":"account","id":"acc-42","version":9,"deleted":false,"state":{"balance":10,"owner":{"name":"ann"}},)"
      R"("partition":7,"event_id":123456789012,"command":"deposit","command_id":"cmd-1","committed_at_us":-5})";
  EXPECT_EQ(EncodeValue(e, Format::kJson), expected);
  e.deleted = true;
  EXPECT_NE(EncodeValue(e, Format::kJson).find(R"("deleted":true,"state":null,)"), std::string::npos);
  e.deleted = false;
  e.state.clear();
  EXPECT_NE(EncodeValue(e, Format::kJson).find(R"("state":null,)"), std::string::npos);
  // Appended after what the buffer holds, in both formats.
  e = Sample();
  for (Format f : {Format::kJson, Format::kProtobuf}) {
    std::string buffer = "prefix";
    AppendValue(buffer, e, f);
    EXPECT_EQ(buffer, "prefix" + EncodeValue(e, f));
  }
}

TEST(KafkaRecordValue, JsonStringsAreEscapedWhereNeeded) {
  ChangeEvent e = Sample();
  for (const std::string& id : {std::string("plain-id_1"), std::string("tab\there"), std::string("back\\slash"),
                               std::string("caf\xc3\xa9"), std::string("ctl\x01")}) {
    e.entity_id = id;
    auto j = ParseJson(EncodeValue(e, Format::kJson));
    ASSERT_TRUE(j.ok()) << id;
    EXPECT_EQ((*j)["id"], id);
  }
}

TEST(KafkaRecordValue, DeleteHasNullStateInJsonAndEmptyInProtobuf) {
  ChangeEvent e = Sample();
  e.deleted = true;
  e.state.clear();
  auto j = ParseJson(EncodeValue(e, Format::kJson));
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE((*j)["state"].is_null());
  EXPECT_EQ((*j)["deleted"], true);
  for (Format f : {Format::kJson, Format::kProtobuf}) {
    auto back = DecodeValue(EncodeValue(e, f), f);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back->deleted);
    EXPECT_TRUE(back->state.empty());
  }
}

TEST(KafkaRecordValue, ProtobufRoundTripsEveryField) {
  const ChangeEvent e = Sample();
  auto back = DecodeValue(EncodeValue(e, Format::kProtobuf), Format::kProtobuf);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->entity_id, e.entity_id);
  EXPECT_EQ(back->version, e.version);
  EXPECT_EQ(back->state, e.state);
  EXPECT_EQ(back->event_id, e.event_id);
  EXPECT_EQ(back->partition, e.partition);
  EXPECT_EQ(back->committed_at_us, e.committed_at_us);
}

TEST(KafkaRecordValue, ForeignValuesAreRefused) {
  EXPECT_FALSE(DecodeValue("not json", Format::kJson).ok());
  EXPECT_FALSE(DecodeValue(R"({"id":"x"})", Format::kJson).ok());
  EXPECT_FALSE(DecodeValue("\xff\xff\xff", Format::kProtobuf).ok());
}

TEST(KafkaPositions, RoundTripAndRejectMalformed) {
  const Positions p = {{0, 5}, {3, 18446744073709551615ULL}, {17, 1}};
  EXPECT_EQ(EncodePositions(p), "0:5,3:18446744073709551615,17:1");
  EXPECT_EQ(DecodePositions(EncodePositions(p)), p);
  EXPECT_EQ(DecodePositions(""), Positions{});
  for (const char* bad : {"1", "1:", ":2", "1:2,", "a:1", "1:2:3", "4294967296:1", "1:-2"}) {
    EXPECT_FALSE(DecodePositions(bad).has_value()) << bad;
  }
  EXPECT_EQ(ParseDecimalHeader("42"), 42u);
  EXPECT_FALSE(ParseDecimalHeader("").has_value());
  EXPECT_FALSE(ParseDecimalHeader("4x").has_value());
}

}  // namespace
}  // namespace sluice::connectors::kafka
