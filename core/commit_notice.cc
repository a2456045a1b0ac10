#include "core/commit_notice.h"

#include <charconv>

#include "core/names.h"

namespace sluice {
namespace {

constexpr std::string_view kHeader = "sluice-commits 1\n";

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::vector<std::string> EncodeCommitNotices(const std::vector<CommitNotice>& notices) {
  std::vector<std::string> out;
  std::string datagram;
  for (const CommitNotice& n : notices) {
    std::string line = n.type + ' ' + std::to_string(n.partition) + ' ' + std::to_string(n.head) + '\n';
    if (kHeader.size() + line.size() > kCommitNoticeDatagramMax) continue;
    if (!datagram.empty() && datagram.size() + line.size() > kCommitNoticeDatagramMax) {
      out.push_back(std::move(datagram));
      datagram.clear();
    }
    if (datagram.empty()) datagram = kHeader;
    datagram += line;
  }
  if (!datagram.empty()) out.push_back(std::move(datagram));
  return out;
}

Result<std::vector<CommitNotice>> DecodeCommitNotices(std::string_view d) {
  if (d.size() > kCommitNoticeDatagramMax) return InvalidArgument("a commit notice datagram is at most 1400 bytes");
  if (!d.starts_with(kHeader)) return InvalidArgument("not a commit notice datagram (header)");
  d.remove_prefix(kHeader.size());
  std::vector<CommitNotice> out;
  while (!d.empty()) {
    const size_t eol = d.find('\n');
    if (eol == std::string_view::npos) return InvalidArgument("a commit notice line does not end");
    const std::string_view line = d.substr(0, eol);
    d.remove_prefix(eol + 1);
    const size_t a = line.find(' ');
    const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
    if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos) {
      return InvalidArgument("a commit notice line is not `type partition head`");
    }
    CommitNotice n;
    n.type = std::string(line.substr(0, a));
    if (!IsValidTypeName(n.type)) return InvalidArgument("a commit notice names an invalid entity type");
    if (!ParseNumber(line.substr(a + 1, b - a - 1), &n.partition) || !ParseNumber(line.substr(b + 1), &n.head)) {
      return InvalidArgument("a commit notice has an invalid partition or head");
    }
    out.push_back(std::move(n));
  }
  if (out.empty()) return InvalidArgument("a commit notice datagram without a notice");
  return out;
}

}  // namespace sluice
