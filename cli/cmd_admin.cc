// sluice pause, resume, rewind and rebuild: commands that reach a running
// process through its admin endpoint (admin/), or for rewind --offline,
// sluice_offsets directly.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "admin/admin_client.h"
#include "cli/command.h"
#include "config/sink_type.h"
#include "core/json.h"
#include "offsets/offset_store.h"
#include "sql/layout_schema.h"
#include "sql/params.h"
#include "sql/routed_tables.h"

namespace sluice::cli {
namespace {

constexpr const char* kAdminNeeds =
    "The process is reached through the admin endpoint of the config (admin.listen)\n"
    "with the bearer token admin.token from the same config (or its secret).\n";

// The sink named --sink, or nullptr after saying why not.
const config::SinkConfig* SinkOrExplain(const config::Config& cfg, const po::variables_map& vm,
                                        const std::string& command) {
  if (!vm.count("sink")) throw Usage{command + " needs --sink NAME"};
  const std::string name = vm["sink"].as<std::string>();
  std::string known;
  for (const auto& s : cfg.sinks) {
    if (s.name == name) return &s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  std::cerr << "sluice " << command << ": no sink named '" << name << "' in " << cfg.path
            << (known.empty() ? " (it declares no sinks)" : " (sinks: " + known + ")") << "\n";
  return nullptr;
}

bool AdminOrExplain(const config::Config& cfg, const std::string& command) {
  if (cfg.admin.enabled) return true;
  std::cerr << "sluice " << command << ": " << cfg.path
            << " has no admin section, so no running process can be reached; add\n"
               "  admin: {listen: 127.0.0.1:9470, token: \"${env:SLUICE_ADMIN_TOKEN}\"}\n"
               "and restart the process\n";
  return false;
}

// Sends one change; prints why it failed (false) or returns the reply body.
std::optional<Json> AdminChange(const config::Config& cfg, const std::string& command, const std::string& target,
                                const Json& body, int* http_status = nullptr) {
  admin::AdminClient client(cfg.admin);
  auto reply = client.Post(target, body);
  if (!reply.ok()) {
    std::cerr << "sluice " << command << ": " << reply.status().message() << "\n";
    return std::nullopt;
  }
  if (http_status) *http_status = reply->status;
  if (reply->status / 100 != 2) {
    if (http_status && reply->status == 409) return reply->body;
    std::cerr << "sluice " << command << ": " << reply->ErrorMessage() << " (HTTP " << reply->status << ")\n";
    return std::nullopt;
  }
  return reply->body;
}

po::options_description PauseResumeOptions(const std::string& name) {
  const std::string what =
      name == "pause"
          ? "Stops the sink applying events in the running process, after the batch in flight.\n"
            "Its offsets are kept, `sluice status` shows state paused, and the pause outlives a\n"
            "restart until `sluice resume`. Lag grows meanwhile.\n"
          : "Lets a paused sink carry on from its kept offsets.\n";
  po::options_description desc("usage: sluice " + name + " --config FILE --sink NAME\n\n" + what + kAdminNeeds +
                               "Exit codes: 0 done, 1 failure (unknown sink, no process, refused), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink");
  return desc;
}

int PauseResume(const Invocation& call) {
  const std::string& name = call.name;
  const po::variables_map& vm = call.vm;
  auto cfg = ConfigFrom(vm, name);
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, name);
  if (!sink || !AdminOrExplain(*cfg, name)) return kExitFailure;
  auto body = AdminChange(*cfg, name, "/v1/sinks/" + sink->name + "/" + name, Json::object());
  if (!body) return kExitFailure;
  std::cout << "sink " << sink->name << ": " << (name == "pause" ? "paused" : "resumed") << " (state "
            << body->value("state", std::string("?")) << ")\n";
  return kExitOk;
}

po::options_description RewindOptions(const std::string&) {
  po::options_description desc(
      "usage: sluice rewind --config FILE --sink NAME --to N|beginning [--partition P] [--offline]\n\n"
      "Moves the sink's offset (of one partition, or of all) back to event_id N, or to 0\n"
      "with `beginning`: the running process stops that sink's applier between two\n"
      "batches, sets the offsets, and carries on from there. Events after N are applied\n"
      "again; the version check counts those the view already holds as stale, so the\n"
      "view never goes back. Offsets only move back: a target past an offset is refused.\n" +
      std::string(kAdminNeeds) +
      "With --offline, no process may be running: the offsets are written to\n"
      "sluice_offsets directly and take effect at the next start.\n"
      "Exit codes: 0 done, 1 failure (unknown sink, no process, refused), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink")("to", po::value<std::string>(), "an event_id, or beginning (0)")(
      "partition", po::value<uint32_t>(), "only this partition")(
      "offline", "write sluice_offsets directly (no process may be running)");
  return desc;
}

int FollowRebuild(const config::Config& config, const config::SinkConfig& sink);

int Rewind(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  if (!vm.count("to")) throw Usage{"rewind needs --to N or --to beginning"};
  const std::string to_text = vm["to"].as<std::string>();
  uint64_t to = 0;
  if (to_text != "beginning") {
    size_t used = 0;
    try {
      to = std::stoull(to_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != to_text.size() || to_text[0] == '-') {
      throw Usage{"--to takes an event_id (0 or more) or beginning, not '" + to_text + "'"};
    }
  }
  auto cfg = ConfigFrom(vm, "rewind");
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, "rewind");
  if (!sink) return kExitFailure;
  const uint32_t partitions = cfg->entities.at(sink->entity).partitions;
  std::optional<uint32_t> partition;
  if (vm.count("partition")) {
    partition = vm["partition"].as<uint32_t>();
    if (*partition >= partitions) {
      std::cerr << "sluice rewind: sink " << sink->name << " has partitions 0.." << partitions - 1 << ", not "
                << *partition << "\n";
      return kExitFailure;
    }
  }
  const config::SinkType* type = cfg->sink_types ? cfg->sink_types->Find(sink->type) : nullptr;
  if (type != nullptr && type->exactly_once) {
    // Its own offsets call every re-delivered event stale: a rewind would
    // change nothing, and re-counting would be wrong. The whole view is
    // recomputed instead.
    std::cout << "sink " << sink->name << " is an aggregate view, kept exactly once: a rewind would re-apply "
              << "nothing, so it is rebuilt from the first event instead\n";
    if (vm.count("offline")) {
      std::cerr << "sluice rewind: an aggregate view is rebuilt by the running process: start it and run "
                << "`sluice rewind` (or `sluice rebuild`) without --offline\n";
      return kExitFailure;
    }
    if (!AdminOrExplain(*cfg, "rewind")) return kExitFailure;
    return FollowRebuild(*cfg, *sink);
  }
  if (vm.count("offline")) {
    if (cfg->admin.enabled && admin::AdminClient(cfg->admin, std::chrono::seconds(5)).Get("/v1/status").ok()) {
      std::cerr << "sluice rewind: a process answers on the admin endpoint " << cfg->admin.listen_host << ":"
                << cfg->admin.listen_port << "; rewind it online (without --offline)\n";
      return kExitFailure;
    }
    // Offsets live beside their partitions: on the servers the recorded placement says.
    const sql::StorageLayout layout = sql::LayoutFrom(*cfg);
    if (Status st = sql::CheckLayout(layout, sql::SpecsFrom(*cfg)); !st.ok()) {
      std::cerr << "sluice rewind: " << st.message() << "\n";
      return kExitFailure;
    }
    offsets::OffsetStore store(sql::OpenStorage(layout)->OpenOffsets());
    auto current = store.Load(sink->name, sink->entity);
    if (!current.ok()) {
      std::cerr << "sluice rewind: " << current.status().message() << "\n";
      return kExitFailure;
    }
    for (uint32_t p = 0; p < partitions; ++p) {
      if (partition && *partition != p) continue;
      const uint64_t from = current->count(p) ? (*current)[p].event_id : 0;
      if (to > from) {
        std::cerr << "sluice rewind: rewind only moves offsets back: partition " << p << " is at " << from
                  << ", so moving it to " << to << " would skip events; nothing was changed\n";
        return kExitFailure;
      }
    }
    if (Status st = store.Rewind(sink->name, sink->entity, partition, to, partitions); !st.ok()) {
      std::cerr << "sluice rewind: " << st.message() << "\n";
      return kExitFailure;
    }
    std::cout << "sink " << sink->name << ": offsets set to " << to << " in sluice_offsets"
              << (partition ? " (partition " + std::to_string(*partition) + ")" : "") << "\n";
    return kExitOk;
  }
  if (!AdminOrExplain(*cfg, "rewind")) return kExitFailure;
  Json body = {{"to", to}};
  if (partition) body["partition"] = *partition;
  auto reply = AdminChange(*cfg, "rewind", "/v1/sinks/" + sink->name + "/rewind", body);
  if (!reply) return kExitFailure;
  for (const auto& p : (*reply)["partitions"]) {
    std::cout << "sink " << sink->name << " partition " << p["partition"] << ": offset " << p["from"] << " -> "
              << p["to"] << "\n";
  }
  return kExitOk;
}

std::string ProgressLine(const Json& p) {
  const uint64_t replayed = p.value("replayed", uint64_t{0});
  const uint64_t total = p.value("total", uint64_t{0});
  const double rate = p.value("rate", 0.0);
  const std::string sink = p.value("sink", std::string());
  const std::string phase = p.value("phase", std::string());
  char line[256];
  // With nothing to replay (yet) there is no fraction to show: never "0/0 (100.0%)".
  if (total == 0) {
    std::snprintf(line, sizeof line, "rebuild %s: %s; the entity type has no events yet, so there is nothing to replay",
                  sink.c_str(), phase.c_str());
    return line;
  }
  const double pct = 100.0 * static_cast<double>(replayed) / static_cast<double>(total);
  std::string eta = "?";
  if (rate > 0) eta = std::to_string(static_cast<uint64_t>(static_cast<double>(total - std::min(total, replayed)) / rate)) + "s";
  std::snprintf(line, sizeof line, "rebuild %s: %s %llu/%llu events (%.1f%%), %.0f events/s, ETA %s", sink.c_str(),
                phase.c_str(), static_cast<unsigned long long>(replayed), static_cast<unsigned long long>(total), pct,
                rate, eta.c_str());
  return line;
}

po::options_description RebuildOptions(const std::string&) {
  po::options_description desc(
      "usage: sluice rebuild --config FILE --sink NAME\n\n"
      "Replays the sink's whole history into a fresh view beside the live one, while the\n"
      "live view keeps being served and updated, then swaps the fresh view in atomically\n"
      "and carries on from it. Prints a progress line (events replayed / total, rate,\n"
      "ETA) until it is done. How each sink type swaps:\n"
      "  mysql          <table>__rebuild replaces <table> in one RENAME TABLE\n"
      "  elasticsearch  <index>__rebuild_<n> becomes the index behind the alias <index>,\n"
      "                 in one POST /_aliases that also deletes the old index\n"
      "  redis          keys written under a __rebuild: prefix are RENAMEd onto the live\n"
      "                 keys while the live sink is paused: atomic per key, not per view\n"
      "  plugins        those whose sink type has the rebuild hooks (plugin ABI 1.1)\n"
      "kafka sinks and other plugins are refused, saying why.\n"
      "If a rebuild of the sink is already running, follows it. Interrupting this command\n"
      "does not stop the rebuild.\n" +
      std::string(kAdminNeeds) +
      "Exit codes: 0 rebuilt, 1 failure (unknown sink, no process, refused, rebuild failed), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink");
  return desc;
}

int Rebuild(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  auto cfg = ConfigFrom(vm, "rebuild");
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, "rebuild");
  if (!sink || !AdminOrExplain(*cfg, "rebuild")) return kExitFailure;
  return FollowRebuild(*cfg, *sink);
}

// Starts (or joins) the rebuild of `sink` in the running process and prints
// its progress until it is done.
int FollowRebuild(const config::Config& config, const config::SinkConfig& sink_config) {
  const config::Config* cfg = &config;
  const config::SinkConfig* sink = &sink_config;
  int http_status = 0;
  auto started = AdminChange(*cfg, "rebuild", "/v1/sinks/" + sink->name + "/rebuild", Json::object(), &http_status);
  if (!started) return kExitFailure;
  if (http_status == 409) {
    const bool running = started->contains("error") && (*started)["error"].value("code", "") == "rebuilding";
    if (!running) {
      std::cerr << "sluice rebuild: " << (*started)["error"].value("message", started->dump()) << "\n";
      return kExitFailure;
    }
    std::cout << "rebuild " << sink->name << ": already running; following it\n";
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  admin::AdminClient client(cfg->admin);
  auto last_line = std::chrono::steady_clock::time_point{};
  if (http_status == 202) {
    std::cout << (tty ? "\r" : "") << ProgressLine(*started) << (tty ? "" : "\n") << std::flush;
    last_line = std::chrono::steady_clock::now();
  }
  for (;;) {
    auto reply = client.Get("/v1/sinks/" + sink->name + "/rebuild");
    if (!reply.ok() || reply->status != 200) {
      std::cerr << (tty ? "\n" : "") << "sluice rebuild: lost the process while following the rebuild: "
                << (reply.ok() ? reply->ErrorMessage() : reply.status().message()) << "\n";
      return kExitFailure;
    }
    const Json& p = reply->body;
    const std::string phase = p.value("phase", "");
    const bool finished = phase == "done" || phase == "failed" || phase == "abandoned";
    const auto now = std::chrono::steady_clock::now();
    if (tty) {
      std::cout << "\r" << ProgressLine(p) << "   " << std::flush;
    } else if (finished || now - last_line >= std::chrono::seconds(2)) {
      std::cout << ProgressLine(p) << "\n" << std::flush;
      last_line = now;
    }
    if (finished) {
      if (tty) std::cout << "\n";
      if (phase == "done") {
        std::printf("rebuild %s: done in %.1f s; the rebuilt view is live\n", sink->name.c_str(),
                    p.value("seconds", 0.0));
        return kExitOk;
      }
      std::cerr << "sluice rebuild: " << phase << ": " << p.value("error", "") << " (the live view is still served)\n";
      return kExitFailure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

Subcommand PauseResumeCommand() {
  Subcommand c;
  c.names = {"pause", "resume"};
  c.synopsis = "pause|resume --config FILE --sink NAME";
  c.summary = "stop / restart applying a sink in the running process";
  c.options = PauseResumeOptions;
  c.run = PauseResume;
  return c;
}

Subcommand RewindCommand() {
  Subcommand c;
  c.names = {"rewind"};
  c.synopsis = "rewind --config FILE --sink NAME --to N|beginning [--partition P]";
  c.summary = "move a sink's offsets back in the running process";
  c.options = RewindOptions;
  c.run = Rewind;
  return c;
}

Subcommand RebuildCommand() {
  Subcommand c;
  c.names = {"rebuild"};
  c.synopsis = "rebuild --config FILE --sink NAME";
  c.summary = "replay a sink into a fresh view, then swap it in";
  c.options = RebuildOptions;
  c.run = Rebuild;
  return c;
}

}  // namespace sluice::cli
