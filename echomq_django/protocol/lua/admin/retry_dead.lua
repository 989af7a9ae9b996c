-- admin_retry_dead: put one dead letter back on pending with its attempts reset.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] dead     emq:{q}:dead
-- KEYS[3] pending  emq:{q}:pending
-- KEYS[4] wake     emq:{q}:wake
-- ARGV[1] job_id
-- ARGV[2] wake_cap most wake markers kept
-- Returns: 1 back on pending; 0 not in dead (nothing changes);
--          2 in dead without a row (it expired; the member is dropped).
-- @include signal
-- @include rejoin
-- @include revive
-- @include take
local taken = take(KEYS[2], KEYS[1], ARGV[1])
if taken ~= 1 then return taken end
revive(KEYS[1], KEYS[3], ARGV[1])
signal(KEYS[4], 1, tonumber(ARGV[2]))
return 1
