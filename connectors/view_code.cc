#include "connectors/view_code.h"

#include <array>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/json.h"

namespace sluice::connectors {
namespace {

// "2026-11-26T10:37:48.123456Z". The seconds' text is kept per thread: the
// events of a batch mostly share their second.
std::string IsoUtc(int64_t us) {
  thread_local int64_t last_second = -1;
  thread_local std::string last_text;
  const int64_t second = us >= 0 ? us / 1000000 : (us - 999999) / 1000000;
  if (second != last_second) {
    const std::time_t t = static_cast<std::time_t>(second);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    last_text.assign(buf, std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm));
    last_second = second;
  }
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%06lldZ", static_cast<long long>(us - second * 1000000));
  return last_text + frac;
}

void AppendJsonOrNull(std::string& out, const std::string& json) { out += json.empty() ? "null" : json; }

void AppendKey(std::string& out, std::string_view key) {
  out += out.size() == 1 ? "\"" : ",\"";
  out += key;
  out += "\":";
}

bool IsObjectText(std::string_view json) {
  const size_t at = json.find_first_not_of(" \t\r\n");
  return at != std::string_view::npos && json[at] == '{';
}

std::string Shorten(const std::string& json) { return json.size() > 60 ? json.substr(0, 60) + "..." : json; }

// The function Load adds that calls filter() and returns its truth.
constexpr std::string_view kFilterTruth = "sluice_filter_truth";

// The event's JSON object; with `lazy`, without request, response and
// before, which CallJsonLazy adds (LazyMembers).
std::string EventObject(const ChangeEvent& e, bool lazy) {
  std::string out;
  out.reserve(256 + e.state.size() + e.before.size() + e.request.size() + e.response.size());
  out += '{';
  AppendKey(out, "type");
  AppendJsonString(out, e.entity_type);
  AppendKey(out, "id");
  AppendJsonString(out, e.entity_id);
  AppendKey(out, "version");
  out += std::to_string(e.version);
  AppendKey(out, "event_id");
  out += std::to_string(e.event_id);
  AppendKey(out, "partition");
  out += std::to_string(e.partition);
  AppendKey(out, "command");
  AppendJsonString(out, e.command_name);
  AppendKey(out, "command_id");
  AppendJsonString(out, e.command_id);
  if (!lazy) {
    AppendKey(out, "request");
    AppendJsonOrNull(out, e.request);
    AppendKey(out, "response");
    AppendJsonOrNull(out, e.response);
  }
  AppendKey(out, "state");
  AppendJsonOrNull(out, e.deleted ? std::string() : e.state);
  if (!lazy) {
    AppendKey(out, "before");
    AppendJsonOrNull(out, e.before);
  }
  AppendKey(out, "deleted");
  out += e.deleted ? "true" : "false";
  AppendKey(out, "committed_at");
  AppendJsonString(out, IsoUtc(e.committed_at_us));
  AppendKey(out, "committed_at_ms");
  out += std::to_string(e.committed_at_us / 1000);
  out += '}';
  return out;
}

// The members EventObject(e, true) leaves out, parsed only when read.
std::array<std::pair<std::string_view, std::string_view>, 3> LazyMembers(const ChangeEvent& e) {
  return {{{"request", e.request}, {"response", e.response}, {"before", e.before}}};
}

}  // namespace

std::string EventJson(const ChangeEvent& e) { return EventObject(e, false); }

ViewCode::ViewCode(std::string file, std::string text, handlers::JsLimits limits, Purpose purpose,
                   std::unique_ptr<handlers::JsRuntime> runtime)
    : file_(std::move(file)), text_(std::move(text)), limits_(limits), purpose_(purpose), runtime_(std::move(runtime)) {
  filter_ = runtime_->HasCommand("filter");
  transform_ = runtime_->HasCommand("transform");
  route_ = runtime_->HasCommand("route");
}

Result<std::unique_ptr<ViewCode>> ViewCode::Load(const std::string& file, handlers::JsLimits limits, Purpose purpose) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return InvalidArgument(file + ": cannot read the view code file");
  std::ostringstream text;
  text << in.rdbuf();
  return FromSource(file, text.str(), limits, purpose);
}

Result<std::unique_ptr<ViewCode>> ViewCode::FromSource(const std::string& file, std::string text,
                                                       handlers::JsLimits limits, Purpose purpose) {
  // filter()'s result counts as JavaScript counts it (a function or an
  // object is truthy, a promise counts by what it settles to), not as its
  // JSON (where a function is null). Appended after the file's last line, so
  // its line numbers stay the file's.
  std::string source = text;
  source += "\nfunction " + std::string(kFilterTruth) +
            "(event) { const r = filter(event); return r && typeof r.then === 'function' ? r.then(v => !!v) : !!r; }\n";
  ASSIGN_OR_RETURN(auto runtime, handlers::JsRuntime::Create(file, source, limits, handlers::JsPurpose::kViewCode));
  if (purpose == Purpose::kAggregate && !runtime->HasCommand("aggregate")) {
    return InvalidArgument(file + ": defines no aggregate(event), which an aggregate view calls for each event");
  }
  if (purpose == Purpose::kShape && !runtime->HasCommand("filter") && !runtime->HasCommand("transform") &&
      !runtime->HasCommand("route")) {
    return InvalidArgument(file + ": defines none of filter(event), transform(event) and route(event)");
  }
  return std::unique_ptr<ViewCode>(new ViewCode(file, std::move(text), limits, purpose, std::move(runtime)));
}

Result<std::unique_ptr<ViewCode>> ViewCode::Again() const { return FromSource(file_, text_, limits_, purpose_); }

Result<std::unique_ptr<ViewCode>> ViewCode::LoadFor(const config::SinkConfig& sink, Purpose purpose) {
  auto code = Load(sink.code, {}, purpose);
  if (!code.ok()) {
    return InvalidArgument("sink " + sink.name + ": " + code.status().message() +
                           (sink.code_origin.empty() ? "" : " (code at " + sink.code_origin + ")"));
  }
  return code;
}

ViewCode::Shaped ViewCode::Shape(const ChangeEvent& e) {
  const ChangeEvent* one[] = {&e};
  return std::move(ShapeMany(one)[0]);
}

std::vector<handlers::JsValueOutcome> ViewCode::CallMany(std::string_view function, Events events) {
  std::vector<std::string> objects;
  std::vector<std::array<std::pair<std::string_view, std::string_view>, 3>> lazy;
  std::vector<handlers::JsRuntime::LazyArg> args;
  objects.reserve(events.size());
  lazy.reserve(events.size());
  args.reserve(events.size());
  for (const ChangeEvent* e : events) {
    objects.push_back(EventObject(*e, true));
    lazy.push_back(LazyMembers(*e));
    args.push_back({objects.back(), lazy.back(), e->committed_at_us / 1000});
  }
  return runtime_->CallJsonMany(function, args);
}

std::vector<handlers::JsValueOutcome> ViewCode::AggregateMany(Events events) { return CallMany("aggregate", events); }

std::vector<ViewCode::Shaped> ViewCode::ShapeMany(Events events) {
  std::vector<Shaped> out(events.size());
  // The events still in the view after each step, by index.
  std::vector<size_t> live;
  std::vector<const ChangeEvent*> picked;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i]->deleted) {
      out[i].kind = Shaped::Kind::kAbsent;  // a deleted entity leaves the view without a call
    } else {
      live.push_back(i);
    }
  }
  const auto pick = [&] {
    picked.clear();
    for (const size_t i : live) picked.push_back(events[i]);
    return Events(picked);
  };
  if (filter_ && !live.empty()) {
    std::vector<handlers::JsValueOutcome> r = CallMany(kFilterTruth, pick());
    std::vector<size_t> kept;
    for (size_t k = 0; k < live.size(); ++k) {
      Shaped& s = out[live[k]];
      if (r[k].kind != handlers::JsOutcome::Kind::kApplied) {
        s.kind = Shaped::Kind::kError;
        s.error = std::move(r[k].message);
      } else if (r[k].json != "true") {
        s.kind = Shaped::Kind::kAbsent;
      } else {
        kept.push_back(live[k]);
      }
    }
    live.swap(kept);
  }
  if (!transform_) {
    for (const size_t i : live) out[i].document = events[i]->state;
    return out;
  }
  if (live.empty()) return out;
  std::vector<handlers::JsValueOutcome> r = CallMany("transform", pick());
  for (size_t k = 0; k < live.size(); ++k) {
    Shaped& s = out[live[k]];
    const ChangeEvent& e = *events[live[k]];
    if (r[k].kind != handlers::JsOutcome::Kind::kApplied) {
      s.kind = Shaped::Kind::kError;
      s.error = std::move(r[k].message);
    } else if (r[k].json == "null") {
      s.kind = Shaped::Kind::kAbsent;
    } else if (!IsObjectText(r[k].json)) {
      s.kind = Shaped::Kind::kError;
      s.error = file_ + ": transform() returned " + Shorten(r[k].json) + " for " + e.entity_type + "/" + e.entity_id +
                " version " + std::to_string(e.version) +
                "; it must return an object (the document) or null (not in the view)";
    } else {
      s.document = std::move(r[k].json);
    }
  }
  return out;
}

std::vector<ViewCode::Routed> ViewCode::RouteMany(Events events) {
  std::vector<handlers::JsValueOutcome> r = CallMany("route", events);
  std::vector<Routed> out;
  out.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) out.push_back(RoutedOf(std::move(r[i]), *events[i]));
  return out;
}

ViewCode::Routed ViewCode::RoutedOf(handlers::JsValueOutcome r, const ChangeEvent& e) const {
  Routed out;
  const auto fail = [&](std::string why) {
    out.kind = Routed::Kind::kError;
    out.error = file_ + ": route() " + std::move(why) + " for " + e.entity_type + "/" + e.entity_id + " version " +
                std::to_string(e.version);
    return out;
  };
  if (r.kind != handlers::JsOutcome::Kind::kApplied) {
    out.kind = Routed::Kind::kError;
    out.error = std::move(r.message);
    return out;
  }
  auto parsed = ParseJson(r.json);
  if (!parsed.ok()) return fail("returned no JSON value");
  const Json& v = *parsed;
  const auto take_to = [&](const Json& to) {
    if (to.is_null()) return true;
    if (!to.is_string() || to.get_ref<const std::string&>().empty()) return false;
    out.kind = Routed::Kind::kTo;
    out.to = to.get<std::string>();
    return true;
  };
  const std::string shape = "; it must return a name of the sink's routes, null (the sink's own), or {to, key, headers}";
  if (!v.is_object()) {
    if (!take_to(v)) return fail("returned " + Shorten(r.json) + shape);
    return out;
  }
  for (const auto& [member, value] : v.items()) {
    if (member == "to") {
      if (!take_to(value)) return fail("returned `to` " + Shorten(value.dump()) + "; it must be a name or null");
    } else if (member == "key") {
      if (value.is_null()) continue;
      if (!value.is_string()) return fail("returned `key` " + Shorten(value.dump()) + "; it must be a string");
      out.key = value.get<std::string>();
    } else if (member == "headers") {
      if (value.is_null()) continue;
      if (!value.is_object()) return fail("returned `headers` " + Shorten(value.dump()) + "; it must be an object of strings");
      for (const auto& [name, text] : value.items()) {
        if (!text.is_string()) return fail("returned header " + name + " = " + Shorten(text.dump()) + "; a header is a string");
        if (name.empty() || name.starts_with("sluice-")) {
          return fail("returned header '" + name + "'; header names are not empty and sluice-* are sluice's own");
        }
        out.headers.emplace_back(name, text.get<std::string>());
      }
    } else {
      return fail("returned a member `" + member + "`" + shape);
    }
  }
  return out;
}

}  // namespace sluice::connectors
