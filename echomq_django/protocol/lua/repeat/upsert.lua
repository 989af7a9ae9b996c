-- upsert: write a recurring schedule's definition, replacing a different one.
-- KEYS[1] repeat       emq:{q}:repeat, ZSET of names scored by next-run ms
-- KEYS[2] repeat_record emq:{q}:repeat:<name>, HASH, the definition and bookkeeping
-- KEYS[3] beat         emq:{q}:beat, marked when the next run is earlier than the
--                      instant the metronome plans to wake at (includes/beat.lua)
-- ARGV[1] name
-- ARGV[2] definition   canonical JSON object text of the whole definition, compared byte for byte
-- ARGV[3] timing       canonical JSON object text of every_ms, cron, tz, start_at_ms
-- ARGV[4] every_ms     '' for a cron schedule
-- ARGV[5] cron         '' for an every_ms schedule
-- ARGV[6] tz           IANA zone name
-- ARGV[7] template     JSON object text
-- ARGV[8] missed       coalesce | skip
-- ARGV[9] start_at_ms  '' when none
-- ARGV[10] first_run_ms the first occurrence of the new definition, from server TIME
-- Returns: 1 registered (the name was not there); 0 unchanged (same
--   definition; nothing changes); 2 updated (definition replaced, version
--   bumped; the next run moves to first_run_ms only when the timing changed);
--   3 registered over an orphan (as register).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include next_run
-- @include definition
local bad_arg = check_definition(KEYS, ARGV)
if bad_arg then return bad_arg end
local member = redis.call('ZSCORE', KEYS[1], ARGV[1])
local stored = redis.call('HGET', KEYS[2], 'definition')
if member and stored and stored == ARGV[2] then
  return 0
end
local now = now_ms()
local outcome
if member and stored then
  outcome = 2
elseif member or stored then
  outcome = 3
else
  outcome = 1
end
local same_timing = outcome == 2 and redis.call('HGET', KEYS[2], 'timing') == ARGV[3]
write_definition(KEYS[2], ARGV, not stored, now)
-- A template or policy change keeps the grid (and an occurrence that is due
-- but not yet minted); a timing change starts the new cadence.
if not same_timing then
  set_next_run(KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[10]))
end
return outcome
