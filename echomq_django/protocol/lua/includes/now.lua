-- now_ms(): the server clock in Unix milliseconds. Every "now" in EchoMQ is
-- this one; callers never pass their own clock. A script is one atomic step,
-- so it reads TIME once and every later now_ms() of the same call answers
-- that reading.
local now_read = nil
local function now_ms()
  if now_read == nil then
    local t = redis.call('TIME')
    now_read = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_read
end
