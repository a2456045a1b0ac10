/*
 * sluice sink plugins: the C ABI between the sluice host and a connector
 * built as a shared library (DESIGN 5). This header is the whole contract;
 * a plugin needs nothing else from sluice. C++ authors normally use
 * <sluice/plugin_sdk.h> on top of it.
 *
 * Loading. The host dlopen()s each library listed under `plugins:` in the
 * YAML and looks up ONE symbol, SLUICE_PLUGIN_ENTRY_SYMBOL, a function of type
 * sluice_plugin_entry_fn. It returns a static descriptor (sluice_plugin) that
 * must be valid without any side effect. The host refuses the library when
 * the descriptor's abi_major differs from SLUICE_PLUGIN_ABI_MAJOR; a higher
 * abi_minor on either side is fine. Then the host calls init() once with its
 * callback table. The host never unloads a library.
 *
 * Growing structs. Within a major version fields are only ever appended, and
 * every struct passed alone starts with its own size (struct_size), so each
 * side reads only the fields both know and treats the others as absent.
 * Arrays of structs are walked with a stride both sides agree on:
 *   - sluice_plugin.sink_types is laid out with the plugin's
 *     sizeof(sluice_sink_type); the host takes it from the struct_size of
 *     the first element.
 *   - apply()'s events and results are laid out with the PLUGIN's
 *     sizeof(sluice_event) and sizeof(sluice_event_result), which it declares
 *     in sluice_sink_type.event_size and .event_result_size (ABI 1.2; a
 *     plugin built for 1.0 or 1.1 gets their 1.1 sizes). So a plugin always
 *     walks both arrays with its own sizeof. The host copies into each event
 *     the fields both sides know, sets its struct_size to the bytes it
 *     filled and zeroes the rest; it zeroes the results and reads back only
 *     the fields both sides know.
 *
 * Shutdown. The host calls shutdown() once for each library whose init()
 * succeeded, when the process is done with plugins: after every sink of the
 * library has been closed and destroyed, at the end of every sluice command,
 * the failing ones included (not after a crash or a kill). A sink still
 * alive then (a bug) delays it until that sink is destroyed.
 *
 * Sinks. A plugin declares one or more sink types by name. For each sink of
 * such a `type:` in the YAML the host calls create() with the sink's options
 * (every key of the sink except name, type, entity, on_error, batch_max and
 * push) as a JSON object, then open(), apply()... and finally close() and
 * destroy(). create() must only check and keep the options: the host also
 * calls it (then destroy()) from `sluice config check`.
 *
 * Durability (ABI 1.2; hosts before it never called flush). What
 * apply() answers for an event is an acknowledgement: SLUICE_APPLIED means
 * the view holds the event once the sink's next successful flush() returns
 * (at once, for a sink that writes through); SLUICE_STALE means the view
 * holds, or after this instance's next flush will hold, this version or a
 * newer one; SLUICE_REJECTED is final (the host dead-letters the event before
 * its offset moves). The host calls flush() before it saves offsets that
 * pass events the sink acknowledged since its last successful flush: about
 * once per engine.offset_flush_interval while events flow, before it pauses
 * the sink, moves its offsets (rewind, rebuild) or closes it after a failed
 * apply, and when it stops; `sluice deadletters retry` flushes before it
 * marks a dead letter resolved. When flush() fails, or the process dies before
 * it, the host applies those events again, to this instance after close()
 * and open() or to a new one after a restart: so a sink must never answer
 * SLUICE_STALE from a buffer that a failed flush or close() may have
 * dropped, and open() must learn what the view holds from what is durable.
 * The writer's push path (SLUICE_CAP_CAN_PUSH) never calls flush(): a sink
 * that buffers should not declare it.
 *
 * Threads. init/shutdown and create run on one thread at a time. Each sink
 * instance is called by one thread at a time (possibly a different one from
 * call to call); different instances may be called concurrently. Host
 * callbacks may be called from any thread.
 *
 * Memory. Everything the host passes (events, options, strings) is owned by
 * the host and valid only during the call. Everything the plugin returns
 * (descriptor, error messages, rejection reasons, rows given to a scan
 * callback) is owned by the plugin: the descriptor forever, messages and
 * reasons until the next call on the same sink (or, for init/create, until
 * the next init/create). No exception may cross this boundary, and no C++
 * type appears in it.
 */
#ifndef SLUICE_PLUGIN_H_
#define SLUICE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define SLUICE_PLUGIN_ABI_MAJOR 1
#define SLUICE_PLUGIN_ABI_MINOR 3

/* The one symbol the host looks up in a plugin library. */
#define SLUICE_PLUGIN_ENTRY sluice_plugin_entry
#define SLUICE_PLUGIN_ENTRY_SYMBOL "sluice_plugin_entry"

/* Status codes: what the caller should do (DESIGN 4.3). */
typedef enum sluice_status {
  SLUICE_OK = 0,
  /* Retry later with backoff (connection refused, timeout, disk full).
     From apply(): nothing in the batch counts as applied. */
  SLUICE_UNAVAILABLE = 1,
  /* Stop and tell the operator what to fix (auth, missing table, bad path). */
  SLUICE_MISCONFIGURED = 2,
  /* The options given to create() are wrong (a config error). */
  SLUICE_INVALID_OPTIONS = 3,
  /* The call is not supported by this plugin (e.g. scan). */
  SLUICE_UNSUPPORTED = 4,
  /* A bug or an unexpected failure inside the plugin. */
  SLUICE_INTERNAL = 5
} sluice_status;

/* Borrowed bytes: data[0..size), not NUL-terminated, may be NULL when size is 0. */
typedef struct sluice_str {
  const char* data;
  size_t size;
} sluice_str;

/* Log levels of sluice_host_api.log. */
typedef enum sluice_log_level {
  SLUICE_LOG_DEBUG = 0,
  SLUICE_LOG_INFO = 1,
  SLUICE_LOG_WARN = 2,
  SLUICE_LOG_ERROR = 3
} sluice_log_level;

/* Callbacks the host offers to a plugin; valid from init() until shutdown().
   Every function is thread-safe. */
typedef struct sluice_host_api {
  uint32_t struct_size; /* sizeof(sluice_host_api) as the host knows it */
  uint16_t abi_major;   /* the host's SLUICE_PLUGIN_ABI_MAJOR */
  uint16_t abi_minor;   /* the host's SLUICE_PLUGIN_ABI_MINOR */
  void* context;        /* pass back as the first argument of each callback */
  /* One log line; the host adds the time, level and plugin name. Do not log
     per event in normal operation. */
  void (*log)(void* context, sluice_log_level level, sluice_str message);
  /* Adds delta to a counter. name: [a-z_][a-z0-9_]*, ending in _total; the
     host names it sluice_plugin_<name>{plugin="...",sink="<sink>"}. sink may
     be empty. Other names are ignored (with a rate-limited warning). */
  void (*counter_add)(void* context, sluice_str name, sluice_str sink, uint64_t delta);
  /* Sets a gauge, exported like a counter; name: [a-z_][a-z0-9_]*, not
     ending in _total. */
  void (*gauge_set)(void* context, sluice_str name, sluice_str sink, double value);
  /* Wall-clock time, microseconds since the Unix epoch (UTC). */
  int64_t (*now_us)(void* context);
  /* Monotonic time in microseconds, for deadlines and durations. */
  int64_t (*monotonic_us)(void* context);
} sluice_host_api;

/* One committed event. All strings are borrowed for the apply() call.
   apply() gets an array of them laid out with the plugin's
   sizeof(sluice_event) (see "Growing structs" at the top). */
typedef struct sluice_event {
  uint32_t struct_size;    /* bytes the host filled; fields past them are zero */
  sluice_str entity_type;  /* e.g. "account" */
  uint32_t partition;      /* stable_hash(entity_id) % partitions */
  uint64_t event_id;       /* offset inside the partition */
  sluice_str entity_id;    /* 1..64 printable ASCII bytes */
  uint64_t version;        /* the entity's version after this event: 1, 2, 3, ... */
  uint8_t deleted;         /* 1: the event deleted the entity */
  sluice_str state;        /* JSON text of the whole state; empty when deleted */
  sluice_str command_name;
  sluice_str command_id;
  int64_t committed_at_us; /* commit time, microseconds since the Unix epoch */
  /* ---- ABI 1.3: the whole event, for a sink type with SLUICE_CAP_FULL_EVENTS
     (empty otherwise, and from a 1.2 host) ---- */
  sluice_str request;  /* JSON text of the command's request */
  sluice_str response; /* JSON text of what the command answered */
  sluice_str before;   /* JSON text of the state before the event; empty when the
                          entity did not exist before it (a creation, or the first
                          event after a delete) */
} sluice_event;

/* What happened to one event of a successful apply(). */
typedef enum sluice_outcome {
  SLUICE_APPLIED = 0,  /* the view now reflects this event */
  SLUICE_STALE = 1,    /* the view already held this version or a newer one */
  SLUICE_REJECTED = 2  /* refused for good; reason says why (dead-lettered) */
} sluice_outcome;

/* Filled by the plugin, one per event; the host zeroes the array first
   (so every event starts as SLUICE_APPLIED with no reason). The array is
   laid out with the plugin's sizeof(sluice_event_result). */
typedef struct sluice_event_result {
  uint32_t outcome;  /* a sluice_outcome */
  sluice_str reason; /* SLUICE_REJECTED: plugin-owned text, valid until the next call */
} sluice_event_result;

/* One entity as the view holds it, reported by scan(). */
typedef struct sluice_row {
  uint32_t struct_size;
  sluice_str entity_id;
  uint64_t version;
  uint8_t deleted; /* 1: a tombstone (the entity was deleted at `version`) */
  sluice_str state; /* JSON text as stored; empty for a tombstone */
} sluice_row;

/* Receives rows from scan(); returns 0 to go on, non-zero to stop early. */
typedef int (*sluice_row_fn)(void* context, const sluice_row* row);

/* What create() gets about the sink. Borrowed for the call. */
typedef struct sluice_sink_config {
  uint32_t struct_size;
  sluice_str sink_name;    /* the sink's `name:` */
  sluice_str entity_type;  /* the sink's `entity:` */
  sluice_str options_json; /* a JSON object of the sink's own keys */
  sluice_str config_dir;   /* directory of the YAML file, for relative paths */
} sluice_sink_config;

/* Capability bits of sluice_sink_type.capabilities. */
#define SLUICE_CAP_POINT_VIEW 0x1u    /* one row/key/document per entity */
#define SLUICE_CAP_CAN_PUSH 0x2u      /* the writer may push to it */
#define SLUICE_CAP_KEEPS_OFFSETS 0x4u /* stores offsets itself (reserved) */
#define SLUICE_CAP_FULL_EVENTS 0x8u   /* ABI 1.3: apply() gets request, response and before */

/* One sink type a plugin provides. `sink` below is what create() returned.
   Functions return a sluice_status; on failure the message is
   last_error(sink). */
typedef struct sluice_sink_type {
  uint32_t struct_size;
  const char* type_name; /* the YAML `type:`, [a-z][a-z0-9_]{0,31}, unique per process */
  uint32_t capabilities; /* SLUICE_CAP_* bits */
  /* Checks and keeps the options; on success sets *sink. On failure
     (usually SLUICE_INVALID_OPTIONS) the message is sluice_plugin.last_error(). */
  int (*create)(const sluice_sink_config* config, void** sink);
  /* Connects and prepares; may be called again after a failure. Never sleeps
     in a retry loop. */
  int (*open)(void* sink);
  /* Applies `count` events of one entity type in event order (one entity
     may appear several times, oldest first). Every write is guarded by the
     version check: an event applies only when its version is greater than
     the version the view holds for the entity, tombstones included.
     SLUICE_OK: results[i] holds each event's outcome. SLUICE_UNAVAILABLE or
     SLUICE_MISCONFIGURED: the batch failed as a whole (results are ignored). */
  int (*apply)(void* sink, const sluice_event* events, size_t count, sluice_event_result* results);
  /* Makes every event this instance acknowledged since its last successful
     flush durable in the view (see "Durability" at the top). May be NULL:
     then apply() is durable when it returns. SLUICE_OK, or a failure: the
     host closes the sink and applies those events again, after open();
     SLUICE_UNAVAILABLE is retried with backoff, any other failure stops the
     sink until the operator fixed the cause. Never sleeps in a retry loop. */
  int (*flush)(void* sink);
  /* A cheap round trip to the view's server. May be NULL (always healthy). */
  int (*health)(void* sink);
  /* Calls fn for every entity the view holds, tombstones included, for
     `sluice verify` and the conformance kit. May be NULL (verify then
     reports the sink as not verifiable). */
  int (*scan)(void* sink, sluice_row_fn fn, void* fn_context);
  /* Disconnects; the sink may be opened again. May drop what was not
     flushed: the host flushes first when it stops cleanly, and otherwise
     applies those events again. */
  void (*close)(void* sink);
  /* Frees the sink (after close). */
  void (*destroy)(void* sink);
  /* The message of the last failed call on this sink, NUL-terminated;
     valid until the next call on it. Never NULL. */
  const char* (*last_error)(void* sink);

  /* ---- ABI 1.1: rebuild (`sluice rebuild`), optional ----
     Both NULL, or a plugin built for ABI 1.0 (whose struct_size ends before
     them): the host refuses to rebuild sinks of this type and says so.
     A rebuild replays the whole history into a shadow view beside the live
     one, then promotes the shadow while the live sink is paused. */
  /* Creates a new sink instance, *shadow, that writes a fresh view beside
     the one `sink` writes (another file, table, index or key prefix) and
     never touches the live one. Reads only the configuration of `sink`,
     which may not be open. The host then calls open(), apply()... on the
     shadow like on any sink, and close() and destroy() in the end. The
     shadow's first successful open() must replace whatever an earlier,
     abandoned rebuild left with an empty view. */
  int (*make_rebuild_shadow)(void* sink, void** shadow);
  /* Called on the shadow once it holds at least every event the live view
     holds, while the live sink is paused: makes the shadow's view the live
     one (in one atomic step where the store allows it; document where it
     does not) and drops the old view. The live sink instance must carry on
     writing (and scanning) the new view afterwards. */
  int (*promote_rebuild_shadow)(void* shadow);

  /* ---- ABI 1.2: the strides of apply()'s arrays ----
     sizeof(sluice_event) and sizeof(sluice_event_result) as the plugin was
     built (the SDK fills them): the host lays out apply()'s events and
     results with these strides. Each must be a multiple of the struct's
     alignment and at least its ABI 1.0 size. 0, or a plugin built for ABI
     1.0 or 1.1 (whose struct_size ends before them): the 1.1 sizes. */
  uint32_t event_size;
  uint32_t event_result_size;
} sluice_sink_type;

/* The descriptor the entry function returns. */
typedef struct sluice_plugin {
  uint32_t struct_size; /* sizeof(sluice_plugin) as the plugin knows it */
  uint16_t abi_major;   /* SLUICE_PLUGIN_ABI_MAJOR the plugin was built with */
  uint16_t abi_minor;
  const char* name;     /* e.g. "jsonl_sink", for logs */
  const char* version;  /* the plugin's own version, for logs */
  /* Called once after the version check. SLUICE_OK, or a failure whose
     message is last_error(). `host` stays valid until shutdown(). */
  int (*init)(const sluice_host_api* host);
  /* Called once, after every sink of the library was destroyed (see
     "Shutdown" at the top). `host` is not used afterwards. May be NULL. */
  void (*shutdown)(void);
  /* The message of the last failed init() or create(); never NULL. */
  const char* (*last_error)(void);
  size_t sink_type_count;
  const sluice_sink_type* sink_types;
} sluice_plugin;

/* The entry symbol's type: returns the descriptor, no side effects. */
typedef const sluice_plugin* (*sluice_plugin_entry_fn)(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SLUICE_PLUGIN_H_ */
