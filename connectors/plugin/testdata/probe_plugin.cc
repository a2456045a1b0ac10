// A plugin that reports back what it received, built three times against
// three versions of the headers (../CMakeLists.txt), to check that apply()'s
// arrays cross the ABI intact whichever side's structs are bigger:
//
//   test_plugin_probe       include/sluice (ABI 1.3), type "probe"
//   test_plugin_probe_old   abi_1_1/sluice, the headers of ABI 1.1, type "probe_old"
//   test_plugin_probe_next  abi_next/sluice/plugin.h (a future 1.4 whose
//                           structs have more trailing fields) with today's
//                           SDK, type "probe_next"
//
// apply(): an entity id starting with 'r' is rejected with every field of
// its event as the reason (ProbeText), 's' is stale, anything else applied
// (and listed by scan). The next build also checks that the fields the host
// does not know arrive zeroed and fills its results' extra field with a
// pattern a host walking with the wrong stride would read as an outcome.
#include <sluice/plugin_sdk.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <string>

namespace {

using sluice::plugin_sdk::Event;
using sluice::plugin_sdk::EventResult;
using sluice::plugin_sdk::Outcome;
using sluice::plugin_sdk::Status;

// Every field of an event as text; plugin_host_test builds the same.
std::string ProbeText(const Event& e) {
  return "type=" + std::string(e.entity_type) + "|p=" + std::to_string(e.partition) +
         "|id=" + std::to_string(e.event_id) + "|entity=" + std::string(e.entity_id) +
         "|v=" + std::to_string(e.version) + "|del=" + (e.deleted ? "1" : "0") + "|state=" + std::string(e.state) +
         "|cmd=" + std::string(e.command_name) + "|cmd_id=" + std::string(e.command_id) +
         "|at=" + std::to_string(e.committed_at_us)
#if SLUICE_PLUGIN_ABI_MINOR >= 3
         + "|req=" + std::string(e.request) + "|resp=" + std::string(e.response) + "|before=" + std::string(e.before)
#endif
      ;
}

// The probe asks for the whole event where its headers have it (ABI 1.3).
#if SLUICE_PLUGIN_ABI_MINOR >= 3
constexpr uint32_t kProbeCaps = SLUICE_CAP_POINT_VIEW | SLUICE_CAP_FULL_EVENTS;
#else
constexpr uint32_t kProbeCaps = SLUICE_CAP_POINT_VIEW;
#endif

class Probe : public sluice::plugin_sdk::Sink {
 public:
  Status Configure(const sluice::plugin_sdk::SinkContext&) override { return Status::Ok(); }
  Status Open() override { return Status::Ok(); }
  Status Apply(std::span<const Event> events, std::span<EventResult> results) override {
    for (size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i];
      if (e.entity_id.starts_with("r")) {
        results[i] = {Outcome::kRejected, ProbeText(e)};
      } else if (e.entity_id.starts_with("s")) {
        results[i].outcome = Outcome::kStale;
      } else {
        rows_[std::string(e.entity_id)] = {e.version, std::string(e.state)};
      }
    }
    return Status::Ok();
  }
  Status Scan(const sluice::plugin_sdk::RowCallback& each) override {
    for (const auto& [id, row] : rows_) {
      if (!each({id, row.first, false, row.second})) break;
    }
    return Status::Ok();
  }

 private:
  std::map<std::string, std::pair<uint64_t, std::string>> rows_;
};

#ifdef PROBE_NEXT_ABI
// The host knows sluice_event up to committed_at_us: it fills that much and
// zeroes the fields this newer header adds.
constexpr size_t kHostEventBytes = offsetof(sluice_event, trace_context);
constexpr uint64_t kPattern = 0x0101010101010101ull;  // outcome 0x01010101 if misread
std::string next_error;

int CheckedApply(void* sink, const sluice_event* events, size_t count, sluice_event_result* results) {
  for (size_t i = 0; i < count; ++i) {
    const sluice_event& e = events[i];
    if (e.struct_size != kHostEventBytes || e.trace_context.data != nullptr || e.trace_context.size != 0 ||
        e.hops != 0) {
      next_error = "event " + std::to_string(i) + ": struct_size " + std::to_string(e.struct_size) +
                   " (expected " + std::to_string(kHostEventBytes) + ") or a field the host does not know is not zero";
      return SLUICE_INTERNAL;
    }
  }
  const int rc = sluice::plugin_sdk::internal::Adapter<Probe>::Apply(sink, events, count, results);
  for (size_t i = 0; i < count; ++i) results[i].bytes_written = kPattern;
  return rc;
}

const char* CheckedLastError(void* sink) {
  return next_error.empty() ? sluice::plugin_sdk::internal::Adapter<Probe>::LastError(sink) : next_error.c_str();
}

sluice_sink_type NextType() {
  sluice_sink_type t = sluice::plugin_sdk::SinkType<Probe>(PROBE_TYPE, kProbeCaps);
  t.apply = &CheckedApply;
  t.last_error = &CheckedLastError;
  return t;
}
#endif

}  // namespace

#ifdef PROBE_NEXT_ABI
SLUICE_PLUGIN("probe_next", "1.0.0", NextType())
#else
SLUICE_PLUGIN("probe", "1.0.0", sluice::plugin_sdk::SinkType<Probe>(PROBE_TYPE, kProbeCaps))
#endif
