-- admin_retry_all_dead: one batch of "retry every dead letter": the oldest
-- letters that died at or before the cutoff go back on pending, attempts reset.
-- The caller repeats the call with the returned cutoff until a batch comes
-- back short, so letters that die while it runs are not retried in a loop.
-- KEYS[1] dead     emq:{q}:dead
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most letters taken by this call, 1..1000
-- ARGV[3] cutoff_ms only letters that died at or before this (server ms);
--                  '' = the server's now
-- ARGV[4] wake_cap most wake markers kept
-- Returns: {revived, taken, cutoff_ms}: letters back on pending, members taken
--          off dead (taken - revived had no row left), the cutoff used.
-- Errors: EMQKEY the base root is not the queue root of KEYS[1];
--         EMQARG batch is not in 1..1000.
-- @include now
-- @include signal
-- @include base
-- @include revive
local bad = check_base(ARGV[1], KEYS[1])
if bad then return bad end
local batch = tonumber(ARGV[2])
if not batch or batch < 1 or batch > 1000 then
  return redis.error_reply('EMQARG batch must be in 1..1000')
end
local cutoff = ARGV[3] == '' and now_ms() or tonumber(ARGV[3])
local ids = redis.call('ZRANGE', KEYS[1], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, batch)
local revived = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local row = ARGV[1] .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    revive(row, KEYS[2], id)
    revived = revived + 1
  end
end
signal(KEYS[3], revived, tonumber(ARGV[4]))
return {revived, #ids, cutoff}
