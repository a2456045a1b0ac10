// The MariaDB/MySQL lease table (sql/tables.h LeaseTable): sluice_leases,
// sluice_lease_holders, sluice_lease_log and sluice_members, and the claim
// of a member's name (GET_LOCK on the table's session).
#include <cstdio>
#include <optional>
#include <set>

#include "core/partitioner.h"
#include "sql/mariadb_session.h"
#include "sql/mariadb_tables.h"
#include "sql/schema.h"

namespace sluice::sql {
namespace {

class MariaDbLeaseTable : public LeaseTable {
 public:
  explicit MariaDbLeaseTable(ConnectParams params) : session_(std::move(params)) {}

  // The owner's row in sluice_lease_holders carries the expiry of all its
  // leases of (scope, type) on this server: a round renews it (one row,
  // whatever the partition count) and, when it asks for exactly the leases
  // it knows it holds, reads back in one aggregate, in the same transaction,
  // that the leases naming it are exactly those, under the tokens it knows.
  // Otherwise (a start, a
  // rebalance, a lease lost, a lease naming it that it forgot) it locks the
  // lease rows and their owners' rows, takes the free or expired ones, and
  // lets go of the ones naming it that it did not ask for: a renewal keeps
  // every lease naming its owner alive, so none may be left behind.
  Result<std::map<uint32_t, uint64_t>> Acquire(const std::string& scope, const std::string& type,
                                               const std::vector<uint32_t>& partitions, const std::string& owner,
                                               std::chrono::milliseconds ttl,
                                               const std::map<uint32_t, uint64_t>& known) override {
    std::map<uint32_t, uint64_t> held;
    if (partitions.empty()) return held;
    ASSIGN_OR_RETURN(Connection * c, Ready());
    const std::string key = LeaseKey(*c, scope, type);
    const std::string in = PartitionList(partitions);
    const std::string until = "NOW(6) + INTERVAL " + std::to_string(ttl.count() * 1000) + " MICROSECOND";
    std::string me;
    c->AppendQuoted(me, owner);
    std::string renew = "INSERT INTO sluice_lease_holders (scope, entity_type, owner, expires_at) VALUES (";
    c->AppendQuoted(renew, scope);
    renew += ',';
    c->AppendQuoted(renew, type);
    renew += ',' + me + ',' + until + ") ON DUPLICATE KEY UPDATE expires_at=VALUES(expires_at)";
    const std::set<uint32_t> asked(partitions.begin(), partitions.end());
    bool all_known = known.size() == asked.size();
    for (const uint32_t p : asked) all_known = all_known && known.count(p);
    if (all_known) {
      // Renewed (which locks its row: a takeover of its leases that locked
      // it first has committed by then, and shows below), and kept only if
      // the leases naming it are exactly those it knows, tokens included.
      // The same partitions (a list of constants, which the server searches
      // by halves) and the same sum of tokens: a lease's token only grows,
      // so an equal sum over the same partitions means the same tokens.
      uint64_t sum = 0;
      for (const auto& [p, token] : known) sum += token;
      bool changed = false;
      const Status kept = InTransaction(*c, [&]() -> Status {
        RETURN_IF_ERROR(c->Execute(renew).status());
        ASSIGN_OR_RETURN(auto mine, c->Query("SELECT COUNT(*), COALESCE(SUM(partition_id IN (" + in +
                                             ")), 0), COALESCE(SUM(token), 0) FROM sluice_leases WHERE " + key +
                                             " AND owner=" + me));
        changed = mine.empty() || U64(mine[0].at(0)) != known.size() || U64(mine[0].at(1)) != known.size() ||
                  U64(mine[0].at(2)) != sum;
        // Rolled back then: the full path renews it with what it finds.
        return changed ? Aborted("the leases naming it changed") : Status::Ok();
      });
      if (kept.ok()) return known;
      if (!changed) return kept;
    }
    // The rows first, in statements of their own: inside the transaction
    // their shared locks would be upgraded by the FOR UPDATE below, and two
    // engines asking for the same leases would deadlock. Every owner gets a
    // row of sluice_lease_holders (an expired one when it had none), so that
    // the transaction can lock it.
    std::string rows;
    for (const uint32_t p : partitions) {
      rows += rows.empty() ? "(" : ",(";
      c->AppendQuoted(rows, scope);
      rows += ',';
      c->AppendQuoted(rows, type);
      rows += "," + std::to_string(p) + ")";
    }
    RETURN_IF_ERROR(
        c->Execute("INSERT IGNORE INTO sluice_leases (scope, entity_type, partition_id) VALUES " + rows).status());
    RETURN_IF_ERROR(c->Execute("INSERT IGNORE INTO sluice_lease_holders (scope, entity_type, owner) SELECT DISTINCT "
                               "scope, entity_type, owner FROM sluice_leases WHERE " + key + " AND partition_id IN (" +
                               in + ") AND owner<>''")
                        .status());
    // The leases naming it that it did not ask for, to let go: found
    // without locks (only this owner's own process makes rows naming it),
    // locked below with the others by their keys.
    std::vector<uint32_t> lock = partitions;
    {
      ASSIGN_OR_RETURN(auto named, c->Query("SELECT partition_id FROM sluice_leases WHERE " + key + " AND owner=" + me));
      for (const auto& r : named) {
        const uint32_t p = static_cast<uint32_t>(U64(r.at(0)));
        if (!asked.count(p)) lock.push_back(p);
      }
    }
    RETURN_IF_ERROR(InTransaction(*c, [&]() -> Status {
      held.clear();
      // The lease rows (those asked for and those naming it), then every
      // row of their owners, expired or not, locked in that order as every
      // taker does: an owner's renewal waits for a takeover of its leases
      // to commit and then finds them gone; a takeover waits for a renewal.
      // Its own row is renewed last, in this transaction: a round that
      // fails renews nothing, so a lease it forgot is not kept alive.
      ASSIGN_OR_RETURN(auto current, c->Query("SELECT partition_id, owner, token, expires_at > NOW(6) FROM sluice_leases"
                                              " WHERE " + key + " AND partition_id IN (" + PartitionList(lock) +
                                              ") FOR UPDATE"));
      std::set<std::string> owners;
      for (const auto& r : current) {
        if (!r.at(1).value_or("").empty()) owners.insert(r.at(1).value_or(""));
      }
      std::set<std::string> live_owners;
      if (!owners.empty()) {
        std::string list;
        for (const std::string& o : owners) {
          list += list.empty() ? "" : ",";
          c->AppendQuoted(list, o);
        }
        ASSIGN_OR_RETURN(auto holders, c->Query("SELECT owner, expires_at > NOW(6) FROM sluice_lease_holders WHERE " +
                                                key + " AND owner IN (" + list + ") FOR UPDATE"));
        for (const auto& r : holders) {
          if (U64(r.at(1)) != 0) live_owners.insert(r.at(0).value_or(""));
        }
      }
      RETURN_IF_ERROR(c->Execute(renew).status());
      std::vector<uint32_t> take;
      std::map<uint32_t, uint64_t> forgotten;  // naming it, not asked for: let go
      std::set<std::string> taken_from;       // other owners whose expired leases it takes
      for (const auto& r : current) {
        const uint32_t p = static_cast<uint32_t>(U64(r.at(0)));
        const std::string holder = r.at(1).value_or("");
        const bool live = !holder.empty() && (U64(r.at(3)) != 0 || live_owners.count(holder));
        const bool mine = holder == owner;
        const uint64_t token = U64(r.at(2));
        const auto k = known.find(p);
        if (!asked.count(p)) {
          if (mine) forgotten[p] = token;
        } else if (mine && k != known.end() && k->second == token) {
          // Its own lease with the token it knows stays its own even when a
          // late round let it expire: nobody took it meanwhile (same token).
          held[p] = token;
        } else if (!live || mine) {
          if (!holder.empty() && !mine) taken_from.insert(holder);
          take.push_back(p);
          held[p] = token + 1;
        }
      }
      if (!forgotten.empty()) {
        const std::string which = " AND owner=" + me + " AND (" + PartitionTokens(forgotten) + ")";
        RETURN_IF_ERROR(c->Execute("UPDATE sluice_lease_log SET ended_at=LEAST(ended_at, NOW(6)) WHERE " + key + which)
                            .status());
        RETURN_IF_ERROR(c->Execute("UPDATE sluice_leases SET owner='', expires_at='1970-01-01 00:00:01.000000' "
                                   "WHERE " + key + which)
                            .status());
      }
      if (take.empty()) return Status::Ok();
      const std::string which = " AND partition_id IN (" + PartitionList(take) + ")";
      // The holds it ends: a former process of its own now (cut), another
      // owner's when that one's validity ran out. The owners' rows are
      // locked above, so the join reads them as they are.
      RETURN_IF_ERROR(c->Execute("UPDATE sluice_lease_log g JOIN sluice_leases l USING (scope, entity_type, "
                                 "partition_id, token) LEFT JOIN sluice_lease_holders h ON h.scope=l.scope AND "
                                 "h.entity_type=l.entity_type AND h.owner=l.owner SET g.ended_at=LEAST(g.ended_at, "
                                 "IF(l.owner=" + me + ", NOW(6), GREATEST(l.expires_at, COALESCE(h.expires_at, "
                                 "l.expires_at)))) WHERE " + LeaseKey(*c, scope, type, "l.") + " AND l.owner<>''"
                                 " AND l.partition_id IN (" + PartitionList(take) + ")")
                          .status());
      if (!taken_from.empty()) {
        std::string list;
        for (const std::string& o : taken_from) {
          list += list.empty() ? "" : ",";
          c->AppendQuoted(list, o);
        }
        RETURN_IF_ERROR(c->Execute("UPDATE sluice_lease_holders SET takeovers=takeovers+1 WHERE " + key +
                                   " AND owner IN (" + list + ")")
                            .status());
      }
      RETURN_IF_ERROR(c->Execute("UPDATE sluice_leases SET owner=" + me + ", token=token+1, taken_at=NOW(6), "
                                 "expires_at=" + until + " WHERE " + key + which)
                          .status());
      return c->Execute("INSERT IGNORE INTO sluice_lease_log (scope, entity_type, partition_id, token, owner, taken_at,"
                        " ended_at) SELECT scope, entity_type, partition_id, token, owner, taken_at, '" +
                        std::string(kLeaseOpen) + "' FROM sluice_leases WHERE " + key + which)
          .status();
    }));
    return held;
  }

  Status Release(const std::string& scope, const std::string& type, const std::map<uint32_t, uint64_t>& held,
                 const std::string& owner) override {
    if (held.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(Connection * c, Ready());
    std::string me;
    c->AppendQuoted(me, owner);
    const std::string tokens = " AND (" + PartitionTokens(held) + ")";
    // The lease rows first, then the owner's row (read by the log's
    // update), in the order Acquire locks them: the other order deadlocks
    // with a takeover.
    return InTransaction(*c, [&]() -> Status {
      RETURN_IF_ERROR(c->Execute("UPDATE sluice_leases SET owner='', expires_at='1970-01-01 00:00:01.000000' WHERE " +
                                 LeaseKey(*c, scope, type) + " AND owner=" + me + tokens)
                          .status());
      // A hold ends now, or when its owner's leases expired if they did
      // (one already taken over ended earlier).
      return c->Execute("UPDATE sluice_lease_log g LEFT JOIN sluice_lease_holders h ON h.scope=g.scope AND "
                        "h.entity_type=g.entity_type AND h.owner=g.owner SET g.ended_at=LEAST(g.ended_at, NOW(6), "
                        "COALESCE(h.expires_at, NOW(6))) WHERE " + LeaseKey(*c, scope, type, "g.") + " AND g.owner=" +
                        me + tokens)
          .status();
    });
  }

  Result<std::vector<LeaseSpan>> History(const std::string& scope) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    // A hold that runs ends when its owner's leases expire.
    std::string q = "SELECT g.scope, g.entity_type, g.partition_id, g.token, g.owner,"
                    " FLOOR(UNIX_TIMESTAMP(g.taken_at) * 1000), FLOOR(UNIX_TIMESTAMP(IF(g.ended_at >= '" +
                    std::string(kLeaseOpen) + "', COALESCE(h.expires_at, g.taken_at), g.ended_at)) * 1000)"
                    " FROM sluice_lease_log g LEFT JOIN sluice_lease_holders h ON h.scope=g.scope AND"
                    " h.entity_type=g.entity_type AND h.owner=g.owner";
    if (!scope.empty()) {
      q += " WHERE g.scope=";
      c->AppendQuoted(q, scope);
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q + " ORDER BY g.scope, g.entity_type, g.partition_id, g.token"));
    std::vector<LeaseSpan> out;
    for (const auto& r : rows) {
      out.push_back({r.at(0).value_or(""), r.at(1).value_or(""), static_cast<uint32_t>(U64(r.at(2))), U64(r.at(3)),
                     r.at(4).value_or(""), I64(r.at(5)), I64(r.at(6))});
    }
    return out;
  }

  Result<std::vector<LeaseRow>> List(const std::string& scope) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    std::string q = "SELECT l.scope, l.entity_type, l.partition_id, l.owner, l.token, TIMESTAMPDIFF(MICROSECOND,"
                    " NOW(6), GREATEST(l.expires_at, COALESCE(h.expires_at, l.expires_at))) DIV 1000"
                    " FROM sluice_leases l LEFT JOIN sluice_lease_holders h ON h.scope=l.scope AND"
                    " h.entity_type=l.entity_type AND h.owner=l.owner";
    if (!scope.empty()) {
      q += " WHERE l.scope=";
      c->AppendQuoted(q, scope);
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q + " ORDER BY l.scope, l.entity_type, l.partition_id"));
    std::vector<LeaseRow> out;
    for (const auto& r : rows) {
      LeaseRow l;
      l.scope = r.at(0).value_or("");
      l.entity_type = r.at(1).value_or("");
      l.partition = static_cast<uint32_t>(U64(r.at(2)));
      l.owner = r.at(3).value_or("");
      l.token = U64(r.at(4));
      l.expires_in_ms = I64(r.at(5));
      out.push_back(std::move(l));
    }
    return out;
  }

  Result<bool> Claim(const std::string& group, const std::string& member) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    ASSIGN_OR_RETURN(const bool got, TakeNamedLock(*c, group, member));
    if (got) claimed_ = {group, member};
    return got;
  }

  Status Heartbeat(const std::string& group, const std::string& member, const std::string& address) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    if (claimed_ && !claim_held_) {
      // A new session: the claim went with the old one.
      ASSIGN_OR_RETURN(const bool got, TakeNamedLock(*c, claimed_->first, claimed_->second));
      if (!got) {
        return FailedPrecondition("another process took the name '" + claimed_->second + "' while this one was "
                                  "reconnecting");
      }
    }
    std::string q = "INSERT INTO sluice_members (member_group, member, address) VALUES (";
    c->AppendQuoted(q, group);
    q += ',';
    c->AppendQuoted(q, member);
    q += ',';
    c->AppendQuoted(q, address);
    return c->Execute(q + ") ON DUPLICATE KEY UPDATE address=VALUES(address), heartbeat_at=NOW(6)").status();
  }

  Result<std::vector<MemberRow>> Members(const std::string& group, std::chrono::milliseconds ttl) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    std::string q = "SELECT member, address, TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) DIV 1000"
                    " FROM sluice_members WHERE member_group=";
    c->AppendQuoted(q, group);
    q += " AND heartbeat_at > NOW(6) - INTERVAL " + std::to_string(ttl.count() * 1000) + " MICROSECOND ORDER BY member";
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    std::vector<MemberRow> out;
    for (const auto& r : rows) out.push_back({r.at(0).value_or(""), r.at(1).value_or(""), I64(r.at(2))});
    return out;
  }

  Status Leave(const std::string& group, const std::string& member) override {
    ASSIGN_OR_RETURN(Connection * c, Ready());
    std::string q = "DELETE FROM sluice_members WHERE member_group=";
    c->AppendQuoted(q, group);
    q += " AND member=";
    c->AppendQuoted(q, member);
    return c->Execute(q).status();
  }

 private:
  // GET_LOCK of a name unique to (database, group, member), at most 64
  // characters whatever the member's length: "sluice:" and the murmur2 of
  // each, in hex.
  Result<bool> TakeNamedLock(Connection& c, const std::string& group, const std::string& member) {
    ASSIGN_OR_RETURN(auto db, c.Query("SELECT DATABASE()"));
    const std::string scope = db.empty() ? "" : db.at(0).at(0).value_or("");
    char name[64];
    std::snprintf(name, sizeof name, "sluice:%08x:%08x:%08x", static_cast<uint32_t>(Murmur2(scope)),
                  static_cast<uint32_t>(Murmur2(group)), static_cast<uint32_t>(Murmur2(member)));
    std::string q = "SELECT GET_LOCK(";
    c.AppendQuoted(q, name);
    ASSIGN_OR_RETURN(auto rows, c.Query(q + ", 0)"));
    claim_held_ = !rows.empty() && rows.at(0).at(0) == "1";
    return claim_held_;
  }

  // The session, with both tables made (a database from before them).
  Result<Connection*> Ready() {
    if (!session_.healthy()) claim_held_ = false;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    if (!ready_ || !session_.healthy()) {
      RETURN_IF_ERROR(c->Execute(kLeasesDdl).status());
      RETURN_IF_ERROR(c->Execute(kLeaseHoldersDdl).status());
      RETURN_IF_ERROR(c->Execute(kLeaseLogDdl).status());
      RETURN_IF_ERROR(c->Execute(kMembersDdl).status());
      ready_ = true;
    }
    return c;
  }

  Session session_;
  bool ready_ = false;
  std::optional<std::pair<std::string, std::string>> claimed_;  // (group, member) once claimed
  bool claim_held_ = false;  // this session holds the claim's lock
};

}  // namespace

std::unique_ptr<LeaseTable> MariaDbStorage::OpenLeases() { return std::make_unique<MariaDbLeaseTable>(params_); }

}  // namespace sluice::sql
