#!lua flags=allow-oom
-- progress: a running handler reports how far it got (token-fenced).
-- allow-oom: it runs while the server is full (maxmemory with noeviction), as
-- extend does, so a handler that reports progress is not failed by a full
-- server (context.progress would raise OutOfMemoryError into it). Behind the
-- fence it only overwrites three fields of a running job's row (the message
-- is the handler's own text) and writes nothing else.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] percent  0..100
-- ARGV[4] message  free text ('' for none)
-- Returns: 1 when a cancel has been requested for the job, else 0 (so a
--          progress report is also a cancellation check).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include fence
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}})
if bad_key then return bad_key end
local percent, bad_arg = int_arg(ARGV[3], 'percent', 0, 100)
if bad_arg then return bad_arg end
local stale_reply = fence(KEYS[1], ARGV[2])
if stale_reply then return stale_reply end
redis.call('HSET', KEYS[1], 'progress', percent, 'progress_message', ARGV[4],
  'progress_at_ms', now_ms())
return redis.call('HGET', KEYS[1], 'cancel_requested') == '1' and 1 or 0
