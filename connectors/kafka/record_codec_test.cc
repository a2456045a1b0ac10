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

// A JSON record as any producer might write it: keys in any order, spaces,
// escapes, fields of its own; the state is its text, untouched.
TEST(KafkaRecordValue, JsonDecodesAnyLayoutAndKeepsTheStateText) {
  const std::string value =
      "{ \"extra\": [1, {\"x\": 2}], \"committed_at_us\" : -7, \"command_id\":\"c\\u00e9-\\\"1\\\"\",\n"
      "  \"command\":\"dep\\tosit\", \"event_id\":18446744073709551615, \"partition\":4294967295,\n"
      "  \"state\": {\"b\" : [1,2], \"a\":\"}\\\"]\"} , \"deleted\":false, \"version\":3, \"id\":\"acc\\n1\", \"type\":\"account\" }  ";
  auto e = DecodeValue(value, Format::kJson);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->entity_type, "account");
  EXPECT_EQ(e->entity_id, "acc\n1");
  EXPECT_EQ(e->version, 3u);
  EXPECT_FALSE(e->deleted);
  EXPECT_EQ(e->state, R"({"b" : [1,2], "a":"}\"]"})");
  EXPECT_EQ(e->partition, 4294967295u);
  EXPECT_EQ(e->event_id, 18446744073709551615ULL);
  EXPECT_EQ(e->command_name, "dep\tosit");
  EXPECT_EQ(e->command_id, "c\xc3\xa9-\"1\"");
  EXPECT_EQ(e->committed_at_us, -7);
  // A state that is not an object, as its text.
  for (const std::string state : {"[1, 2]", "\"text\"", "12.5", "true"}) {
    std::string v = EncodeValue(Sample(), Format::kJson);
    const size_t at = v.find("\"state\":") + 8;
    v.replace(at, v.find(",\"partition\"") - at, state + " ");
    auto back = DecodeValue(v, Format::kJson);
    ASSERT_TRUE(back.ok()) << v << ": " << back.status().message();
    EXPECT_EQ(back->state, state);
  }
}

// What is not an event of ours is refused with the reason, whatever the
// bytes; a record must hold every field, each of its type and range.
TEST(KafkaRecordValue, JsonRecordsThatAreNotEventsAreRefusedWithTheReason) {
  ChangeEvent sample = Sample();
  sample.entity_id = "acc-7";
  const std::string good = EncodeValue(sample, Format::kJson);
  ASSERT_TRUE(DecodeValue(good, Format::kJson).ok());
  const auto refused = [](const std::string& v, const std::string& why) {
    auto e = DecodeValue(v, Format::kJson);
    EXPECT_FALSE(e.ok()) << v;
    if (!e.ok()) {
      EXPECT_NE(e.status().message().find(why), std::string::npos) << e.status().message();
    }
  };
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string v = good;
    const size_t at = v.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return v.replace(at, from.size(), to);
  };
  refused(good + " {}", "more after the object");
  refused(good + "x", "");
  refused(good.substr(0, good.size() - 1), "");
  refused("[" + good + "]", "");
  refused("", "");
  refused("\"text\"", "");
  refused(with(R"("version":9,)", ""), "no \"version\"");
  refused(with(R"(,"committed_at_us":)", R"(,"committed_at":)"), "no \"committed_at_us\"");
  refused(with(R"("version":9)", R"("version":-9)"), "\"version\"");
  refused(with(R"("version":9)", R"("version":"9")"), "\"version\"");
  refused(with(R"("version":9)", R"("version":9.5)"), "\"version\"");
  refused(with(R"("version":9)", R"("version":18446744073709551616)"), "\"version\"");
  refused(with(R"("partition":7)", R"("partition":4294967296)"), "partition 4294967296 is out of range");
  refused(with(R"("deleted":false)", R"("deleted":0)"), "\"deleted\"");
  refused(with(R"("id":"acc-7")", R"("id":7)"), "\"id\"");
  refused(with(R"("id":"acc-7")", "\"id\":\"a\xff\""), "");  // not UTF-8
  refused(with(R"("id":"acc-7")", R"("id":"a\q")"), "");     // no such escape
  refused(with(R"("command":"deposit")", R"("command":null)"), "\"command\"");
  // A field of another producer's must be JSON, brackets matched, though no
  // comparison reads it; so must a delete's state.
  const std::string tail = good.substr(0, good.size() - 1);
  refused(tail + R"(,"x":tru})", "");
  refused(tail + R"(,"x":[}})", "");
  refused(tail + R"(,"x":[},"id":"other"]})", "");
  refused(tail + R"(,"x":"\q"})", "");
  ASSERT_TRUE(DecodeValue(tail + R"(,"x":[1,{"y":"\u00e9"}]})", Format::kJson).ok());
  ChangeEvent gone = sample;
  gone.deleted = true;
  gone.state.clear();
  const std::string deleted = EncodeValue(gone, Format::kJson);
  ASSERT_TRUE(DecodeValue(deleted, Format::kJson).ok());
  std::string deleted_with = deleted;
  refused(deleted_with.replace(deleted_with.find(R"("state":null)"), 12, R"("state":tru)"), "");
  deleted_with = deleted;
  EXPECT_TRUE(DecodeValue(deleted_with.replace(deleted_with.find(R"("state":null)"), 12, R"("state":{"a":1})"),
                          Format::kJson)
                  .ok());
  // A field twice: the last is the record's, the state too.
  auto twice = DecodeValue(tail + R"(,"state":null,"version":10})", Format::kJson);
  ASSERT_TRUE(twice.ok()) << twice.status().message();
  EXPECT_EQ(twice->state, "");
  EXPECT_EQ(twice->version, 10u);
  // The state's brackets must close where its object ends; inside, its
  // text is not checked here: a verify finds such a state differs from
  // storage's (topic_verify_test).
  auto unchecked = DecodeValue(with(R"("state":{"balance":10,)", R"("state":{"balance":10,,)"), Format::kJson);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_EQ(unchecked->state, R"({"balance":10,,"owner":{"name":"ann"}})");
  refused(with(R"("state":{"balance":10,)", R"("state":{"balance":[10,)"), "");
}

// Hostile bytes: never a crash, and nothing decoded from a cut record.
TEST(KafkaRecordValue, JsonCutOrBitFlippedRecordsNeverDecodeAsAnotherEvent) {
  const ChangeEvent sample = Sample();
  const std::string good = EncodeValue(sample, Format::kJson);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeValue(good.substr(0, n), Format::kJson).ok()) << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    for (const char c : {'\0', '"', '\\', '{', '}', ',', ':', '9', '\x80'}) {
      std::string v = good;
      v[i] = c;
      auto e = DecodeValue(v, Format::kJson);
      if (!e.ok()) continue;
      // Whatever decoded is what a JSON parser reads in those bytes.
      auto j = ParseJson(v);
      ASSERT_TRUE(j.ok() || e->state != sample.state) << v;
      if (!j.ok()) continue;
      EXPECT_EQ(e->entity_id, (*j)["id"].get<std::string>()) << v;
      EXPECT_EQ(e->version, (*j)["version"].get<uint64_t>()) << v;
      EXPECT_EQ(e->event_id, (*j)["event_id"].get<uint64_t>()) << v;
      EXPECT_EQ(*ParseJson(e->state), (*j)["state"]) << v;
    }
  }
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
