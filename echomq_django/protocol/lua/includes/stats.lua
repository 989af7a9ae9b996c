-- The per-minute counters: <root>stats:<kind>:<minute>.
-- While a script records several outcomes (jobs/finish), counts are gathered
-- (defer_counts) and each counter gets one INCRBY after the last
-- (flush_counts); nothing between reads them.
local counts_deferred = nil

-- add_count(key, n, ttl_ms): n more on the counter `key`; it expires ttl_ms
-- after its minute's first count (set once).
local function add_count(key, n, ttl_ms)
  if redis.call('INCRBY', key, n) == n then
    redis.call('PEXPIRE', key, ttl_ms)
  end
end

-- count(base, kind, now, ttl_ms): add one to this minute's counter of kind
-- ("done"; "failed": a failed attempt, retried or not; "dead": a job that
-- ended dead, counted beside its last attempt's "failed"); the counter
-- expires on its own, so no sweep is needed.
local function count(base, kind, now, ttl_ms)
  local key = base .. 'stats:' .. kind .. ':' .. tostring(math.floor(now / 60000))
  local deferred = counts_deferred
  if not deferred then
    add_count(key, 1, ttl_ms)
  elseif deferred.n[key] then
    deferred.n[key] = deferred.n[key] + 1
  else
    deferred.keys[#deferred.keys + 1] = key
    deferred.n[key], deferred.ttl_ms[key] = 1, ttl_ms
  end
end

local function defer_counts()
  counts_deferred = {keys = {}, n = {}, ttl_ms = {}}
end

local function flush_counts()
  local deferred = counts_deferred
  counts_deferred = nil
  for _, key in ipairs(deferred and deferred.keys or {}) do
    add_count(key, deferred.n[key], deferred.ttl_ms[key])
  end
end
