-- set_archive: turn a queue's archive events on or off (docs/protocol.md,
-- "Archive"): the cap of its archive stream is the field archive_max of its
-- limits hash, which every script that ends a job reads with the limits
-- (includes/archive.lua). runechomq writes it at boot from ECHOMQ["ARCHIVE"].
-- KEYS[1] limits   emq:{q}:limits, HASH
-- ARGV[1] archive_max  most events the stream keeps (XADD MAXLEN ~), 1..2^53;
--                  '' turns the events off (the field is removed)
-- Returns: 1 when it changed, 0 when it was already so (nothing is touched).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include base
local bad_key = check_keys({{KEYS[1], 'limits'}})
if bad_key then return bad_key end
local cap, bad = opt_int_arg(ARGV[1], 'archive_max', 1, MAX_MS)
if bad then return bad end
local old = redis.call('HGET', KEYS[1], 'archive_max')
if cap == nil then
  return redis.call('HDEL', KEYS[1], 'archive_max')
end
if tonumber(old) == cap then
  return 0
end
redis.call('HSET', KEYS[1], 'archive_max', string.format('%d', cap))
return 1
