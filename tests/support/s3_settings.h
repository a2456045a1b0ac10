// The S3 test server's settings (SeaweedFS from `scripts/services up s3`;
// SLUICE_TEST_S3_* in .local/env, else scripts/services' defaults). Header
// only, so that a test needing nothing but the S3 server need not link the
// rest of tests/support.
#pragma once

#include <cstdlib>
#include <string>

#include "objectstore/object_store.h"

namespace sluice::testing {

// The store options for the test bucket, under `prefix` when not empty.
inline objectstore::ObjectStoreOptions S3TestOptions(const std::string& prefix = "") {
  const auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : fallback);
  };
  objectstore::ObjectStoreOptions o;
  o.url = "s3://" + env("SLUICE_TEST_S3_BUCKET", "sluice-test") + (prefix.empty() ? "" : "/" + prefix);
  o.endpoint = env("SLUICE_TEST_S3_ENDPOINT", "http://127.0.0.1:18333");
  o.region = env("SLUICE_TEST_S3_REGION", "us-east-1");
  o.access_key = env("SLUICE_TEST_S3_ACCESS_KEY", "SLUICETESTACCESSKEY01");
  o.secret_key = env("SLUICE_TEST_S3_SECRET_KEY", "sluice-test-secret-key-0123456789");
  o.timeout_ms = 10000;
  return o;
}

}  // namespace sluice::testing
