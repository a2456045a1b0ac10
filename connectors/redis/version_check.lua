-- The version check and write of a run of events, atomic per call because
-- Redis runs a script alone. One call carries up to kEventsPerCall events
-- (redis_sink_impl.h): the per-call cost of EVALSHA (and of a round of RESP
-- parsing) is then shared.
--   ARGV[1] 'j' (json string) or 'h' (hash)   ARGV[2] value ttl in ms, '0': none
--   ARGV[3] tombstone ttl in ms, '0': none     ARGV[4] the tombstone key suffix
--   ARGV[5] the guard: '>' writes a newer version only (Apply), '=' also the
--           same version (Repair kNotOlder), '!' any version (Repair kAny,
--           where a delete of version 0 removes the value and the tombstone)
--   ARGV[6] '1' when a key comes more than once in the call, '0' when every
--           key comes once (the caller knows; the script then keeps each
--           key's state by event, without a table keyed by key)
--   ARGV[1] 'J' is json with KEYS as for hash (a Redis Cluster: every key a
--           call touches is declared, all in one hash slot)
--   json: KEYS = one value key per event; then per event in ARGV its version,
--         or minus its version for a delete, and the value unless a delete.
--         The fewer arguments the cheaper the call: Redis turns each into a
--         Lua string before the script runs. A tombstone key is the value
--         key plus the suffix, built only for the keys that need one.
--   hash: KEYS = per event its value key, then its tombstone key; then per
--         event in ARGV its version, '1' for a delete else '0', n, and n
--         field/value arguments.
-- Returns the number of events when every one was applied (one integer is
-- cheaper to send than one per event), else one element per event: 1
-- applied, 0 stale (the view holds this version or a newer one, in the value
-- or in the tombstone), or an error for that event alone (a key of another
-- type). Such a key is never written. Only a failure of the server (OOM, a
-- replica turned read-only) makes the whole call fail; what the call wrote
-- before it stays, as in any retry.
--
-- json runs the whole call as a handful of commands instead of two or three
-- per event: one MGET of every value key; for the keys without a value, one
-- EXISTS (a key of another type: MGET gives nil for it, EXISTS counts it, and
-- only then is each such key looked at alone) and one MGET of their
-- tombstones; the decisions in event order on those versions; then the final
-- state of each key written: one DEL (values of deleted entities, tombstones
-- of re-created ones) and one MSET (values and tombstones), or a SET with PX
-- per key when a TTL is set. The rule "a value exists => no tombstone" holds
-- after every call, so a value key that exists means its tombstone is absent.
-- Per event the script does as little as it can (Redis runs it alone, so
-- its time is every sink's): no table keyed by key unless keys repeat, no
-- tombstone key built unless needed.
-- hash keeps one HGET + GET per event (HSET goes in slices of 200 arguments,
-- far below Lua's stack limit for unpack).
local fmt, ttl, tttl, suffix, guard = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local wrongtype = {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
local out = {}
local a = 7
local function kept(v, cur)
  if guard == '>' then return v <= cur end
  if guard == '=' then return v < cur end
  return false
end
if fmt == 'j' or fmt == 'J' then
  local n = #KEYS
  local vkeys, tkeys = KEYS, nil  -- vkeys: the value keys, one per event
  if fmt == 'J' then
    n = n / 2
    vkeys, tkeys = {}, {}
    for e = 1, n do
      local k = KEYS[2 * e - 1]
      vkeys[e] = k
      tkeys[k] = KEYS[2 * e]
    end
  end
  local ver, at, del = {}, {}, {}  -- per event: its version (a number), its ARGV index, true if a delete
  for e = 1, n do
    local v = ARGV[a]
    local x = tonumber(v)
    at[e] = a
    if x < 0 or v == '-0' then
      del[e] = true
      ver[e] = -x
      a = a + 1
    else
      ver[e] = x
      a = a + 2
    end
  end
  -- A key's state is kept at its first event in the call (its root): the
  -- version the view holds, whether it has a value or a tombstone, the last
  -- event applied.
  local got = redis.call('MGET', unpack(vkeys))
  local root = nil  -- root[e]: the first event of e's key; nil when every key comes once
  if ARGV[6] ~= '0' then
    local seen = {}
    root = {}
    for e = 1, n do
      local k = vkeys[e]
      local r = seen[k]
      if r == nil then seen[k] = e; r = e end
      root[e] = r
    end
  end
  local cur, hasval, hastomb, bad, last = {}, {}, {}, {}, {}
  local mev, mkeys, mtombs, m = nil, nil, nil, 0
  for e = 1, n do
    if root == nil or root[e] == e then
      local k = vkeys[e]
      local s = got[e]
      if s then
        cur[e] = tonumber(string.match(s, '^{"_version":(%d+)')) or 0
        hasval[e] = true
      else
        cur[e] = 0
        if m == 0 then mev, mkeys, mtombs = {}, {}, {} end
        m = m + 1
        mev[m] = e
        mkeys[m] = k
        mtombs[m] = tkeys and tkeys[k] or k .. suffix
      end
    end
  end
  if m > 0 then
    if redis.call('EXISTS', unpack(mkeys)) > 0 then
      for i = 1, m do
        if redis.call('EXISTS', mkeys[i]) == 1 then bad[mev[i]] = true end
      end
    end
    local t = redis.call('MGET', unpack(mtombs))
    for i = 1, m do
      if t[i] then
        local r = mev[i]
        local tv = tonumber(t[i]) or 0
        if tv > cur[r] then cur[r] = tv end
        hastomb[r] = true
      end
    end
  end
  local applied = 0
  for e = 1, n do
    local r = root and root[e] or e
    local v = ver[e]
    if bad[r] then
      out[e] = wrongtype
    elseif kept(v, cur[r]) then
      out[e] = 0
    else
      cur[r] = v
      last[r] = e
      out[e] = 1
      applied = applied + 1
    end
  end
  local dels, sets, nd, ns = {}, {}, 0, 0
  for r = 1, n do
    local e = last[r]
    if e then
      local k = vkeys[r]
      if del[e] then
        local tomb = tkeys and tkeys[k] or k .. suffix
        if hasval[r] then nd = nd + 1; dels[nd] = k end
        if ver[e] == 0 and guard == '!' then
          nd = nd + 1; dels[nd] = tomb
        elseif tttl ~= '0' then
          redis.call('SET', tomb, string.sub(ARGV[at[e]], 2), 'PX', tttl)
        else
          sets[ns + 1] = tomb; sets[ns + 2] = string.sub(ARGV[at[e]], 2); ns = ns + 2
        end
      else
        if hastomb[r] or guard == '!' then nd = nd + 1; dels[nd] = tkeys and tkeys[k] or k .. suffix end
        if ttl ~= '0' then
          redis.call('SET', k, ARGV[at[e] + 1], 'PX', ttl)
        else
          sets[ns + 1] = k; sets[ns + 2] = ARGV[at[e] + 1]; ns = ns + 2
        end
      end
    end
  end
  if nd > 0 then redis.call('DEL', unpack(dels)) end
  if ns > 0 then redis.call('MSET', unpack(sets)) end
  if applied == n then return n end
  return out
end
local applied = 0
for e = 1, #KEYS / 2 do
  local key, tomb = KEYS[2 * e - 1], KEYS[2 * e]
  local ver, del, n = ARGV[a], ARGV[a + 1] == '1', tonumber(ARGV[a + 2])
  local p = a + 3
  a = p + n
  local v = tonumber(ver)
  local cur, t, res = 0, false, nil
  local s = redis.pcall('HGET', key, '_version')
  if type(s) == 'table' then
    res = s
  else
    if s then cur = tonumber(s) or 0 end
    t = redis.pcall('GET', tomb)
    if type(t) == 'table' then res = t end
  end
  if res == nil then
    if t then
      local tv = tonumber(t) or 0
      if tv > cur then cur = tv end
    end
    if kept(v, cur) then
      res = 0
    elseif del then
      redis.call('DEL', key)
      if v == 0 and guard == '!' then
        redis.call('DEL', tomb)
      elseif tttl ~= '0' then
        redis.call('SET', tomb, ver, 'PX', tttl)
      else
        redis.call('SET', tomb, ver)
      end
      res = 1
    else
      redis.call('DEL', key)
      local last = a - 1
      local j = math.min(p + 199, last)
      redis.call('HSET', key, '_version', ver, unpack(ARGV, p, j))
      p = j + 1
      while p <= last do
        j = math.min(p + 199, last)
        redis.call('HSET', key, unpack(ARGV, p, j))
        p = j + 1
      end
      if ttl ~= '0' then redis.call('PEXPIRE', key, ttl) end
      if t then redis.call('DEL', tomb) end
      res = 1
    end
  end
  out[e] = res
  if res == 1 then applied = applied + 1 end
end
if applied == #KEYS / 2 then return applied end
return out
