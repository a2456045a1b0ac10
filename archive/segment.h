// Segment files of the archive (docs/archive.md#segment-files, issue 23):
// the events of one (entity type, partition) in one event_id range, moved
// out of the hot event tables into one compressed, checksummed object.
//
//   segments/<type>/p<NNN>/<first 20 digits>-<last 20 digits>.seg
//
//   magic, format version, the SegmentHeader, the SHA-256 of the body
//   one zstd frame: the body, one length-prefixed binary record per event
//   the SHA-256 of every byte before it
//
// Each entity's first row in a segment holds its whole state; a later row
// of the same entity whose hot row stored a delta (docs/delta.md) holds
// only that delta, and decoding rebuilds its state. A segment never needs
// another segment (nor the hot tables) to give back whole states.
//
// This file is the codec only: what goes in a segment, where it is stored
// and which manifest lists it are the archiver's. Pure functions; safe from
// any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sql/tables.h"

namespace sluice::archive {

// The format version EncodeSegment writes, and the newest DecodeSegment reads.
inline constexpr uint32_t kSegmentFormatVersion = 1;
// The zstd level EncodeSegment uses unless told otherwise.
inline constexpr int kSegmentZstdLevel = 3;
// zstd's window when long-distance matching is on (2^27 = 128 MiB, the
// largest every zstd decoder accepts without being told to allow more).
inline constexpr int kSegmentZstdWindowLog = 27;
// The largest body (the uncompressed records) a segment may hold. Encoding
// refuses a bigger one; decoding refuses a file that declares one before it
// allocates anything for it.
inline constexpr uint64_t kMaxSegmentBodyBytes = uint64_t{1} << 30;
// The largest total size of the decoded rows: their strings (ids, names,
// request, response, state, delta) and 256 bytes for each row. Rebuilt
// states make the rows bigger than the body; encoding refuses a segment
// that would decode to more, decoding stops at it.
inline constexpr uint64_t kMaxSegmentRowBytes = uint64_t{4} << 30;

// What a segment holds: every event of one (entity type, partition) with
// first_event_id <= event_id <= last_event_id that existed (event_ids may
// have gaps), in event_id order.
struct SegmentHeader {
  std::string entity_type;  // a valid type name (core/names.h)
  uint32_t partition = 0;
  uint64_t first_event_id = 0;
  uint64_t last_event_id = 0;  // >= first_event_id
  uint64_t events = 0;         // the number of rows (0 when only parsed from a key)
  bool operator==(const SegmentHeader&) const = default;
};

struct Segment {
  SegmentHeader header;
  // Every column: event_id, entity_id, version, command_id, command_name,
  // expected_version, request, response, state (whole state; "" when
  // deleted), delta (as the hot table stored it, or ""), deleted,
  // committed_at_us. deltas_since_snapshot and delta_bytes_since_snapshot
  // are not stored (0 on decode).
  std::vector<sql::EventRow> rows;
};

// The object key of a segment: "segments/<type>/p<NNN>/<first>-<last>.seg",
// NNN as in sql::EventTableName (zero-padded to at least 3 digits), first and
// last zero-padded to 20 digits so that keys sort in event_id order. The key
// is relative to wherever the archive keeps its objects.
std::string SegmentKey(const std::string& type, uint32_t partition, uint64_t first_event_id,
                       uint64_t last_event_id);

// Parses a key made by SegmentKey: type, partition, first and last filled,
// events 0. nullopt for anything else (a stray file, another padding, an
// invalid type name, first > last).
std::optional<SegmentHeader> ParseSegmentKey(std::string_view key);

struct SegmentEncodeOptions {
  // When > 0, the type's partition count: every row's entity must belong to
  // header.partition (core/partitioner.h), else kInvalidArgument.
  uint32_t partitions = 0;
  int zstd_level = kSegmentZstdLevel;
  // Long-distance matching with a kSegmentZstdWindowLog window: finds the
  // repeats between the whole states of an entity that lie megabytes apart
  // in a segment of many entities (docs/archive.md says what it gains).
  bool long_distance_matching = true;
};

// The segment file. kInvalidArgument, saying which row and what to fix,
// unless: the type is a valid name; first_event_id <= last_event_id;
// header.events == rows.size(); rows are in strictly increasing event_id
// order within [first_event_id, last_event_id]; every row that is not
// deleted has its whole state (a deleted one has none); ids fit their
// columns (entity_id and command_name 64 bytes, command_id 128); the rows
// belong to header.partition (checked when options.partitions > 0); and the
// body and the decoded rows stay within kMaxSegmentBodyBytes and
// kMaxSegmentRowBytes (split the range). A hot row's delta is kept as
// given; the row stores only the delta when applying it to the entity's
// previous row of the segment gives back its state byte for byte.
Result<std::string> EncodeSegment(const Segment& segment, const SegmentEncodeOptions& options = {});

// The segment in `bytes`, every row with its whole state. Checks everything:
// the magic, the format version, the file's checksum, the one zstd frame and
// its size (at most kMaxSegmentBodyBytes), the body's checksum, every
// record, the row count, event_id order and range, and that every delta
// applies. Damage is kInternal "segment ... is damaged: <what>", and never
// a partial or made-up row; a format version newer than this binary's is
// kFailedPrecondition.
Result<Segment> DecodeSegment(std::string_view bytes);

// The SHA-256 of bytes as 64 lower-case hex digits (for the manifest).
std::string Sha256Hex(std::string_view bytes);

}  // namespace sluice::archive
