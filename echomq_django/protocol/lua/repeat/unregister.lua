-- unregister: remove a recurring schedule (its registry member and its record).
-- KEYS[1] repeat       emq:{q}:repeat
-- KEYS[2] repeat_record emq:{q}:repeat:<name>
-- ARGV[1] name
-- Returns: 1 when the member or the record existed, else 0. Jobs already
--   minted for the schedule are untouched.
-- Errors: EMQARG a malformed argument (nothing changes).
-- @include args
local _, bad_record = record_arg(KEYS[2], ARGV[1], KEYS[1])
if bad_record then return bad_record end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
removed = removed + redis.call('DEL', KEYS[2])
return removed > 0 and 1 or 0
