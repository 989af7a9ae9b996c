-- reap: the count-thresholded stalled sweep. Every lease past its deadline
-- counts a stall; the job goes back to pending, or dead with reason 'stalled'
-- once its stalls exceed max_stalls (BullMQ's maxStalledCount), so a poison
-- job that kills its worker every time does not loop forever. A job whose
-- cancel was requested while it ran ends cancelled instead: its worker is gone
-- before it saw the flag, and a cancelled job never runs again.
-- KEYS[1] active   emq:{q}:active
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- KEYS[4] dead     emq:{q}:dead
-- KEYS[5] claims   emq:{q}:claims, token -> job id of every held lease
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most leases reaped by this call, 1..100000
-- ARGV[3] wake_cap most wake markers kept, 1..10000
-- ARGV[4] max_stalls stalls allowed before the job goes dead, 0..1000000
-- ARGV[5] dead_ttl_ms how long a dead row is kept, 1..2^53
-- ARGV[6] stats_ttl_ms how long a per-minute counter lives, 1..2^53
-- ARGV[7] keep_ms  how long a cancelled row is kept, 1..2^53
-- ARGV[8] dead_max most dead letters kept (the oldest go first), 1..2^53; a
--                  stalled death trims the dead set as dead does
-- Returns: the count of expired leases handled (back to pending, dead or cancelled).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include base
-- @include stats
-- @include lease
-- @include cancelled
-- @include rejoin
-- @include retention
local bad_key = check_keys({{KEYS[1], 'active'}, {KEYS[2], 'pending'}, {KEYS[3], 'wake'},
  {KEYS[4], 'dead'}, {KEYS[5], 'claims'}}, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[2], 'batch', 1, 100000}, {ARGV[3], 'wake_cap', 1, 10000},
  {ARGV[4], 'max_stalls', 0, 1000000}, {ARGV[5], 'dead_ttl_ms', 1, MAX_MS},
  {ARGV[6], 'stats_ttl_ms', 1, MAX_MS}, {ARGV[7], 'keep_ms', 1, MAX_MS},
  {ARGV[8], 'dead_max', 1, MAX_MS}})
if bad_arg then return bad_arg end
local base = ARGV[1]
local now = now_ms()
local max_stalls = n[3]
local keep = {ttl_ms = n[4], max = n[7], stats_ttl_ms = n[5]}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, n[1])
local count_back, count_all = 0, 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[1], id)
  local row = base .. 'job:' .. id
  local found = redis.call('HMGET', row, 'state', 'token')
  if found[1] == 'active' then
    -- Dropping the token fences the old holder out: its ack, retry, snooze,
    -- extend or dead now fails with EMQSTALE.
    end_lease(row, KEYS[1], KEYS[5], id, found[2] or '')
    local stalls = redis.call('HINCRBY', row, 'stalls', 1)
    count_all = count_all + 1
    if end_if_cancelled(row, now, n[6]) then
      -- Cancelled: never run again, counted neither as done nor as failed.
    elseif stalls > max_stalls then
      bury(base, KEYS[4], id, now, 'stalled',
        'the lease expired ' .. stalls .. ' times (max_stalls ' .. max_stalls .. ')', keep)
    else
      rejoin(row, KEYS[2], id)
      count_back = count_back + 1
    end
  end
end
signal(KEYS[3], count_back, n[2])
return count_all
