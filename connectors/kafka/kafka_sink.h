// The built-in kafka sink (see connectors/sink.h for the contract and
// docs/sinks/kafka.md for the user's view).
//
// One record per event on the sink's topic, with acks=all; the record key is the entity id (or
// the key view code set, ChangeEvent::record_key), the
// value the change event (record_codec.h), the headers its entity type,
// version, event id and source partition. Source partition p of the entity
// type goes to topic partition p % (topic partitions): with as many topic
// partitions as entity partitions (the default when the sink creates the
// topic) that is exactly the partition Kafka's own key partitioner would
// choose, and in every case all events of one entity go to one topic
// partition, in order.
//
// Producers (transactional: true, the default): one transactional producer
// per source partition, whose transactional.id (sluice-<sink>-<topic>-<p>) is
// the same in every engine. The engine that takes partition p over makes
// p's producer before it produces anything of p: Kafka then aborts what the
// former owner left in an open transaction and refuses its later records
// (a paused or cut-off engine cannot publish), and the new producer reads
// back the last record of p that is committed. Each Apply() commits one
// transaction per source partition of its batch; read_committed consumers
// (librdkafka's default, not Java's) see a partition's records only once
// committed. A partition's producer without a batch for producer_idle is
// closed at Idle() (each holds librdkafka threads and broker connections),
// and those of partitions the engine lost at Released(); its next batch
// makes it again, which fences and reads back as above. What several
// partitions need together (producers at a TakeOver or a batch; the
// idempotent mode's topic partitions read back at Open or a TakeOver) is
// done read_back_concurrency at a time, each on a thread of its own.
// transactional: false uses one idempotent producer for all
// partitions: right for one engine, but an engine that lost its partitions
// while frozen may publish the batch it had queued.
//
// Apply() returns only after librdkafka's delivery report for every record of
// the batch (and the commit of its transactions), so the engine's offset
// never passes an undelivered event.
// Delivered: kApplied. A record the broker refuses for good (too large,
// invalid): kRejected. Anything else (broker down, timeout): the whole batch
// is kUnavailable; the engine closes and re-opens the sink and retries.
//
// No duplicates after a crash (the engine killed between delivery and its
// next offset flush): transactional, the producer of a partition reads back
// its last committed record (above); idempotent, Open() reads back, for every topic partition, the
// records after the last sluice-positions header and so learns the highest
// event id of every source partition that is already in the topic (and
// TakeOver() again for the topic partitions of the partitions taken over,
// what another engine wrote of them since); Apply()
// then answers kStale for those events instead of producing them again.
// Within one process the same map, fed by delivery reports, keeps a retried
// batch from producing records twice.
//
// Threads: like every Sink, one thread at a time; delivery reports are
// served on that thread (inside Apply). Reading back at once (above), the
// other threads only read the sink (its configuration, the topic's limit,
// and, making producers, where the log ends through its metadata handle)
// and produce nothing; the calling thread keeps what they made.
#pragma once

#include <memory>

#include "connectors/sink.h"

namespace sluice::connectors::kafka {

// Builds a kafka sink for a validated config (not yet opened). The entity's
// partition count comes from global.entities.
Result<std::unique_ptr<Sink>> MakeKafkaSink(const config::SinkConfig& sink, const config::Config& global);

}  // namespace sluice::connectors::kafka
