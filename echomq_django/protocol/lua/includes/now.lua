-- now_us(): the server clock (TIME) in Unix microseconds, the one place a
-- script reads it. A script is one atomic step, so it reads TIME once and
-- every later now_us() or now_ms() of the same call answers that reading.
-- Only the metronome's horizon uses the microseconds: it times a local sleep
-- to a millisecond boundary.
local now_read = nil
local function now_us()
  if now_read == nil then
    local t = redis.call('TIME')
    now_read = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now_read
end

-- now_ms(): the server clock in Unix milliseconds. Every "now" in EchoMQ is
-- this one; callers never pass their own clock.
local function now_ms()
  return math.floor(now_us() / 1000)
end
