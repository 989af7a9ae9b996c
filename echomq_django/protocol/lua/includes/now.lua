-- now_ms(): the server clock in Unix milliseconds. Every "now" in EchoMQ is
-- this one; callers never pass their own clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
