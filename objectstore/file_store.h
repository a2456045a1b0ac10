// The file store (private to objectstore/): objects as files under one
// directory, "file:///abs/dir". A key "a/b/c.seg" is the file dir/a/b/c.seg;
// Put creates the subdirectories it needs (never the directory itself, so
// that an unmounted volume is an error rather than a write to the root
// filesystem), writes a temporary file ".sluice-tmp-XXXXXX" beside the
// target, fsyncs it, renames it over the target and fsyncs the directory.
// Delete leaves empty subdirectories in place. Stateless besides the
// directory's path: safe from any number of threads.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "objectstore/object_store.h"

namespace sluice::objectstore {

// Parses "file:///absolute/dir" (a trailing '/' is dropped) and builds the
// store; kInvalidArgument for any other form. Touches nothing on disk.
Result<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url);

}  // namespace sluice::objectstore
