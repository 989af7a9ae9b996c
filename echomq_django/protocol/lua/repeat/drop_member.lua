-- drop_member: take a schedule that cannot run off the registry, so the pump
-- never spins on it (a member without record, or a record that cannot be read).
-- KEYS[1] repeat       emq:{q}:repeat
-- KEYS[2] repeat_record emq:{q}:repeat:<name>
-- ARGV[1] name
-- ARGV[2] expected_ms  the registry score the caller read
-- ARGV[3] version      the record version the caller read ('' = the record must not exist)
-- Returns: 1 the member was removed (the record, if any, is kept for
--   inspection); 0 the score or the record changed since (nothing written).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include base
-- Any member may be dropped, a malformed name ('' included) too: this is how
-- the pump takes one off the registry.
local bad_key = check_keys({{KEYS[1], 'repeat'}, {KEYS[2], 'repeat:' .. ARGV[1]}})
if bad_key then return bad_key end
local expected, bad_arg = int_arg(ARGV[2], 'expected_ms', 0, MAX_MS)
if bad_arg then return bad_arg end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= expected then
  return 0
end
local version = redis.call('HGET', KEYS[2], 'version')
if ARGV[3] == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
  end
elseif version ~= ARGV[3] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
