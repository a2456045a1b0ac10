#include "core/json_delta.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice {
namespace {

// Adds the operations that turn object `before` into object `after`, for
// the members under `path`.
void DiffObjects(const Json& before, const Json& after, Json& path, Json& ops) {
  for (auto it = before.begin(); it != before.end(); ++it) {
    if (!after.contains(it.key())) {
      path.push_back(it.key());
      ops.push_back(Json::array({"r", path}));
      path.erase(path.size() - 1);
    }
  }
  for (auto it = after.begin(); it != after.end(); ++it) {
    const auto old = before.find(it.key());
    if (old != before.end() && SameJson(*old, *it)) continue;
    path.push_back(it.key());
    if (old != before.end() && old->is_object() && it->is_object()) {
      DiffObjects(*old, *it, path, ops);
    } else if (old != before.end() && old->is_array() && it->is_array() && old->size() < it->size() &&
               [&] {
                 for (size_t i = 0; i < old->size(); ++i) {
                   if (!SameJson((*old)[i], (*it)[i])) return false;
                 }
                 return true;
               }()) {
      ops.push_back(Json::array({"a", path, Json(it->begin() + static_cast<std::ptrdiff_t>(old->size()), it->end())}));
    } else {
      ops.push_back(Json::array({"s", path, *it}));
    }
    path.erase(path.size() - 1);
  }
}

Status Bad(size_t op, const std::string& why) {
  return InvalidArgument("delta operation " + std::to_string(op) + ": " + why);
}

}  // namespace

bool SameJson(const Json& a, const Json& b) {
  // Signed and unsigned integers are one kind of value in JSON text (a
  // parse makes every non-negative one unsigned): compared by value.
  if (a.is_number_integer() && b.is_number_integer()) {
    if (a.is_number_unsigned() == b.is_number_unsigned()) return a == b;
    const Json& u = a.is_number_unsigned() ? a : b;
    const int64_t i = (a.is_number_unsigned() ? b : a).get<int64_t>();
    return i >= 0 && static_cast<uint64_t>(i) == u.get<uint64_t>();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::value_t::object: {
      if (a.size() != b.size()) return false;
      auto ib = b.begin();
      for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
        if (ia.key() != ib.key() || !SameJson(*ia, *ib)) return false;
      }
      return true;
    }
    case Json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!SameJson(a[i], b[i])) return false;
      }
      return true;
    }
    case Json::value_t::number_float: {
      const double x = a.get<double>();
      const double y = b.get<double>();
      return x == y && std::signbit(x) == std::signbit(y);
    }
    default:
      return a == b;
  }
}

std::optional<Json> JsonDelta(const Json& before, const Json& after) {
  if (!before.is_object() || !after.is_object()) return std::nullopt;
  Json ops = Json::array();
  Json path = Json::array();
  DiffObjects(before, after, path, ops);
  return ops;
}

namespace {

// The operations of merge-patching `before` with `patch`, both objects, at `path`.
void PatchOps(const Json& before, const Json& patch, Json& path, Json& ops) {
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const auto was = before.find(it.key());
    path.push_back(it.key());
    if (it->is_null()) {
      if (was != before.end()) ops.push_back(Json::array({"r", path}));
    } else if (it->is_object() && was != before.end() && was->is_object()) {
      PatchOps(*was, *it, path, ops);
    } else if (it->is_object()) {
      // A member that is not an object becomes the patch's object without its nulls.
      Json value = Json::object();
      value.merge_patch(*it);
      ops.push_back(Json::array({"s", path, std::move(value)}));
    } else if (was == before.end() || !SameJson(*was, *it)) {
      ops.push_back(Json::array({"s", path, *it}));
    }
    path.erase(path.end() - 1);
  }
}

}  // namespace

std::optional<Json> MergePatchDelta(const Json& before, const Json& patch) {
  if (!before.is_object() || !patch.is_object()) return std::nullopt;
  Json ops = Json::array();
  Json path = Json::array();
  PatchOps(before, patch, path, ops);
  return ops;
}

Result<Json> ApplyJsonDelta(const Json& before, const Json& delta) {
  if (!before.is_object()) return InvalidArgument("a delta applies to an object only");
  if (!delta.is_array()) return InvalidArgument("a delta is a JSON array of operations");
  Json out = before;
  for (size_t n = 0; n < delta.size(); ++n) {
    const Json& op = delta[n];
    if (!op.is_array() || op.empty() || !op[0].is_string()) return Bad(n, "not an array starting with \"s\", \"r\" or \"a\"");
    const std::string& kind = op[0].get_ref<const std::string&>();
    const size_t want = kind == "r" ? 2 : 3;
    if ((kind != "s" && kind != "r" && kind != "a") || op.size() != want) {
      return Bad(n, "\"s\" and \"a\" take a path and a value, \"r\" a path");
    }
    const Json& path = op[1];
    if (!path.is_array() || path.empty()) return Bad(n, "the path is not a non-empty array of member names");
    Json* parent = &out;
    for (size_t i = 0; i < path.size(); ++i) {
      if (!path[i].is_string()) return Bad(n, "the path is not a non-empty array of member names");
      if (!parent->is_object()) return Bad(n, "the path goes through a value that is not an object");
      const std::string& name = path[i].get_ref<const std::string&>();
      if (i + 1 < path.size()) {
        const auto next = parent->find(name);
        if (next == parent->end()) return Bad(n, "the path goes through a missing member \"" + name + "\"");
        parent = &*next;
        continue;
      }
      if (kind == "s") {
        (*parent)[name] = op[2];
      } else if (kind == "r") {
        if (parent->erase(name) == 0) return Bad(n, "removes a missing member \"" + name + "\"");
      } else {
        const auto target = parent->find(name);
        if (target == parent->end() || !target->is_array() || !op[2].is_array()) {
          return Bad(n, "appends to something that is not an array, or not an array of elements");
        }
        for (const Json& element : op[2]) target->push_back(element);
      }
    }
  }
  return out;
}

}  // namespace sluice
