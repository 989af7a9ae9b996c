-- schedule: admit a job fenced out of pending until its run-at score.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] schedule emq:{q}:schedule
-- KEYS[3] beat     emq:{q}:beat, wakes the metronome when the run-at is earlier than
--                  the instant it plans to wake at (includes/beat.lua)
-- ARGV[1] job_id   must start with JOB
-- ARGV[2] payload  JSON text
-- ARGV[3] mode     'at' (ARGV[4] is an absolute run-at ms) or 'in' (a delay ms
--                  added to the SERVER clock)
-- ARGV[4] value    ms, 0..2^53
-- ARGV[5] group    the job's lane ('' for none)
-- ARGV[6] priority -100..100, higher first within its lane once due
-- Returns: 1 scheduled, 0 duplicate (the row exists; nothing changes).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQKIND the id is not JOB-namespaced; EMQARG a malformed argument (a
--         payload that is not JSON included; nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include lease
-- @include admission
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'schedule'},
  {KEYS[3], 'beat'}})
if bad_key then return bad_key end
if ARGV[3] ~= 'at' and ARGV[3] ~= 'in' then
  return redis.error_reply('EMQARG mode must be at or in, got ' .. tostring(ARGV[3]))
end
local n, bad_arg = ints({{ARGV[4], 'value', 0, MAX_MS}, {ARGV[6], 'priority', -100, 100}})
if bad_arg then return bad_arg end
local value = n[1]
local _, bad_group = group_arg(ARGV[5])
if bad_group then return bad_group end
local _, bad_payload = json_arg(ARGV[2], 'payload')
if bad_payload then return bad_payload end
local refused = admission(KEYS[1], ARGV[1])
if refused then return refused end
local now = now_ms()
local score = value
if ARGV[3] == 'in' then
  score = math.min(now + value, MAX_MS)
end
-- park marks the metronome's beat only when this run-at is earlier than the
-- instant it plans to wake at; a later one is found by the beat it already has.
park(KEYS[1], KEYS[2], KEYS[3], ARGV[1], score, new_row(ARGV[2], now, ARGV[5], n[2]))
return 1
