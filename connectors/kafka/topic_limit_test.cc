#include "connectors/kafka/topic_limit.h"

#include <gtest/gtest.h>

#include "connectors/kafka/kafka_client.h"

namespace sluice::connectors::kafka {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kProducerLimit = 1000000;
constexpr milliseconds kTimeout{100};

// A topic whose max.message.bytes (or the error reading it) the test sets,
// counting how often the sink asked.
struct FakeTopic {
  Result<int64_t> answer = int64_t{kProducerLimit + 1};
  int reads = 0;
  TopicLimit::Reader Reader() {
    return [this](rd_kafka_t*, const std::string&, milliseconds) {
      ++reads;
      return answer;
    };
  }
};

TEST(KafkaTopicLimit, ATopicBelowTheProducersLimitHoldsProducersToItLessTheBatchFraming) {
  FakeTopic topic;
  topic.answer = int64_t{2000};
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  EXPECT_EQ(limit.producer_cap(), 0);  // not read yet: the producer's own
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  EXPECT_TRUE(limit.Held());
  EXPECT_EQ(limit.producer_cap(), 2000 - kRecordBatchOverhead);
  EXPECT_NE(limit.TooLarge(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).find("topic t (max.message.bytes 2000)"),
            std::string::npos);
  limit.Forget();
  EXPECT_FALSE(limit.Held());
  EXPECT_EQ(limit.producer_cap(), 0);
}

TEST(KafkaTopicLimit, ATopicAtOrAboveTheProducersLimitDoesNotHoldThem) {
  FakeTopic topic;
  topic.answer = int64_t{kProducerLimit + kRecordBatchOverhead};
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  EXPECT_FALSE(limit.Held());
  EXPECT_NE(limit.TooLarge(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).find("the producer (message.max.bytes)"),
            std::string::npos);
}

TEST(KafkaTopicLimit, NoAnswerFailsTheOpenAndALimitNobodyMayReadDoesNot) {
  FakeTopic topic;
  topic.answer = Unavailable("no answer in time");
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  const Status st = limit.Read(nullptr, kTimeout);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("sink 's'"), std::string::npos) << st.message();

  topic.answer = FailedPrecondition("not authorized");
  EXPECT_TRUE(limit.Read(nullptr, kTimeout).ok());
  EXPECT_FALSE(limit.Held());
  EXPECT_EQ(limit.producer_cap(), 0);
  EXPECT_FALSE(limit.OneRecordPerBatch());  // nothing refused yet
}

TEST(KafkaTopicLimit, ASizeRefusalIsFinalOnlyTheSecondTimeAndOtherRefusalsAtOnce) {
  FakeTopic topic;
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  const RecordKey a{1, 10};
  const RecordKey b{1, 11};
  EXPECT_TRUE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_INVALID_RECORD));
  EXPECT_FALSE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_TRUE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  // Forgotten once final: a later first refusal of it is a first again.
  EXPECT_FALSE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE));
  // A record found in the topic after its first refusal starts over.
  EXPECT_FALSE(limit.RefusedForGood(b, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  limit.InTopic(b);
  EXPECT_FALSE(limit.RefusedForGood(b, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
}

TEST(KafkaTopicLimit, AnUnreadableLimitSendsOneRecordPerRequestWhileRefusalsWait) {
  FakeTopic topic;
  topic.answer = FailedPrecondition("not authorized");
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  const RecordKey a{0, 5};
  EXPECT_FALSE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_TRUE(limit.OneRecordPerBatch());
  limit.InTopic(a);
  EXPECT_FALSE(limit.OneRecordPerBatch());
  EXPECT_FALSE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_TRUE(limit.RefusedForGood(a, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_FALSE(limit.OneRecordPerBatch());

  // A readable limit, even with refusals waiting, holds the producers to it
  // instead.
  EXPECT_FALSE(limit.RefusedForGood({0, 6}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  topic.answer = int64_t{2000};
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  EXPECT_FALSE(limit.OneRecordPerBatch());
  EXPECT_TRUE(limit.Held());
}

TEST(KafkaTopicLimit, FirstRefusalsAreRememberedUpToTheBoundThenFinalAtOnce) {
  FakeTopic topic;
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader(), /*max_remembered=*/2);
  EXPECT_FALSE(limit.RefusedForGood({0, 1}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_FALSE(limit.RefusedForGood({0, 2}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_TRUE(limit.RefusedForGood({0, 3}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
  EXPECT_TRUE(limit.RefusedForGood({0, 1}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));  // its second: room again
  EXPECT_FALSE(limit.RefusedForGood({0, 4}, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
}

TEST(KafkaTopicLimit, ALocalRefusalUnderARaisedLimitFailsTheBatchAndTheLimitIsReadOncePerBatch) {
  FakeTopic topic;
  topic.answer = int64_t{2000};
  TopicLimit limit("s", "t", kProducerLimit, topic.Reader());
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  ASSERT_EQ(topic.reads, 1);

  limit.NewBatch();
  EXPECT_TRUE(limit.RefusalStands(nullptr, kTimeout).ok());  // unchanged: the record is too large
  EXPECT_TRUE(limit.RefusalStands(nullptr, kTimeout).ok());
  EXPECT_EQ(topic.reads, 2);  // once in the batch

  topic.answer = int64_t{4000};
  EXPECT_TRUE(limit.RefusalStands(nullptr, kTimeout).ok());  // not asked again in this batch
  limit.NewBatch();
  const Status raised = limit.RefusalStands(nullptr, kTimeout);
  EXPECT_EQ(raised.code(), StatusCode::kUnavailable);
  EXPECT_NE(raised.message().find("raised to 4000"), std::string::npos) << raised.message();

  limit.NewBatch();
  topic.answer = Unavailable("no answer in time");
  EXPECT_EQ(limit.RefusalStands(nullptr, kTimeout).code(), StatusCode::kUnavailable);
  limit.NewBatch();
  topic.answer = FailedPrecondition("not authorized");
  EXPECT_TRUE(limit.RefusalStands(nullptr, kTimeout).ok());

  // Not held to the topic's limit: the producer's own refused it, and
  // nothing is read.
  topic.answer = int64_t{kProducerLimit * 2};
  ASSERT_TRUE(limit.Read(nullptr, kTimeout).ok());
  const int reads = topic.reads;
  limit.NewBatch();
  EXPECT_TRUE(limit.RefusalStands(nullptr, kTimeout).ok());
  EXPECT_EQ(topic.reads, reads);
}

}  // namespace
}  // namespace sluice::connectors::kafka
