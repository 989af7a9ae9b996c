-- mint: mint one occurrence of a recurring schedule and advance its next run,
-- as one compare-and-set on the registry score (exactly one job per occurrence
-- however many metronomes pump, and a paused one that resumes mints nothing).
-- KEYS[1] repeat       emq:{q}:repeat
-- KEYS[2] repeat_record emq:{q}:repeat:<name>
-- KEYS[3] job          emq:{q}:job:<job_id>, the occurrence's row (job:- and untouched when job_id is '')
-- KEYS[4] pending      emq:{q}:pending
-- KEYS[5] wake         emq:{q}:wake
-- KEYS[6] beat         emq:{q}:beat, marked when next_ms is earlier than the instant
--                      the metronome plans to wake at (includes/beat.lua; never by
--                      the pumping metronome's own mint, which moves a run past now)
-- ARGV[1] name
-- ARGV[2] expected_ms  the registry score the caller read; the CAS compares it
-- ARGV[3] next_ms      the new score
-- ARGV[4] version      the record version the payload was built from ('' = any)
-- ARGV[5] job_id       JOB id of the occurrence, or '' to advance without minting
-- ARGV[6] payload      JSON object text (template + scheduled_for + missed)
-- ARGV[7] slot_ms      the occurrence the job stands for (scheduled_for)
-- ARGV[8] count        minting: the missed count; advancing: occurrences skipped
-- ARGV[9] wake_cap     most wake markers kept
-- Returns: 1 minted and advanced; 2 advanced without minting; 0 stale (the
--   score is not expected_ms, the member or record is gone, or the version
--   differs; nothing written).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQKIND job_id is not JOB-namespaced; EMQSTATE the row exists.
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include rejoin
-- @include occurrence
-- @include next_run
-- @include base
local _, bad_name = name_arg(ARGV[1])
if bad_name then return bad_name end
local bad_key = check_keys({{KEYS[1], 'repeat'}, {KEYS[2], 'repeat:' .. ARGV[1]},
  {KEYS[3], 'job:' .. (ARGV[5] ~= '' and ARGV[5] or '-')}, {KEYS[4], 'pending'},
  {KEYS[5], 'wake'}, {KEYS[6], 'beat'}})
if bad_key then return bad_key end
if ARGV[5] ~= '' then
  local _, bad_payload = json_arg(ARGV[6], 'payload', true)
  if bad_payload then return bad_payload end
end
local n, bad_arg = ints({{ARGV[2], 'expected_ms', 0, MAX_MS}, {ARGV[3], 'next_ms', 0, MAX_MS},
  {ARGV[7], 'slot_ms', 0, MAX_MS}, {ARGV[8], 'count', 0, MAX_MS},
  {ARGV[9], 'wake_cap', 1, 10000}})
if bad_arg then return bad_arg end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= n[1] then
  return 0
end
local version = redis.call('HGET', KEYS[2], 'version')
if not version or (ARGV[4] ~= '' and version ~= ARGV[4]) then
  return 0
end
local now = now_ms()
local outcome = 2
if ARGV[5] ~= '' then
  if string.sub(ARGV[5], 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced')
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return redis.error_reply('EMQSTATE job row ' .. ARGV[5] .. ' already exists')
  end
  occurrence(KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[6], ARGV[1], ARGV[7], n[5], now)
  redis.call('HSET', KEYS[2], 'last_run_ms', now, 'last_job_id', ARGV[5],
    'last_scheduled_for_ms', ARGV[7], 'last_missed', ARGV[8])
  outcome = 1
elseif n[4] > 0 then
  redis.call('HINCRBY', KEYS[2], 'skipped', n[4])
end
set_next_run(KEYS[1], KEYS[6], ARGV[1], n[2], 'XX')
return outcome
