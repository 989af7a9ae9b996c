-- schedule: admit a job fenced out of pending until its run-at score.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] schedule emq:{q}:schedule
-- KEYS[3] beat     emq:{q}:beat, wakes the metronome
-- ARGV[1] job_id   must start with JOB
-- ARGV[2] payload  JSON text
-- ARGV[3] mode     'at' (ARGV[4] is an absolute run-at ms) or 'in' (a delay ms
--                  added to the SERVER clock)
-- ARGV[4] value    ms
-- Returns: 1 scheduled, 0 duplicate (the row exists; nothing changes).
-- Errors: EMQKIND the id is not JOB-namespaced.
-- @include now
-- @include signal
-- @include lease
-- @include admission
local refused = admission(KEYS[1], ARGV[1])
if refused then return refused end
local now = now_ms()
local score
if ARGV[3] == 'in' then
  score = now + tonumber(ARGV[4])
else
  score = tonumber(ARGV[4])
end
redis.call('HSET', KEYS[1], 'attempts', '0', 'payload', ARGV[2], 'enqueued_at_ms', now)
-- park marks the metronome's beat only when this run-at is earlier than the
-- head it sleeps towards; a later one is found by the sleep it already has.
park(KEYS[1], KEYS[2], KEYS[3], ARGV[1], score)
return 1
