-- run_now: mint one occurrence of a recurring schedule now, leaving its grid alone.
-- KEYS[1] repeat_record emq:{q}:repeat:<name>
-- KEYS[2] job          emq:{q}:job:<job_id>
-- KEYS[3] pending      emq:{q}:pending
-- KEYS[4] wake         emq:{q}:wake
-- ARGV[1] name
-- ARGV[2] version      the record version the payload was built from
-- ARGV[3] job_id       JOB id of the occurrence
-- ARGV[4] payload      JSON object text (template + scheduled_for + missed 0)
-- ARGV[5] slot_ms      the server time the caller read (scheduled_for)
-- ARGV[6] wake_cap     most wake markers kept
-- Returns: 1 minted; 0 the record is gone or its version differs (nothing written).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQKIND job_id is not JOB-namespaced; EMQSTATE the row exists.
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include rejoin
-- @include occurrence
-- @include base
local _, bad_name = name_arg(ARGV[1])
if bad_name then return bad_name end
local _, bad_id = text_arg(ARGV[3], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'repeat:' .. ARGV[1]}, {KEYS[2], 'job:' .. ARGV[3]},
  {KEYS[3], 'pending'}, {KEYS[4], 'wake'}})
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[5], 'slot_ms', 0, MAX_MS}, {ARGV[6], 'wake_cap', 1, 10000}})
if bad_arg then return bad_arg end
local _, bad_payload = json_arg(ARGV[4], 'payload', true)
if bad_payload then return bad_payload end
if string.sub(ARGV[3], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[2] then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('EMQSTATE job row ' .. ARGV[3] .. ' already exists')
end
local now = now_ms()
occurrence(KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[1], ARGV[5], n[2], now)
-- Bookkeeping only; last_scheduled_for_ms stays the grid's, so list shows
-- where the schedule itself stands.
redis.call('HSET', KEYS[1], 'last_run_ms', now, 'last_job_id', ARGV[3])
return 1
