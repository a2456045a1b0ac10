// Assignment: which live member (a sync engine, a writer) should own each
// partition of a scope (DESIGN 10). Every member computes it alone from the
// same inputs (the members with a recent heartbeat, sql::LeaseTable), so
// they agree without talking to each other; the leases, not this function,
// decide who may write (two members with different views of who is alive
// each want some partitions, and the lease goes to one of them).
//
// Rendezvous (highest random weight) hashing with bounded loads: each
// partition ranks the members by murmur2 of (member, scope, type,
// partition) and goes, in partition order, to the first of its ranking that
// has room: each member holds floor(partitions / members), and the first
// (partitions % members) to get there one more. So the load differs by at
// most one partition between members, and a member joining or leaving moves few
// partitions besides its own share: the assignment is stable, which keeps a
// rebalance incremental (only the moved partitions stop).
//
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice {

// partition -> member, for every partition in [0, partitions); empty when
// there are no members. `members` may be in any order and must not repeat.
std::map<uint32_t, std::string> Assign(const std::string& scope, const std::string& type, uint32_t partitions,
                                       const std::vector<std::string>& members);

}  // namespace sluice
