-- now_us(): the server clock (TIME) in Unix microseconds, the one place a
-- script reads it. Only the metronome's horizon uses the microseconds: it
-- times a local sleep to a millisecond boundary.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now_ms(): the server clock in Unix milliseconds. Every "now" in EchoMQ is
-- this one; callers never pass their own clock.
local function now_ms()
  return math.floor(now_us() / 1000)
end
