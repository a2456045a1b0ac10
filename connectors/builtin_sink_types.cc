#include "connectors/builtin_sink_types.h"

// Generated from SLUICE_BUILTIN_SINK_TYPES in connectors/CMakeLists.txt.
#include "builtin_sink_types.inc"

namespace sluice::connectors {

const std::vector<BuiltinSinkType>& BuiltinSinkTypeList() {
  // The types registered in connectors/CMakeLists.txt; each folder provides the rest.
  static const std::vector<BuiltinSinkType> kTypes = {SLUICE_BUILTIN_SINK_TYPES};
  return kTypes;
}

const config::SinkTypes& BuiltinSinkTypes() {
  static const config::SinkTypes kTypes = [] {
    std::vector<config::SinkType> types;
    for (const BuiltinSinkType& t : BuiltinSinkTypeList()) types.push_back(t.config);
    return config::SinkTypes(std::move(types));
  }();
  return kTypes;
}

bool IsBuiltinSinkType(std::string_view type) { return BuiltinSinkTypes().Find(type) != nullptr; }

}  // namespace sluice::connectors
