#include "objectstore/s3_protocol.h"

#include <expat.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/percent_decode.h"

namespace sluice::objectstore::s3 {
namespace {

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

// The text of the elements a reply is read for, by their path from the
// document element ("ListBucketResult/Contents/Key"). Expat hands character
// data in pieces; they are joined per element.
struct XmlCollector {
  std::vector<std::string> path;
  std::string text;
  // Called at the end of each element with its path and its whole text.
  std::function<void(const std::string& path, std::string text)> on_end;
  std::string Path() const {
    std::string p;
    for (const std::string& s : path) {
      if (!p.empty()) p += '/';
      p += s;
    }
    return p;
  }
};

void XMLCALL StartElement(void* data, const XML_Char* name, const XML_Char** /*attrs*/) {
  auto* c = static_cast<XmlCollector*>(data);
  c->path.emplace_back(name);
  c->text.clear();
}

void XMLCALL EndElement(void* data, const XML_Char* /*name*/) {
  auto* c = static_cast<XmlCollector*>(data);
  c->on_end(c->Path(), std::move(c->text));
  c->text.clear();
  c->path.pop_back();
}

void XMLCALL CharacterData(void* data, const XML_Char* s, int len) {
  static_cast<XmlCollector*>(data)->text.append(s, static_cast<size_t>(len));
}

// Parses the document; the root element's name, or nullopt when it is not
// well-formed XML.
std::optional<std::string> ParseXml(std::string_view xml, XmlCollector* collector) {
  std::unique_ptr<std::remove_pointer_t<XML_Parser>, decltype(&XML_ParserFree)> parser(XML_ParserCreate("UTF-8"),
                                                                                        &XML_ParserFree);
  if (!parser) return std::nullopt;
  std::string root;
  auto on_end = std::move(collector->on_end);
  collector->on_end = [&](const std::string& path, std::string text) {
    if (collector->path.size() == 1) root = collector->path.front();
    on_end(path, std::move(text));
  };
  XML_SetUserData(parser.get(), collector);
  XML_SetElementHandler(parser.get(), StartElement, EndElement);
  XML_SetCharacterDataHandler(parser.get(), CharacterData);
  constexpr size_t kChunk = 1 << 20;
  size_t off = 0;
  do {
    size_t n = std::min(kChunk, xml.size() - off);
    bool last = off + n == xml.size();
    if (XML_Parse(parser.get(), xml.data() + off, static_cast<int>(n), last ? 1 : 0) != XML_STATUS_OK) {
      return std::nullopt;
    }
    off += n;
  } while (off < xml.size());
  if (root.empty()) return std::nullopt;
  return root;
}

// ListObjectsV2 with encoding-type=url: '+' stands for a space, %XX for a byte.
std::optional<std::string> UrlDecodeKey(std::string_view s) {
  std::string plus(s);
  std::replace(plus.begin(), plus.end(), '+', ' ');
  return PercentDecode(plus);
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  for (unsigned char c : s) {
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0x0f];
    }
  }
  return out;
}

std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [name, value] : params) {
    name = UriEncode(name, false);
    value = UriEncode(value, false);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

Result<ListPage> ParseListObjectsV2(std::string_view xml) {
  ListPage page;
  bool url_encoded = false;
  ObjectInfo current;
  bool bad_size = false;
  XmlCollector c;
  c.on_end = [&](const std::string& path, std::string text) {
    if (path == "ListBucketResult/Contents/Key") {
      current.key = std::move(text);
    } else if (path == "ListBucketResult/Contents/Size") {
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), current.size);
      if (ec != std::errc() || p != text.data() + text.size()) bad_size = true;
    } else if (path == "ListBucketResult/Contents") {
      page.objects.push_back(std::move(current));
      current = ObjectInfo{};
    } else if (path == "ListBucketResult/IsTruncated") {
      page.truncated = text == "true";
    } else if (path == "ListBucketResult/NextContinuationToken") {
      page.next_token = std::move(text);
    } else if (path == "ListBucketResult/EncodingType") {
      url_encoded = text == "url";
    }
  };
  std::optional<std::string> root = ParseXml(xml, &c);
  if (!root) return Internal("the ListObjectsV2 reply is not well-formed XML");
  if (*root != "ListBucketResult") return Internal("the ListObjectsV2 reply is a <" + *root + ">, not a <ListBucketResult>");
  if (bad_size) return Internal("the ListObjectsV2 reply has a <Size> that is not a number");
  if (url_encoded) {
    for (ObjectInfo& o : page.objects) {
      std::optional<std::string> key = UrlDecodeKey(o.key);
      if (!key) return Internal("the ListObjectsV2 reply has a badly url-encoded key");
      o.key = std::move(*key);
    }
  }
  return page;
}

ErrorReply ParseErrorReply(std::string_view xml) {
  ErrorReply reply;
  XmlCollector c;
  c.on_end = [&](const std::string& path, std::string text) {
    if (path == "Error/Code") {
      reply.code = std::move(text);
    } else if (path == "Error/Message") {
      reply.message = std::move(text);
    }
  };
  std::optional<std::string> root = ParseXml(xml, &c);
  if (!root || *root != "Error") return {};
  return reply;
}

}  // namespace sluice::objectstore::s3
