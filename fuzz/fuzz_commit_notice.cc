// Fuzz target: core/commit_notice.h, the datagrams anyone who reaches an
// engine's notice port may send (engine/notice_listener.h).
//
// Properties checked on every input:
//   - DecodeCommitNotices never throws or crashes, whatever the bytes;
//   - what it accepts is valid (type names pass IsValidTypeName) and
//     re-encodes to datagrams that decode to the same notices;
//   - an accepted datagram is never longer than kCommitNoticeDatagramMax.
#include <cstdint>
#include <string_view>

#include "core/commit_notice.h"
#include "core/names.h"
#include "fuzz/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto notices = DecodeCommitNotices(input);
  if (!notices.ok()) {
    SLUICE_FUZZ_CHECK(!notices.status().message().empty(), "a refusal without a message");
    return 0;
  }
  SLUICE_FUZZ_CHECK(input.size() <= kCommitNoticeDatagramMax, "an accepted datagram over the size limit");
  SLUICE_FUZZ_CHECK(!notices->empty(), "an accepted datagram without a notice");
  std::vector<CommitNotice> back;
  for (const CommitNotice& n : *notices) SLUICE_FUZZ_CHECK(IsValidTypeName(n.type), "an invalid type accepted");
  for (const std::string& d : EncodeCommitNotices(*notices)) {
    auto again = DecodeCommitNotices(d);
    SLUICE_FUZZ_CHECK(again.ok(), "a re-encoded datagram is refused");
    back.insert(back.end(), again->begin(), again->end());
  }
  SLUICE_FUZZ_CHECK(back == *notices, "re-encoding changed the notices");
  return 0;
}
