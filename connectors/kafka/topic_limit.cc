#include "connectors/kafka/topic_limit.h"

#include "connectors/kafka/kafka_client.h"
#include "core/failpoint.h"
#include "core/log.h"

namespace sluice::connectors::kafka {

TopicLimit::TopicLimit(const std::string& sink, std::string topic, int64_t producer_limit, Reader read,
                       size_t max_remembered)
    : context_("sink '" + sink + "'"),
      where_(context_ + ": "),
      topic_(std::move(topic)),
      producer_limit_(producer_limit),
      read_(std::move(read)),
      max_remembered_(max_remembered) {}

Status TopicLimit::Read(rd_kafka_t* rk, std::chrono::milliseconds timeout) {
  // The failpoint stands for a client without the right to read the limit.
  auto limit = SLUICE_FAILPOINT("kafka.sink.describe_configs")
                   ? Result<int64_t>(FailedPrecondition("failpoint kafka.sink.describe_configs"))
                   : read_(rk, topic_, timeout);
  if (limit.ok()) {
    limit_ = *limit - kRecordBatchOverhead;
    return Status::Ok();
  }
  if (limit.status().code() == StatusCode::kUnavailable) return limit.status().WithContext(context_);
  if (!unreadable_warned_) {
    Log(LogLevel::kWarn, where_ + "cannot read the topic's max.message.bytes (" + limit.status().message() +
                             "); records are held to the producer's message.max.bytes only");
    unreadable_warned_ = true;
  }
  limit_ = -1;
  return Status::Ok();
}

Status TopicLimit::RefusalStands(rd_kafka_t* rk, std::chrono::milliseconds timeout) {
  if (!Held() || checked_) return Status::Ok();
  checked_ = true;
  auto now = read_(rk, topic_, timeout);
  if (now.ok() && *now - kRecordBatchOverhead > limit_) {
    return Unavailable(where_ + "the max.message.bytes of topic " + topic_ + " was raised to " +
                       std::to_string(*now) + " since the sink opened; it opens again to follow it");
  }
  if (!now.ok() && now.status().code() == StatusCode::kUnavailable) {
    return now.status().WithContext(context_);
  }
  return Status::Ok();
}

std::string TopicLimit::TooLarge(rd_kafka_resp_err_t err) const {
  return std::string("the record is too large for ") +
         (Held() ? "topic " + topic_ + " (max.message.bytes " + std::to_string(limit_ + kRecordBatchOverhead) + ")"
                 : std::string("the producer (message.max.bytes)")) +
         ": " + rd_kafka_err2str(err);
}

bool TopicLimit::RefusedForGood(const RecordKey& key, rd_kafka_resp_err_t err) {
  if (err != RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && err != RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE) return true;
  if (first_refused_.erase(key) != 0) return true;
  if (first_refused_.size() >= max_remembered_) {  // bounded: past it, the first refusal is final
    if (!full_warned_) {
      Log(LogLevel::kWarn, where_ + std::to_string(max_remembered_) +
                               " records wait for a second try after a size refusal: further ones are refused at once");
      full_warned_ = true;
    }
    return true;
  }
  first_refused_.insert(key);
  return false;
}

}  // namespace sluice::connectors::kafka
