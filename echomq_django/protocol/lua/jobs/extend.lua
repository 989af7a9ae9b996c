#!lua flags=allow-oom
-- extend: push an active job's lease deadline to server now + lease_ms.
-- allow-oom: it runs while the server is full (maxmemory with noeviction),
-- so a live job's lease outlasts an OOM that lasts longer than the lease and
-- reap never takes a job whose holder keeps renewing. Its memory growth is
-- nil: behind the fence it only overwrites the row's lease_until_ms and the
-- job's existing score in active, reads the metronome's plan and may mark
-- the beat list, which holds at most one marker. Every other script is
-- refused under OOM at its first write that could grow memory
-- (docs/protocol.md, "Faults").
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] beat     emq:{q}:beat, wakes the metronome when the deadline is earlier
--                  than the instant it plans to wake at (includes/beat.lua)
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] lease_ms the new lease length, from now, 1..2^53
-- Returns: the new deadline, server ms.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include beat
-- @include fence
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'active'}, {KEYS[3], 'beat'}})
if bad_key then return bad_key end
local lease_ms, bad_arg = int_arg(ARGV[3], 'lease_ms', 1, MAX_MS)
if bad_arg then return bad_arg end
local stale_reply = fence(KEYS[1], ARGV[2])
if stale_reply then return stale_reply end
local deadline = now_ms() + lease_ms
redis.call('HSET', KEYS[1], 'lease_until_ms', deadline)
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
mark_beat(KEYS[3], deadline)
return deadline
