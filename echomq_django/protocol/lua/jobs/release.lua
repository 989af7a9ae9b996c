-- release: a shutting-down worker hands its unfinished jobs of one queue back
-- to pending in one call, giving back the attempt each was on (the job did
-- not fail). A job whose cancel was requested while it ran ends cancelled
-- instead of running again (docs/protocol.md, "release").
-- KEYS[1] active   emq:{q}:active
-- KEYS[2] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5...] job   emq:{q}:job:<id>, the row of each lease, in order
-- ARGV[1] wake_cap most wake markers kept, 1..10000
-- ARGV[2] keep_ms  how long a cancelled row is kept, 1..2^53
-- ARGV[3...] lease two entries per lease: job_id, token (the one the claim returned)
-- Returns: one {code} per lease, in order: {1} back to pending, {2} ended
--   cancelled, {0, message} when the token does not hold that lease (that
--   one changes nothing). A repeat by the same token answers the same.
-- Errors: EMQKEY a key that is not the queue's key named above, or a row key
--         that is not its lease's job (nothing changes); EMQARG a malformed
--         argument (nothing changes: all are checked first).
-- @include args
-- @include signal
-- @include fence
-- @include now
-- @include lease
-- @include cancelled
-- @include settle
-- @include rejoin
-- @include base
local PER, FIXED = 2, 2
local leases = (#ARGV - FIXED) / PER
if #ARGV < FIXED or leases ~= math.floor(leases) or #KEYS ~= 4 + leases then
  return redis.error_reply('EMQARG release takes two arguments (job_id, token) and one row key '
    .. 'per lease; got ' .. #ARGV .. ' arguments and ' .. #KEYS .. ' keys')
end
local spec = {{KEYS[1], 'active'}, {KEYS[2], 'claims'}, {KEYS[3], 'pending'}, {KEYS[4], 'wake'}}
for i = 1, leases do
  local id = ARGV[FIXED + (i - 1) * PER + 1]
  local _, bad_id = text_arg(id, 'job_id')
  if bad_id then return bad_id end
  local _, bad_token = text_arg(ARGV[FIXED + (i - 1) * PER + 2], 'token')
  if bad_token then return bad_token end
  spec[#spec + 1] = {KEYS[4 + i], 'job:' .. id}
end
local bad_key = check_keys(spec)
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[1], 'wake_cap', 1, 10000}, {ARGV[2], 'keep_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
local out, back = {}, 0
for i = 1, leases do
  local row = KEYS[4 + i]
  local id, token = ARGV[FIXED + (i - 1) * PER + 1], ARGV[FIXED + (i - 1) * PER + 2]
  local err, _, cancelled, replay = settle(row, KEYS[1], KEYS[2], id, token, n[2], 'release')
  if err then
    out[i] = {0, err.err}
  elseif replay then
    out[i] = {replay == 'cancelled' and 2 or 1}
  elseif cancelled then
    out[i] = {2}
  else
    redis.call('HINCRBY', row, 'attempts', -1)
    rejoin(row, KEYS[3], id)
    settled(row, token, 'release', 'pending')
    back = back + 1
    out[i] = {1}
  end
end
if back > 0 then
  signal(KEYS[4], back, n[1])
end
return out
