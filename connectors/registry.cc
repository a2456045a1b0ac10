#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"
#include "connectors/sink.h"
#include "connectors/view_code.h"
#include "connectors/view_sink.h"

namespace sluice::connectors {

namespace {

const BuiltinSinkType* FindBuiltin(std::string_view type) {
  for (const BuiltinSinkType& t : BuiltinSinkTypeList()) {
    if (t.config.name == type) return &t;
  }
  return nullptr;
}

Result<std::unique_ptr<Sink>> MakeBareSink(const config::SinkConfig& sink, const config::Config& global) {
  if (const BuiltinSinkType* t = FindBuiltin(sink.type)) return t->make(sink, global);
  // Any other type is a plugin's (config accepts it only when plugins are listed).
  return plugin::MakePluginSink(sink, global);
}

}  // namespace

Status CheckViewCode(const config::Config& config) {
  std::string problems;
  for (const config::SinkConfig& sink : config.sinks) {
    if (sink.code.empty()) continue;
    const BuiltinSinkType* type = FindBuiltin(sink.type);
    const bool aggregate = type != nullptr && type->config.runs_code;
    auto code = ViewCode::LoadFor(sink, aggregate ? ViewCode::Purpose::kAggregate : ViewCode::Purpose::kShape);
    Status st = code.ok() ? Status::Ok() : code.status();
    if (st.ok() && !aggregate) st = ViewSink::CheckRoutes(sink, type ? type->config.routes_to : "", **code);
    if (!st.ok()) problems += st.message() + "\n";
  }
  if (problems.empty()) return Status::Ok();
  problems.pop_back();
  return InvalidArgument(problems);
}

Result<std::unique_ptr<Sink>> MakeSink(const config::SinkConfig& sink, const config::Config& global) {
  ASSIGN_OR_RETURN(auto made, MakeBareSink(sink, global));
  if (sink.code.empty()) return made;
  const BuiltinSinkType* type = FindBuiltin(sink.type);
  if (type != nullptr && type->config.runs_code) return made;  // it runs its code itself
  if (type == nullptr || type->config.routes_to.empty()) return ViewSink::Wrap(sink, std::move(made));
  // One sink of the type per route, pointed at its topic or index.
  std::vector<ViewSink::Destination> destinations;
  destinations.push_back({type->config.destination(sink), std::move(made)});
  for (const std::string& route : sink.routes) {
    if (route == destinations.front().name) continue;
    config::SinkConfig routed = sink;
    type->config.route_to(&routed, route);
    ASSIGN_OR_RETURN(auto s, MakeBareSink(routed, global));
    destinations.push_back({route, std::move(s)});
  }
  return ViewSink::Wrap(sink, type->config.routes_to, std::move(destinations));
}

}  // namespace sluice::connectors
