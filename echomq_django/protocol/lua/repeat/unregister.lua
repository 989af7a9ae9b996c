-- unregister: remove a recurring schedule (its registry member and its record).
-- KEYS[1] repeat       emq:{q}:repeat
-- KEYS[2] repeat_record emq:{q}:repeat:<name>
-- ARGV[1] name
-- Returns: 1 when the member or the record existed, else 0. Jobs already
--   minted for the schedule are untouched.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include base
local _, bad_name = name_arg(ARGV[1])
if bad_name then return bad_name end
local bad_key = check_keys({{KEYS[1], 'repeat'}, {KEYS[2], 'repeat:' .. ARGV[1]}})
if bad_key then return bad_key end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
removed = removed + redis.call('DEL', KEYS[2])
return removed > 0 and 1 or 0
