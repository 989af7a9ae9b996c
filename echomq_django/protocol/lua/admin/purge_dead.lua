-- admin/purge_dead: one batch of "purge the dead letters": the oldest letters
-- that died at or before the cutoff lose their member and their row. The
-- caller repeats the call with the returned cutoff until a batch comes back short.
-- KEYS[1] dead     emq:{q}:dead
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] batch    most letters removed by this call, 1..1000
-- ARGV[3] cutoff_ms only letters that died at or before this (server ms);
--                  '' = the server's now
-- Returns: {removed, cutoff_ms}: members taken off dead, the cutoff used. A
--          member whose row is not dead (expired, or the id enqueued again)
--          is dropped and its row left alone.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument, e.g. batch not in 1..1000 (nothing changes).
-- @include args
-- @include now
-- @include base
-- @include dead_batch
local bad_key = check_keys({{KEYS[1], 'dead'}}, ARGV[1])
if bad_key then return bad_key end
local err, letters, taken, cutoff = dead_batch(ARGV[1], KEYS[1], ARGV[2], ARGV[3])
if err then return err end
for _, id in ipairs(letters) do
  redis.call('DEL', ARGV[1] .. 'job:' .. id)
end
return {taken, cutoff}
