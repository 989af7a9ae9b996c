-- Token buckets on the server clock: `count` tokens per `per_ms`, holding at
-- most `count` (a burst of count, then one every per_ms / count). A bucket's
-- state is one hash field, "<tokens>:<ms>" (tokens as of that instant); a
-- bucket never written is full.

-- bucket_level(hash, field, count, per_ms, now): the tokens in the bucket now.
local function bucket_level(hash, field, count, per_ms, now)
  local raw = redis.call('HGET', hash, field)
  if not raw then
    return count
  end
  local tokens, at = string.match(raw, '^([^:]+):([^:]+)$')
  tokens, at = tonumber(tokens), tonumber(at)
  if not tokens or not at then
    return count
  end
  return math.min(count, tokens + math.max(0, now - at) * count / per_ms)
end

-- bucket_due(tokens, count, per_ms, now): the first instant (ms) the bucket
-- holds a whole token.
local function bucket_due(tokens, count, per_ms, now)
  return now + math.max(1, math.ceil((1 - tokens) * per_ms / count))
end

-- bucket_take(hash, field, tokens, now): take one token from a bucket that
-- holds `tokens` now (>= 1).
local function bucket_take(hash, field, tokens, now)
  redis.call('HSET', hash, field, string.format('%.17g:%d', tokens - 1, now))
end
