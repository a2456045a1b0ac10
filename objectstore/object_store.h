// ObjectStore: where the archive keeps its segment files, a local directory
// ("file:///abs/dir") or an S3-compatible bucket ("s3://bucket[/prefix]").
//
// Lifecycle: OpenObjectStore checks the options and builds a store without
// touching the disk's contents or the network; CheckObjectStore then proves it
// usable (at start-up, to fail fast). The caller owns the store.
// Thread-safety: every method may be called from several threads at once
// (the S3 store keeps a mutex-guarded pool of libcurl handles; the file store
// keeps no state besides its directory).
// Errors, the same for both stores (core/status.h):
//   kInvalidArgument    a bad key (CheckObjectKey) or bad options
//   kNotFound           Get of a key that holds no object
//   kUnavailable        network failure, timeout, HTTP 5xx or 503 SlowDown,
//                       an I/O error: retry the call later, with backoff
//   kPermissionDenied   HTTP 403 (S3's Code and Message in the text), or a
//                       directory the process may not write
//   kFailedPrecondition the bucket or the directory does not exist, a TLS
//                       certificate is refused: fix the configuration
//   kResourceExhausted  the disk is full
// No message, log line or Describe() ever holds the access key id or the
// secret key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sluice::objectstore {

// One object of a listing: its key (relative to the store's root or prefix)
// and its size in bytes.
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

// How to reach a store. Only `url` matters for a file store.
struct ObjectStoreOptions {
  std::string url;          // "file:///absolute/dir" or "s3://bucket" or "s3://bucket/prefix"
  std::string endpoint;     // s3 only: "http://127.0.0.1:PORT" or "https://..."; empty: https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  std::string access_key;   // secret: never in any message or log
  std::string secret_key;   // secret: never in any message or log
  bool path_style = true;   // https://endpoint/bucket/key rather than https://bucket.endpoint/key
  std::string tls_ca;       // PEM file; empty: system CAs
  bool tls_verify = true;
  // S3: the connection must be made within it, and a request that moves no
  // byte for this long (rounded up to whole seconds) is abandoned
  // (kUnavailable). A slow but moving transfer of a large object goes on.
  int timeout_ms = 30000;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // Stores bytes under key (keys are '/'-separated relative names like "segments/orders/p003/00000000000000000001-00000000000000001000.seg"), replacing any object there. A reader sees the old or the new object whole, never a part (file store: temp file + fsync + rename + fsync of the directory).
  virtual Status Put(const std::string& key, std::string_view bytes) = 0;
  // The whole object; NotFound when there is none.
  virtual Result<std::string> Get(const std::string& key) = 0;
  // Every object whose key starts with prefix, sorted by key (S3: ListObjectsV2 with continuation, any count).
  // An empty prefix lists the whole store. The prefix follows the key rules
  // except that it may be empty or end with '/'.
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
  // Removes the object; ok when it is absent.
  virtual Status Delete(const std::string& key) = 0;
  // The url, for messages and `sluice archive status`; never a secret.
  virtual std::string Describe() const = 0;
  // What CheckObjectStore runs: proves the store reachable and usable now.
  // The default (for stores with nothing to check, such as a test's fake)
  // is ok.
  virtual Status Check() { return Status::Ok(); }
};

// Checks the options (a clear kInvalidArgument naming what is wrong) and opens the store; does not touch the network.
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const ObjectStoreOptions& options);
// Checks the store is reachable and usable now (S3: the bucket exists and the credentials are accepted; file: the directory exists and is writable). Used at start-up to fail fast.
Status CheckObjectStore(ObjectStore& store);

// The key rule both stores apply: ok, or kInvalidArgument saying why. A key
// is refused when it is empty, absolute (starts with '/'), ends with '/',
// contains "..", "//", a NUL or a backslash, has a segment "." or a segment
// starting with ".sluice-tmp" (the file store's temporary files).
Status CheckObjectKey(std::string_view key);
// The rule for List's prefix: as CheckObjectKey, but empty and a trailing '/'
// are allowed.
Status CheckObjectPrefix(std::string_view prefix);

}  // namespace sluice::objectstore
