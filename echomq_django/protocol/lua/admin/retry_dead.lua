-- admin/retry_dead: put one dead letter back on pending with its attempts reset.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] dead     emq:{q}:dead
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] wake_cap most wake markers kept
-- Returns: 1 back on pending; 0 not in dead (nothing changes);
--          2 in dead without a dead row (it expired, or the id was enqueued
--          again: the member is dropped, nothing else changes).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include signal
-- @include rejoin
-- @include revive
-- @include take
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'dead'},
  {KEYS[3], 'pending'}, {KEYS[4], 'wake'}})
if bad_key then return bad_key end
local wake_cap, bad_arg = int_arg(ARGV[2], 'wake_cap', 1, 10000)
if bad_arg then return bad_arg end
local taken = take(KEYS[2], KEYS[1], ARGV[1], 'dead')
if taken ~= 1 then return taken end
revive(KEYS[1], KEYS[3], ARGV[1])
signal(KEYS[4], 1, wake_cap)
return 1
