#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"
#include "connectors/sink.h"
#include "connectors/view_code.h"
#include "connectors/view_sink.h"

namespace sluice::connectors {

namespace {

Result<std::unique_ptr<Sink>> MakeBareSink(const config::SinkConfig& sink, const config::Config& global) {
  for (const BuiltinSinkType& t : BuiltinSinkTypeList()) {
    if (t.config.name == sink.type) return t.make(sink, global);
  }
  // Any other type is a plugin's (config accepts it only when plugins are listed).
  return plugin::MakePluginSink(sink, global);
}

}  // namespace

Status CheckViewCode(const config::Config& config) {
  std::string problems;
  for (const config::SinkConfig& sink : config.sinks) {
    if (sink.code.empty()) continue;
    bool aggregate = false;
    for (const BuiltinSinkType& t : BuiltinSinkTypeList()) {
      if (t.config.name == sink.type) aggregate = t.config.runs_code;
    }
    auto code = ViewCode::LoadFor(sink, aggregate ? ViewCode::Purpose::kAggregate : ViewCode::Purpose::kShape);
    if (!code.ok()) problems += code.status().message() + "\n";
  }
  if (problems.empty()) return Status::Ok();
  problems.pop_back();
  return InvalidArgument(problems);
}

Result<std::unique_ptr<Sink>> MakeSink(const config::SinkConfig& sink, const config::Config& global) {
  ASSIGN_OR_RETURN(auto made, MakeBareSink(sink, global));
  if (sink.code.empty()) return made;
  for (const BuiltinSinkType& t : BuiltinSinkTypeList()) {
    if (t.config.name == sink.type && t.config.runs_code) return made;  // it runs its code itself
  }
  return ViewSink::Wrap(sink, std::move(made));
}

}  // namespace sluice::connectors
