// The parts of the S3 protocol that need no server (private to objectstore/):
// SigV4's URI encoding of keys and query values, and the XML replies of
// ListObjectsV2 and of errors, parsed with expat. Pure functions, safe from
// any thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "objectstore/object_store.h"

namespace sluice::objectstore::s3 {

// SigV4's UriEncode: every byte but A-Z a-z 0-9 '-' '_' '.' '~' as %XX
// (upper-case hex); '/' too unless keep_slash (object paths keep it, query
// values do not). libcurl 7.88 signs the path and the query exactly as sent,
// so what we send must already be the canonical form.
std::string UriEncode(std::string_view s, bool keep_slash);

// "k1=v1&k2=v2" from the pairs sorted by name (each name and value
// UriEncoded), as SigV4's canonical query string requires.
std::string CanonicalQuery(std::vector<std::pair<std::string, std::string>> params);

// One page of a ListObjectsV2 reply. Keys are decoded when the reply says
// EncodingType url ('+' as a space, then %XX).
struct ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken
};
// kInternal when the text is not a ListBucketResult document.
Result<ListPage> ParseListObjectsV2(std::string_view xml);

// The Code and Message of an S3 <Error> document; both empty when the text
// is not one (an empty body, HTML from a proxy).
struct ErrorReply {
  std::string code;
  std::string message;
};
ErrorReply ParseErrorReply(std::string_view xml);

}  // namespace sluice::objectstore::s3
