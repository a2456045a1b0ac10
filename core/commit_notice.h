// Commit notices: what a writer tells the sync engines after each commit
// (engine/head_watcher.h), as one UDP datagram of text:
//
//   sluice-commits 1\n
//   <entity type> <partition> <head event_id>\n     (one line per partition)
//
// A notice only makes an engine read a partition sooner; a forged or lost
// one changes nothing an engine applies (it still reads the events from
// MySQL, and looks at every head as the fallback). Decoding is strict:
// anything else is refused whole. Pure functions, fuzzed
// (fuzz/commit_notice_fuzz.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sluice {

struct CommitNotice {
  std::string type;
  uint32_t partition = 0;
  uint64_t head = 0;
  bool operator==(const CommitNotice&) const = default;
};

// The largest datagram a writer sends (fits an Ethernet MTU with the headers).
constexpr size_t kCommitNoticeDatagramMax = 1400;

// Packs the notices into datagrams of at most kCommitNoticeDatagramMax
// bytes each (a notice whose line alone would not fit is skipped).
std::vector<std::string> EncodeCommitNotices(const std::vector<CommitNotice>& notices);
// The notices of one datagram, or why it is not one.
Result<std::vector<CommitNotice>> DecodeCommitNotices(std::string_view datagram);

}  // namespace sluice
