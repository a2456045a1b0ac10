#include "connectors/kafka/topic_readback.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "connectors/kafka/kafka_client.h"

namespace sluice::connectors::kafka {
namespace {

constexpr int64_t kFirstWindow = 256;
constexpr int64_t kLargestWindow = int64_t{1} << 22;

// Reads [w.low, w.high) of topic partition tp backwards, window by window:
// `each` gets a window's records in order, then `found` says whether to stop.
Status ReadBackwards(rd_kafka_t* reader, const std::string& topic, int32_t tp, const Watermarks& w,
                     const std::function<void(const rd_kafka_message_t&)>& each, const std::function<bool()>& found,
                     std::chrono::milliseconds timeout) {
  int64_t end = w.high;
  int64_t window = kFirstWindow;
  while (end > w.low) {
    const int64_t start = std::max(w.low, end - window);
    RETURN_IF_ERROR(ReadPartition(reader, topic, tp, start, end, each, timeout));
    if (found()) break;
    end = start;
    window = std::min(window * 4, kLargestWindow);
  }
  return Status::Ok();
}

}  // namespace

std::optional<std::pair<uint32_t, uint64_t>> SourcePosition(const rd_kafka_message_t& m) {
  const auto p = HeaderValue(m, kHeaderPartition);
  const auto e = HeaderValue(m, kHeaderEventId);
  if (!p || !e) return std::nullopt;
  const std::optional<uint64_t> pv = ParseDecimalHeader(*p);
  const std::optional<uint64_t> ev = ParseDecimalHeader(*e);
  if (!pv.has_value() || !ev.has_value() || pv.value() > UINT32_MAX) return std::nullopt;
  return std::make_pair(static_cast<uint32_t>(pv.value()), ev.value());
}

Result<std::optional<uint64_t>> LastEventOf(rd_kafka_t* ends, rd_kafka_t* reader, const std::string& topic,
                                            int32_t tp, uint32_t p, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(Watermarks w, QueryWatermarks(ends, topic, tp, timeout));
  std::optional<uint64_t> found;
  RETURN_IF_ERROR(ReadBackwards(
      reader, topic, tp, w,
      [&](const rd_kafka_message_t& m) {
        if (const auto at = SourcePosition(m); at && at->first == p) found = std::max(found.value_or(0), at->second);
        if (const auto pos = HeaderValue(m, kHeaderPositions)) {
          if (const auto decoded = DecodePositions(*pos); decoded && decoded->count(p) != 0) {
            found = std::max(found.value_or(0), decoded->at(p));
          }
        }
      },
      [&] { return found.has_value(); }, timeout));
  return found;
}

Result<Positions> PositionsOf(rd_kafka_t* consumer, const std::string& topic, int32_t tp,
                              std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(Watermarks w, QueryWatermarks(consumer, topic, tp, timeout));
  struct Seen {
    std::optional<std::pair<uint32_t, uint64_t>> event;
    std::optional<Positions> positions;
  };
  std::vector<Seen> seen;  // the window's records that are the sink's
  Positions found;
  bool anchored = false;  // a sluice-positions header was found
  RETURN_IF_ERROR(ReadBackwards(
      consumer, topic, tp, w,
      [&](const rd_kafka_message_t& m) {
        Seen s;
        s.event = SourcePosition(m);
        if (const auto pos = HeaderValue(m, kHeaderPositions)) s.positions = DecodePositions(*pos);
        if (s.event || s.positions) seen.push_back(std::move(s));
      },
      [&] {
        // From the window's last record back to its last positions header.
        for (auto it = seen.rbegin(); it != seen.rend() && !anchored; ++it) {
          if (it->event) {
            uint64_t& f = found[it->event->first];
            f = std::max(f, it->event->second);
          }
          if (it->positions) {
            for (const auto& [p, e] : *it->positions) found[p] = std::max(found[p], e);
            anchored = true;
          }
        }
        seen.clear();
        return anchored;
      },
      timeout));
  return found;
}

}  // namespace sluice::connectors::kafka
