-- admin/retry_all_dead: one batch of "retry every dead letter": the oldest
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
--          off dead (taken - revived had no dead row left), the cutoff used.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument, e.g. batch not in 1..1000 (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include base
-- @include rejoin
-- @include revive
-- @include dead_batch
local bad_key = check_keys({{KEYS[1], 'dead'}, {KEYS[2], 'pending'}, {KEYS[3], 'wake'}}, ARGV[1])
if bad_key then return bad_key end
local wake_cap, bad_arg = int_arg(ARGV[4], 'wake_cap', 1, 10000)
if bad_arg then return bad_arg end
local err, letters, taken, cutoff = dead_batch(ARGV[1], KEYS[1], ARGV[2], ARGV[3])
if err then return err end
for _, id in ipairs(letters) do
  revive(ARGV[1] .. 'job:' .. id, KEYS[2], id)
end
signal(KEYS[3], #letters, wake_cap)
return {#letters, taken, cutoff}
