// TLS to a server a sink connects to: the keys tls_ca, tls_cert, tls_key and
// tls_verify, shared by the redis, elasticsearch and kafka sink types
// (docs/security.md). storage.mysql has its own, MySQL's ssl_mode keys.
//
// Threads: as the rest of config/, on the loading thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/sink_type.h"

namespace sluice::config {

struct TlsClientOptions {
  std::string ca;    // PEM CA certificates to trust; empty: the system's trusted CAs
  std::string cert;  // a client certificate (mutual TLS), with key
  std::string key;   // its private key
  // kIdentity: the certificate chains to a trusted CA and was issued to the
  // host connected to. kCa: the chain only, any host name; an opt-out that
  // each process logs as a WARNING at start (TlsWarning).
  enum class Verify { kIdentity, kCa } verify = Verify::kIdentity;
};

// One sink's TLS keys while it is read: Add() puts the four keys in the
// sink type's key table, reading into the options `target` returns (called
// only when a key is read, as SinkType::read requires); Check() runs from
// the sink type's Check().
class TlsKeysRead {
 public:
  TlsKeysRead(SinkOptionReader& reader, std::function<TlsClientOptions*()> target)
      : r_(reader), target_(std::move(target)) {}

  void Add(std::vector<SinkOptionKey>& keys);
  // A certificate needs its key and a key its certificate. When !tls_on, each
  // TLS key given is reported as "only with <tls_on_means>" (e.g. "a
  // rediss:// url").
  void Check(bool tls_on, std::string_view tls_on_means);

 private:
  SinkOptionReader& r_;
  std::function<TlsClientOptions*()> target_;
  std::vector<std::shared_ptr<const Field>> given_;
  std::shared_ptr<const Field> cert_, key_;
};

// Prints the keys that differ from the defaults.
void PrintTls(const TlsClientOptions& tls, SinkOptionPrinter& out);

// The WARNING a process logs at start for a weak setting of `what` (e.g.
// "sink 'cache'"), or "" when there is none.
std::string TlsWarning(std::string_view what, const TlsClientOptions& tls);

}  // namespace sluice::config
