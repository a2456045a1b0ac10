-- The version check and write of a run of events, atomic per call because
-- Redis runs a script alone. One call carries up to kEventsPerCall events
-- (redis_sink_impl.h): the per-call cost of EVALSHA (and of a round of RESP
-- parsing) is then shared.
--   ARGV[1] 'j' (json string) or 'h' (hash)   ARGV[2] value ttl in ms, '0': none
--   ARGV[3] tombstone ttl in ms, '0': none     ARGV[4] the tombstone key suffix
--   ARGV[5] the guard: '>' writes a newer version only (Apply), '=' also the
--           same version (Repair kNotOlder), '!' any version (Repair kAny,
--           where a delete of version 0 removes the value and the tombstone)
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
-- Returns one element per event: 1 applied, 0 stale (the view holds this
-- version or a newer one, in the value or in the tombstone), or an error for
-- that event alone (a key of another type). Such a key is never written. Only
-- a failure of the server (OOM, a replica turned read-only) makes the whole
-- call fail; what the call wrote before it stays, as in any retry.
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
-- hash keeps one HGET + GET per event (HSET goes in slices of 200 arguments,
-- far below Lua's stack limit for unpack).
local fmt, ttl, tttl, suffix, guard = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local wrongtype = {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
local out = {}
local a = 6
local function kept(v, cur)
  if guard == '>' then return v <= cur end
  if guard == '=' then return v < cur end
  return false
end
if fmt == 'j' or fmt == 'J' then
  local n = #KEYS
  local vkeys, ver, vers, del, val = KEYS, {}, {}, {}, {}  -- vkeys: the value keys, one per event
  local tkeys = nil
  if fmt == 'J' then
    n = #KEYS / 2
    vkeys, tkeys = {}, {}
    for e = 1, n do
      vkeys[e] = KEYS[2 * e - 1]
      tkeys[vkeys[e]] = KEYS[2 * e]
    end
  end
  local function tombkey(k)
    if tkeys then return tkeys[k] end
    return k .. suffix
  end
  for e = 1, n do
    local v = ARGV[a]
    if string.byte(v, 1) == 45 then
      del[e] = true
      vers[e] = string.sub(v, 2)
      a = a + 1
    else
      del[e] = false
      vers[e] = v
      val[e] = ARGV[a + 1]
      a = a + 2
    end
    ver[e] = tonumber(vers[e])
  end
  local got = redis.call('MGET', unpack(vkeys))
  local cur, hasval, hastomb, bad = {}, {}, {}, {}
  local mkeys, mtombs = {}, {}
  for e = 1, n do
    local k = vkeys[e]
    if cur[k] == nil then
      local s = got[e]
      if s then
        cur[k] = tonumber(string.match(s, '^{"_version":(%d+)')) or 0
        hasval[k] = true
      else
        cur[k] = 0
        mkeys[#mkeys + 1] = k
        mtombs[#mtombs + 1] = tombkey(k)
      end
    end
  end
  if #mkeys > 0 then
    if redis.call('EXISTS', unpack(mkeys)) > 0 then
      for i = 1, #mkeys do
        if redis.call('EXISTS', mkeys[i]) == 1 then bad[mkeys[i]] = true end
      end
    end
    local t = redis.call('MGET', unpack(mtombs))
    for i = 1, #mkeys do
      if t[i] then
        local tv = tonumber(t[i]) or 0
        if tv > cur[mkeys[i]] then cur[mkeys[i]] = tv end
        hastomb[mkeys[i]] = true
      end
    end
  end
  local last, order = {}, {}
  for e = 1, n do
    local k = vkeys[e]
    if bad[k] then
      out[e] = wrongtype
    elseif kept(ver[e], cur[k]) then
      out[e] = 0
    else
      cur[k] = ver[e]
      if last[k] == nil then order[#order + 1] = k end
      last[k] = e
      out[e] = 1
    end
  end
  local dels, sets = {}, {}
  local function put(key, value, px)
    if px ~= '0' then
      redis.call('SET', key, value, 'PX', px)
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = value
    end
  end
  for i = 1, #order do
    local k = order[i]
    local e = last[k]
    local tomb = tombkey(k)
    if del[e] then
      if hasval[k] then dels[#dels + 1] = k end
      if ver[e] == 0 and guard == '!' then
        dels[#dels + 1] = tomb
      else
        put(tomb, vers[e], tttl)
      end
    else
      if hastomb[k] or guard == '!' then dels[#dels + 1] = tomb end
      put(k, val[e], ttl)
    end
  end
  if #dels > 0 then redis.call('DEL', unpack(dels)) end
  if #sets > 0 then redis.call('MSET', unpack(sets)) end
  return out
end
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
end
return out
