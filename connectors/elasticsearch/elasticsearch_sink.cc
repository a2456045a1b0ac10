#include "connectors/elasticsearch/elasticsearch_sink.h"

#include <algorithm>
#include <charconv>
#include <deque>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "connectors/elasticsearch/bulk.h"
#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/elasticsearch/rest_client.h"
#include "core/json.h"
#include "core/on_threads.h"

namespace sluice::connectors::elasticsearch {
namespace {

// Documents fetched per _mget, and ids per scroll page, while verifying.
constexpr size_t kVerifyChunk = 1000;
constexpr size_t kScrollPage = 5000;
// The _bulk response is filtered down to what the sink reads.
constexpr std::string_view kBulkQuery = "/_bulk?filter_path=items.*.status,items.*.error.type,items.*.error.reason";
// Live documents are those without the tombstone marker.
constexpr std::string_view kLiveQuery = R"({"bool":{"must_not":{"exists":{"field":"_sluice_deleted"}}}})";
// A rebuild writes "<index>__rebuild_<n>" and then points the alias <index>
// at it. The number goes up by one per rebuild, so the next shadow never has
// the name of the index the alias points at.
constexpr std::string_view kShadowInfix = "__rebuild_";

// What the sink's configured index name is on the server now.
struct LiveName {
  bool alias = false;                // an alias (after a rebuild), else a concrete index or nothing
  std::vector<std::string> indices;  // the concrete indices it names (empty: it does not exist)
};

// The generation of a shadow index named "<live>__rebuild_<n>", or 0.
uint64_t ShadowGeneration(std::string_view live, std::string_view index) {
  if (!index.starts_with(live) || !index.substr(live.size()).starts_with(kShadowInfix)) return 0;
  const std::string_view digits = index.substr(live.size() + kShadowInfix.size());
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  return ec == std::errc() && end == digits.data() + digits.size() ? n : 0;
}

class ElasticsearchSink final : public Sink {
 public:
  ElasticsearchSink(const config::SinkConfig& cfg, std::unique_ptr<RestClient> client)
      : cfg_(cfg), es_(cfg_.Options<ElasticsearchSinkOptions>()), client_(std::move(client)) {
    SetIndex(IndexName(cfg));
  }
  ~ElasticsearchSink() override { JoinInFlight(); }

  const std::string& name() const override { return cfg_.name; }

  Capabilities capabilities() const override {
    Capabilities c;
    c.can_push = false;
    // Repair(kAny) is not offered: an external version can only go up, and a
    // real delete leaves its version behind for index.gc_deletes.
    c.entity_checks = true;
    c.pipeline = std::max<uint32_t>(1, es_.connections);  // a _bulk in flight per connection
    c.stays_open_at_takeover = true;  // every write is version-checked: nothing to learn at a takeover
    return c;
  }

  Status Open() override {
    if (!shadow_of_.empty() && !shadow_prepared_) {
      RETURN_IF_ERROR(PrepareShadowIndex());
      shadow_prepared_ = true;
    }
    ASSIGN_OR_RETURN(HttpResponse head, Send("HEAD", index_path_));
    if (head.status == 200) return Status::Ok();
    if (head.status != 404) return HttpError(head, "checking the index");
    // A shadow always makes its own index, whoever made the live one.
    if (!es_.auto_create && shadow_of_.empty()) {
      return FailedPrecondition(where_ + ": the index does not exist and auto_create is false: create it, "
                                "or set auto_create: true");
    }
    if (!es_.template_json.empty()) {
      ASSIGN_OR_RETURN(HttpResponse put,
                       Send("PUT", PathTo("/_index_template/", cfg_.name), es_.template_json));
      if (put.status != 200) return HttpError(put, "putting the index template from " + es_.template_path);
    }
    ASSIGN_OR_RETURN(std::string body, CreateIndexBody());
    ASSIGN_OR_RETURN(HttpResponse created, Send("PUT", index_path_, body));
    if (created.status == 200) return Status::Ok();
    // Another process (or a second sink on the same index) won the race.
    if (created.status == 400 && ErrorText(created.body).starts_with("resource_already_exists_exception")) {
      return Status::Ok();
    }
    return HttpError(created, es_.mapping_path.empty() ? "creating the index"
                                                       : "creating the index with " + es_.mapping_path);
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override { return Index(events, "external"); }

  // Pipelined (the engine's applier): each chunk one _bulk on the next
  // connection, on a thread of its own until Receive(), one chunk in flight
  // per connection. Apply() (a sink with view code, repairs) splits each
  // chunk over the connections instead.
  void Send(std::span<const ChangeEvent> events) override { Start(events, "external"); }
  ApplyResult Receive() override { return Finish(); }

  // kNotOlder is version_type=external_gte: the same version is indexed again.
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard) override {
    if (guard != RepairGuard::kNotOlder) return Sink::Repair(events, guard);
    return Index(events, "external_gte");
  }

  // No Open(): the caller opened the sink (the engine's applier, or verify
  // --repair), and a step of the anti-entropy costs one request, the _mget.
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override {
    for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
      const size_t end = std::min(truth.size(), begin + kVerifyChunk);
      ASSIGN_OR_RETURN(Json docs, GetDocuments(truth.subspan(begin, end - begin)));
      for (size_t i = begin; i < end; ++i) CompareOne(truth[i], docs[i - begin], differences);
    }
    return Status::Ok();
  }

 private:
  // One connection and the _bulk request it carries: its NDJSON, which
  // events of the chunk it holds (in chunk order), and the reply.
  struct Lane {
    RestClient* client = nullptr;
    std::string body;  // kept for its capacity
    std::vector<size_t> sent;
    Result<HttpResponse> response = HttpResponse{};
  };
  // A chunk sent and not yet received: its lane (null when the lanes could
  // not be made: `failed`), the outcomes known before the reply (refused
  // documents), and the thread the request runs on.
  struct InFlight {
    Lane* lane = nullptr;
    Status failed;
    ApplyResult out;
    std::thread thread;
  };

  // The batch split by entity id over the sink's connections, one _bulk
  // each, sent at once (the first on this thread): an entity's events stay
  // in one request, in batch order.
  ApplyResult Index(std::span<const ChangeEvent> events, std::string_view version_type) {
    ApplyResult out;
    out.results.resize(events.size());
    if (Status st = MakeLanes(); !st.ok()) return Fail(st);
    if (!in_flight_.empty()) return Fail(Internal(where_ + ": Apply() with chunks in flight"));
    for (Lane& lane : lanes_) {
      lane.body.clear();
      lane.sent.clear();
    }
    Fill(events, version_type, out, [this](const ChangeEvent& e) -> Lane& {
      return lanes_[lanes_.size() == 1 ? 0 : std::hash<std::string_view>{}(e.entity_id) % lanes_.size()];
    });
    std::vector<Lane*> sending;  // each lane's request on a thread of its own
    for (Lane& lane : lanes_) {
      if (!lane.sent.empty()) sending.push_back(&lane);
    }
    OnThreads(sending.size(), [&](size_t k) { SendBulk(*sending[k]); });
    // A lane that says the sink is misconfigured wins over one that says
    // try again, whichever lane the entities hashed to.
    Status failure = Status::Ok();
    for (const Lane& lane : lanes_) {
      if (lane.sent.empty()) continue;
      Status st = TakeReply(lane, out);
      if (!st.ok() && (failure.ok() || (failure.code() == StatusCode::kUnavailable &&
                                        st.code() != StatusCode::kUnavailable))) {
        failure = std::move(st);
      }
    }
    if (!failure.ok()) return Fail(failure);
    return out;
  }

  // Appends each event's action to the body of the lane `lane_of` picks for
  // it; a document refused before sending gets its outcome in `out` at once.
  template <class LaneOf>
  void Fill(std::span<const ChangeEvent> events, std::string_view version_type, ApplyResult& out, LaneOf lane_of) {
    for (size_t i = 0; i < events.size(); ++i) {
      Lane& lane = lane_of(events[i]);
      std::string reason = AppendBulkItem(events[i], lane.body, version_type);
      if (reason.empty()) {
        lane.sent.push_back(i);
      } else {
        out.results[i] = {Outcome::kRejected, std::move(reason)};
      }
    }
  }

  // Sends the chunk on the next lane, on a thread of its own: lanes are
  // taken in turn and received in order, so with at most one chunk in
  // flight per connection the next lane's last request has been received.
  void Start(std::span<const ChangeEvent> events, std::string_view version_type) {
    InFlight& f = in_flight_.emplace_back();
    f.out.results.resize(events.size());
    if (Status st = MakeLanes(); !st.ok()) {
      f.failed = std::move(st);
      return;
    }
    Lane& lane = lanes_[next_lane_++ % lanes_.size()];
    f.lane = &lane;
    lane.body.clear();
    lane.sent.clear();
    Fill(events, version_type, f.out, [&lane](const ChangeEvent&) -> Lane& { return lane; });
    if (lane.sent.empty()) return;
    try {
      f.thread = std::thread([this, &lane] { SendBulk(lane); });
    } catch (const std::system_error&) {
      SendBulk(lane);  // no thread to be had (the process's limit): sent here
    }
  }

  // The oldest chunk in flight: its request's outcome per event.
  ApplyResult Finish() {
    if (in_flight_.empty()) return Fail(Internal(where_ + ": nothing was sent to receive"));
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (f.thread.joinable()) f.thread.join();
    if (!f.failed.ok()) return Fail(std::move(f.failed));
    if (f.lane->sent.empty()) return std::move(f.out);
    if (Status st = TakeReply(*f.lane, f.out); !st.ok()) return Fail(std::move(st));
    return std::move(f.out);
  }

  // Waits for requests still running (a caller that stopped receiving).
  void JoinInFlight() {
    for (InFlight& f : in_flight_) {
      if (f.thread.joinable()) f.thread.join();
    }
    in_flight_.clear();
  }

  // The lanes, one per connection (the first is the sink's own client).
  Status MakeLanes() {
    if (!lanes_.empty()) return Status::Ok();
    std::vector<Lane> lanes(std::max<uint32_t>(1, es_.connections));
    std::vector<std::unique_ptr<RestClient>> clients;
    lanes[0].client = client_.get();
    for (size_t k = 1; k < lanes.size(); ++k) {
      auto client = RestClient::Make(ClientOptions(cfg_));
      if (!client.ok()) return client.status();
      lanes[k].client = client->get();
      clients.push_back(std::move(client).value());
    }
    lanes_ = std::move(lanes);
    lane_clients_ = std::move(clients);
    return Status::Ok();
  }

  // Runs on a thread of its own: touches only `lane` (and reads the path);
  // nothing escapes it.
  void SendBulk(Lane& lane) const noexcept {
    try {
      lane.response =
          lane.client->Send("POST", index_path_ + std::string(kBulkQuery), lane.body, "application/x-ndjson");
      if (!lane.response.ok()) lane.client->Disconnect();
    } catch (const std::exception& e) {
      lane.response = Internal(std::string("_bulk: ") + e.what());
    }
  }

  // The outcome of each event of a lane's request, from its reply; an error
  // fails the whole batch.
  Status TakeReply(const Lane& lane, ApplyResult& out) {
    if (!lane.response.ok()) return Unavailable(where_ + ": " + lane.response.status().message());
    const HttpResponse& response = *lane.response;
    if (response.status != 200) return HttpError(response, "_bulk");
    Result<std::vector<BulkItem>> items = ParseBulkResponse(response.body, lane.sent.size());
    if (!items.ok()) return Unavailable(where_ + ": " + items.status().message());
    for (size_t k = 0; k < lane.sent.size(); ++k) {
      const BulkItem& item = (*items)[k];
      EventResult& result = out.results[lane.sent[k]];
      switch (ClassifyItem(item)) {
        case ItemClass::kApplied: result.outcome = Outcome::kApplied; break;
        case ItemClass::kStale: result.outcome = Outcome::kStale; break;
        case ItemClass::kRejected:
          result.outcome = Outcome::kRejected;
          result.reason = "elasticsearch refused the document (HTTP " + std::to_string(item.status) + "): " + item.error;
          break;
        case ItemClass::kUnavailable:
          return Unavailable(where_ + ": _bulk item failed with HTTP " + std::to_string(item.status) + ": " +
                             item.error);
        case ItemClass::kMisconfigured:
          return FailedPrecondition(where_ + ": " + item.error +
                                    " (the index vanished and the server does not create it)");
      }
    }
    return Status::Ok();
  }

 public:
  Status Health() override {
    ASSIGN_OR_RETURN(HttpResponse r, Send("GET", "/"));
    if (r.status == 200) return Status::Ok();
    return HttpError(r, "GET /");
  }

  void Close() override {
    JoinInFlight();
    client_->Disconnect();
    for (auto& c : lane_clients_) c->Disconnect();
  }

  // After a _refresh, so that every document written before the call is seen.
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) override {
    RETURN_IF_ERROR(Open());
    RETURN_IF_ERROR(Refresh());
    return ScrollLiveIds(page, each);
  }

  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override {
    RETURN_IF_ERROR(Open());
    size_t live_in_view = 0;  // truth entities whose document is live in the view
    std::unordered_set<std::string_view> known;
    known.reserve(truth.size());
    for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
      const size_t end = std::min(truth.size(), begin + kVerifyChunk);
      for (size_t i = begin; i < end; ++i) known.insert(truth[i].entity_id);
      ASSIGN_OR_RETURN(Json docs, GetDocuments(std::span(truth).subspan(begin, end - begin)));
      for (size_t i = begin; i < end; ++i) {
        live_in_view += CompareOne(truth[i], docs[i - begin], differences) ? 1 : 0;
      }
    }
    return FindExtras(known, live_in_view, differences);
  }

  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override {
    ASSIGN_OR_RETURN(std::unique_ptr<RestClient> client, RestClient::Make(ClientOptions(cfg_)));
    auto shadow = std::make_unique<ElasticsearchSink>(cfg_, std::move(client));
    shadow->shadow_of_ = index_;
    shadow->where_ = where_ + " (rebuild)";
    return std::unique_ptr<Sink>(std::move(shadow));
  }

  // One POST /_aliases: the live name becomes an alias of the shadow index,
  // and the index it named before is deleted in the same atomic step
  // (remove_index). Other aliases of that index move to the shadow with
  // their filters, so a filtered alias that hides tombstones keeps working.
  Status PromoteRebuildShadow() override {
    if (shadow_of_.empty()) return Sink::PromoteRebuildShadow();
    RETURN_IF_ERROR(Open());  // a replay of no events never opened it
    ASSIGN_OR_RETURN(LiveName live, ReadLiveName());
    if (live.alias && live.indices.size() > 1) {
      return FailedPrecondition(where_ + ": the alias " + shadow_of_ + " points at " +
                                std::to_string(live.indices.size()) +
                                " indices; point it at one index (the one this sink writes) and rebuild again");
    }
    if (std::find(live.indices.begin(), live.indices.end(), index_) != live.indices.end()) {
      return Status::Ok();  // an earlier call swapped it in and its answer was lost
    }
    Json actions = Json::array();
    actions.push_back({{"add", {{"index", index_}, {"alias", shadow_of_}}}});
    for (const std::string& old : live.indices) {
      ASSIGN_OR_RETURN(HttpResponse r, Send("GET", PathTo("/", old) + "/_alias"));
      if (r.status != 200) return HttpError(r, "reading the aliases of " + old);
      const Json doc = ParseJsonOrDiscarded(r.body);
      if (doc.is_object() && doc.contains(old) && doc[old].contains("aliases") && doc[old]["aliases"].is_object()) {
        for (const auto& [alias, definition] : doc[old]["aliases"].items()) {
          if (alias == shadow_of_) continue;
          Json add = definition.is_object() ? definition : Json::object();
          add["index"] = index_;
          add["alias"] = alias;
          actions.push_back({{"add", std::move(add)}});
        }
      }
      actions.push_back({{"remove_index", {{"index", old}}}});
    }
    ASSIGN_OR_RETURN(HttpResponse swapped, Send("POST", "/_aliases", Json{{"actions", actions}}.dump()));
    if (swapped.status != 200) return HttpError(swapped, "pointing " + shadow_of_ + " at the rebuilt index");
    return Status::Ok();
  }

 private:
  void SetIndex(std::string index) {
    index_ = std::move(index);
    index_path_ = PathTo("/", index_);
    where_ = "sink '" + cfg_.name + "' (elasticsearch " + client_->base_url() + ", index " + index_ + ")";
  }

  // Whether the live name is an alias, and the concrete indices it names.
  Result<LiveName> ReadLiveName() {
    LiveName live;
    ASSIGN_OR_RETURN(HttpResponse r, Send("GET", PathTo("/_alias/", shadow_of_)));
    if (r.status == 200) {
      const Json doc = ParseJsonOrDiscarded(r.body);
      if (!doc.is_object()) return Internal(where_ + ": the answer to GET /_alias/" + shadow_of_ + " is not JSON");
      live.alias = true;
      for (const auto& [index, aliases] : doc.items()) live.indices.push_back(index);
      return live;
    }
    if (r.status != 404) return HttpError(r, "looking up the alias " + shadow_of_);
    ASSIGN_OR_RETURN(HttpResponse head, Send("HEAD", PathTo("/", shadow_of_)));
    if (head.status == 200) {
      live.indices.push_back(shadow_of_);
    } else if (head.status != 404) {
      return HttpError(head, "checking the index " + shadow_of_);
    }
    return live;
  }

  // A shadow's first Open(): picks the next "<live>__rebuild_<n>" and deletes
  // whatever an abandoned rebuild left under that name.
  Status PrepareShadowIndex() {
    ASSIGN_OR_RETURN(LiveName live, ReadLiveName());
    uint64_t generation = 0;
    for (const std::string& index : live.indices) generation = std::max(generation, ShadowGeneration(shadow_of_, index));
    SetIndex(shadow_of_ + std::string(kShadowInfix) + std::to_string(generation + 1));
    ASSIGN_OR_RETURN(HttpResponse deleted, Send("DELETE", index_path_));
    if (deleted.status != 200 && deleted.status != 404) {
      return HttpError(deleted, "deleting the index an abandoned rebuild left");
    }
    return Status::Ok();
  }

  Result<HttpResponse> Send(std::string_view method, const std::string& path, std::string_view body = {},
                            std::string_view content_type = "application/json") {
    Result<HttpResponse> r = client_->Send(method, path, body, content_type);
    if (!r.ok()) {
      client_->Disconnect();
      return Unavailable(where_ + ": " + r.status().message());
    }
    return r;
  }

  ApplyResult Fail(Status status) {
    ApplyResult r;
    r.status = std::move(status);
    return r;
  }

  // A status for an unexpected HTTP reply, by what the caller should do.
  Status HttpError(const HttpResponse& r, const std::string& what) {
    const std::string text = where_ + ": " + what + ": HTTP " + std::to_string(r.status) +
                             (r.body.empty() ? "" : ": " + ErrorText(r.body));
    if (r.status == 401 || r.status == 403) {
      return FailedPrecondition(text + " (check username/password or api_key, and the user's index privileges)");
    }
    if (r.status == 429 || r.status >= 500 || r.status == 0) return Unavailable(text);
    return FailedPrecondition(text);
  }

  // The create-index body: the mapping file (or nothing) plus a boolean
  // mapping for the tombstone marker, so that strict mappings accept it.
  Result<std::string> CreateIndexBody() const {
    Json body = Json::object();
    if (!es_.mapping_json.empty()) {
      body = ParseJsonOrDiscarded(es_.mapping_json);
      if (body.is_discarded() || !body.is_object()) {
        return FailedPrecondition(where_ + ": " + es_.mapping_path + " does not hold a JSON object");
      }
    }
    Json& mappings = body["mappings"];
    if (mappings.is_null()) mappings = Json::object();
    if (!mappings.is_object()) return FailedPrecondition(where_ + ": \"mappings\" in " + es_.mapping_path + " is not an object");
    Json& properties = mappings["properties"];
    if (properties.is_null()) properties = Json::object();
    if (!properties.is_object()) {
      return FailedPrecondition(where_ + ": \"mappings.properties\" in " + es_.mapping_path + " is not an object");
    }
    if (!properties.contains(kTombstoneField)) properties[std::string(kTombstoneField)] = {{"type", "boolean"}};
    return body.dump();
  }

  // One _mget of the entities' documents (real-time: no refresh needed): an
  // array with one entry per entity, in order.
  Result<Json> GetDocuments(std::span<const EntitySnapshot> entities) {
    std::string body = R"({"ids":[)";
    for (size_t i = 0; i < entities.size(); ++i) {
      if (i > 0) body += ',';
      AppendJsonString(body, entities[i].entity_id);
    }
    body += "]}";
    ASSIGN_OR_RETURN(HttpResponse r,
                     Send("POST", index_path_ + "/_mget?filter_path=docs.found,docs._version,docs._source", body));
    if (r.status != 200) return HttpError(r, "_mget");
    Json doc = ParseJsonOrDiscarded(r.body);
    if (!doc.is_object() || !doc.contains("docs") || !doc["docs"].is_array() || doc["docs"].size() != entities.size()) {
      return Internal(where_ + ": the _mget response does not hold one document per id");
    }
    return std::move(doc["docs"]);
  }

  // Compares one entity with its _mget entry; true when the view holds a
  // live document for it.
  bool CompareOne(const EntitySnapshot& s, const Json& got, std::vector<Difference>& differences) const {
    const bool found = got.is_object() && got.value("found", false);
    const Json* source = found && got.contains("_source") ? &got["_source"] : nullptr;
    const bool tombstone = source != nullptr && source->is_object() && source->contains(kTombstoneField);
    const bool live = found && !tombstone;
    const uint64_t version = found ? got.value("_version", uint64_t{0}) : 0;
    const std::optional<uint64_t> view_version = found ? std::optional<uint64_t>(version) : std::nullopt;
    if (s.deleted) {
      if (live) {
        differences.push_back({Difference::Kind::kExtra, s.entity_id,
                               (s.version == 0 ? std::string("storage has no events for the entity")
                                               : "storage deleted the entity at version " + std::to_string(s.version)) +
                                   " but the view has a document at version " + std::to_string(version),
                               view_version});
      }
      return live;
    }
    if (!live) {
      differences.push_back({Difference::Kind::kMissing, s.entity_id,
                             std::string(tombstone ? "the view has a tombstone at version " + std::to_string(version)
                                                   : "the view has no document") +
                                 "; storage has version " + std::to_string(s.version),
                             view_version});
      return false;
    }
    if (version != s.version) {
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                             "the view has version " + std::to_string(version) + ", storage has " +
                                 std::to_string(s.version),
                             view_version});
      return true;
    }
    const Json state = ParseJsonOrDiscarded(s.state);
    if (state.is_discarded() || state != *source) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                             "version " + std::to_string(version) + " in the view differs from storage", view_version});
    }
    return true;
  }

  // Live documents of no entity in `known`: counted first (cheap), listed
  // with a scroll only when the count says there are some.
  Status FindExtras(const std::unordered_set<std::string_view>& known, size_t live_in_view,
                    std::vector<Difference>& differences) {
    RETURN_IF_ERROR(Refresh());
    const std::string query = R"({"query":)" + std::string(kLiveQuery) + "}";
    ASSIGN_OR_RETURN(HttpResponse counted, Send("POST", index_path_ + "/_count", query));
    if (counted.status != 200) return HttpError(counted, "_count");
    const Json count = ParseJsonOrDiscarded(counted.body);
    if (!count.is_object() || !count.contains("count") || !count["count"].is_number_unsigned()) {
      return Internal(where_ + ": the _count response has no count");
    }
    if (count["count"].get<uint64_t>() <= live_in_view) return Status::Ok();
    return ScrollLiveIds(kScrollPage, [&](std::span<const std::string> ids) -> Status {
      for (const std::string& id : ids) {
        if (!known.contains(id)) {
          differences.push_back({Difference::Kind::kExtra, id, "the view has a document of no entity in storage"});
        }
      }
      return Status::Ok();
    });
  }

  Status Refresh() {
    ASSIGN_OR_RETURN(HttpResponse refreshed, Send("POST", index_path_ + "/_refresh"));
    if (refreshed.status != 200) return HttpError(refreshed, "_refresh");
    return Status::Ok();
  }

  // The ids of the live documents, `page` per scroll page.
  Status ScrollLiveIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) {
    std::string body = R"({"size":)" + std::to_string(std::max<size_t>(1, page)) +
                       R"(,"_source":false,"sort":["_doc"],"query":)" + std::string(kLiveQuery) + "}";
    ASSIGN_OR_RETURN(HttpResponse reply,
                     Send("POST", index_path_ + "/_search?scroll=1m&filter_path=_scroll_id,hits.hits._id", body));
    std::string scroll_id;
    std::vector<std::string> ids;
    Status st = Status::Ok();
    for (;;) {
      if (reply.status != 200) {
        st = HttpError(reply, "scrolling the index");
        break;
      }
      const Json doc = ParseJsonOrDiscarded(reply.body);
      if (!doc.is_object()) {
        st = Internal(where_ + ": a scroll response is not JSON");
        break;
      }
      scroll_id = doc.value("_scroll_id", "");
      const Json* hits = doc.contains("hits") && doc["hits"].contains("hits") ? &doc["hits"]["hits"] : nullptr;
      if (hits == nullptr || !hits->is_array() || hits->empty()) break;
      ids.clear();
      for (const Json& hit : *hits) ids.push_back(hit.value("_id", ""));
      st = each(ids);
      if (!st.ok() || scroll_id.empty()) break;
      std::string next = R"({"scroll":"1m","scroll_id":)";
      AppendJsonString(next, scroll_id);
      next += "}";
      Result<HttpResponse> r = Send("POST", "/_search/scroll?filter_path=_scroll_id,hits.hits._id", next);
      if (!r.ok()) {
        st = r.status();
        break;
      }
      reply = std::move(*r);
    }
    if (!scroll_id.empty()) {
      std::string clear = R"({"scroll_id":)";
      AppendJsonString(clear, scroll_id);
      clear += "}";
      (void)Send("DELETE", "/_search/scroll", clear);  // it expires by itself otherwise
    }
    return st;
  }

  const config::SinkConfig cfg_;
  const ElasticsearchSinkOptions& es_;
  std::unique_ptr<RestClient> client_;
  std::string index_;       // the index (or alias) written; a shadow's is set by its first Open()
  std::string index_path_;  // "/" + index_, encoded
  std::string where_;       // "sink 'x' (elasticsearch URL, index I)" for messages
  // Set on a rebuild shadow: the live index name it takes over, and whether
  // its first Open() has picked and cleared its own index.
  std::string shadow_of_;
  bool shadow_prepared_ = false;
  std::vector<Lane> lanes_;  // made at the first batch (MakeLanes)
  size_t next_lane_ = 0;     // the lane of the next chunk sent
  std::deque<InFlight> in_flight_;  // sent, oldest first
  std::vector<std::unique_ptr<RestClient>> lane_clients_;  // the connections of lanes 1..
};

}  // namespace

std::string IndexName(const config::SinkConfig& sink) {
  const std::string_view pattern = sink.Options<ElasticsearchSinkOptions>().index;
  std::string index;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.substr(i, 6) == "{type}") {
      index += sink.entity;
      i += 6;
    } else {
      index += pattern[i++];
    }
  }
  return index;
}

RestClientOptions ClientOptions(const config::SinkConfig& sink) {
  const ElasticsearchSinkOptions& es = sink.Options<ElasticsearchSinkOptions>();
  RestClientOptions options;
  options.base_url = es.url;
  options.username = es.username;
  options.password = es.password;
  options.api_key = es.api_key;
  options.connect_timeout = es.connect_timeout;
  options.request_timeout = es.request_timeout;
  options.tls_ca = es.tls.ca;
  options.tls_cert = es.tls.cert;
  options.tls_key = es.tls.key;
  options.verify_host = es.tls.verify == config::TlsClientOptions::Verify::kIdentity;
  return options;
}

Result<std::unique_ptr<Sink>> MakeElasticsearchSink(const config::SinkConfig& sink, const config::Config& /*global*/) {
  if (sink.type != "elasticsearch") return InvalidArgument("sink '" + sink.name + "' is not an elasticsearch sink");
  if (sink.Options<ElasticsearchSinkOptions>().url.empty()) {
    return InvalidArgument("sink '" + sink.name + "': url is required");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RestClient> client, RestClient::Make(ClientOptions(sink)));
  return std::unique_ptr<Sink>(std::make_unique<ElasticsearchSink>(sink, std::move(client)));
}

}  // namespace sluice::connectors::elasticsearch
