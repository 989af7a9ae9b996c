#!lua flags=allow-oom
-- extend: push the leases of active jobs of one queue to server now + each
-- one's lease_ms, and read their cancel flags: a consumer's heartbeat renews
-- everything it holds of a queue in one call (docs/protocol.md, "extend").
-- allow-oom: it runs while the server is full (maxmemory with noeviction),
-- so a live job's lease outlasts an OOM that lasts longer than the lease and
-- reap never takes a job whose holder keeps renewing. Its memory growth is
-- nil: behind the fence it only overwrites a row's lease_until_ms and the
-- job's existing score in active, reads the metronome's plan and may mark
-- the beat list, which holds at most one marker. Every other script is refused under OOM at its first
-- write that could grow memory (docs/protocol.md, "Faults").
-- KEYS[1] active   emq:{q}:active
-- KEYS[2] beat     emq:{q}:beat, wakes the metronome when the earliest new deadline is
--                  earlier than the instant it plans to wake at (includes/beat.lua)
-- KEYS[3...] job   emq:{q}:job:<id>, the row of each lease, in order
-- ARGV[1...] lease three entries per lease: job_id, token (the one the claim
--                  returned), lease_ms (the new lease length from now, 1..2^53)
-- Returns: one {deadline_ms, cancel} per lease, in order: the new deadline
--   (server ms) and 1 when a cancel was requested for the job (else 0); or
--   {-1, 0, message} when the token does not hold that lease (that one
--   changes nothing).
-- Errors: EMQKEY a key that is not the queue's key named above, or a row key
--         that is not its lease's job (nothing changes); EMQARG a malformed
--         argument (nothing changes: all are checked first).
-- @include args
-- @include now
-- @include beat
-- @include fence
-- @include base
local PER = 3
local leases = #ARGV / PER
if leases ~= math.floor(leases) or #KEYS ~= 2 + leases then
  return redis.error_reply('EMQARG extend takes three arguments (job_id, token, lease_ms) and '
    .. 'one row key per lease; got ' .. #ARGV .. ' arguments and ' .. #KEYS .. ' keys')
end
local spec = {{KEYS[1], 'active'}, {KEYS[2], 'beat'}}
local lengths = {}
for i = 1, leases do
  local id = ARGV[(i - 1) * PER + 1]
  local _, bad_id = text_arg(id, 'job_id')
  if bad_id then return bad_id end
  local _, bad_token = text_arg(ARGV[(i - 1) * PER + 2], 'token')
  if bad_token then return bad_token end
  local lease_ms, bad_arg = int_arg(ARGV[(i - 1) * PER + 3], 'lease_ms', 1, MAX_MS)
  if bad_arg then return bad_arg end
  lengths[i] = lease_ms
  spec[#spec + 1] = {KEYS[2 + i], 'job:' .. id}
end
local bad_key = check_keys(spec)
if bad_key then return bad_key end
local now = now_ms()
local earliest = nil
local out = {}
for i = 1, leases do
  local row, id, token = KEYS[2 + i], ARGV[(i - 1) * PER + 1], ARGV[(i - 1) * PER + 2]
  local stale_reply = fence(row, token)
  if stale_reply then
    out[i] = {-1, 0, stale_reply.err}
  else
    local deadline = now + lengths[i]
    redis.call('HSET', row, 'lease_until_ms', deadline)
    redis.call('ZADD', KEYS[1], deadline, id)
    if earliest == nil or deadline < earliest then
      earliest = deadline
    end
    out[i] = {deadline, redis.call('HGET', row, 'cancel_requested') == '1' and 1 or 0}
  end
end
if earliest ~= nil then
  mark_beat(KEYS[2], earliest)
end
return out
