// How long a crashed engine's partitions wait (issue 21, item 6): two
// `sluice sync` engines share the sinks; one is killed with SIGKILL and the
// time is taken until every partition it held has a live lease of the
// survivor (sluice_leases, polled every 10 ms); then it is restarted under
// the same name and the two settle again, the victim alternating. The
// figure to read against: engine.lease_ttl.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "core/status.h"

namespace sluice::bench {

struct TakeoverOptions {
  std::string sluice_binary;
  std::string config_path;
  std::string log_path;
  uint32_t kills = 20;
  double timeout_seconds = 120;  // per takeover and per settling
};

struct TakeoverResult {
  std::vector<uint64_t> takeover_ns;  // one per kill
  uint64_t partitions_moved = 0;      // summed over the kills
  double settle_seconds = 0;          // mean time for a restarted engine to get its share back
};

Result<TakeoverResult> RunTakeovers(const config::Config& config, const TakeoverOptions& options);

}  // namespace sluice::bench
