// The S3 store (private to objectstore/): objects in a bucket of an
// S3-compatible server, "s3://bucket[/prefix]", through libcurl with its
// built-in AWS SigV4 signing (CURLOPT_AWS_SIGV4). A key "a/b.seg" is the
// object "prefix/a/b.seg". Every request carries x-amz-content-sha256, the
// SHA-256 of its body, which libcurl 7.88 signs but does not compute.
// Thread-safe: each call borrows a libcurl handle from a mutex-guarded pool
// (which keeps connections alive between calls) and returns it after.
#pragma once

#include <memory>

#include "core/status.h"
#include "objectstore/object_store.h"

namespace sluice::objectstore {

// Checks the s3 options (bucket name, endpoint form, region, credentials
// present, tls_ca readable, timeout) and builds the store; no network.
Result<std::unique_ptr<ObjectStore>> OpenS3Store(const ObjectStoreOptions& options);

}  // namespace sluice::objectstore
