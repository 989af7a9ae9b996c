#!lua flags=allow-oom
-- metadata: a running handler saves its job's metadata (token-fenced): a JSON
-- object the job carries beside its arguments (a django.tasks Task's
-- context.metadata; docs/tasks.md, "Metadata"). allow-oom as progress: behind
-- the fence it only overwrites one field of a running job's row.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- ARGV[1] job_id
-- ARGV[2] token    the token the claim returned
-- ARGV[3] metadata JSON text of an object
-- Returns: 1 when a cancel has been requested for the job, else 0.
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQSTALE the token does not hold the lease (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include fence
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}})
if bad_key then return bad_key end
local _, bad_json = json_arg(ARGV[3], 'metadata', true)
if bad_json then return bad_json end
local stale_reply = fence(KEYS[1], ARGV[2])
if stale_reply then return stale_reply end
redis.call('HSET', KEYS[1], 'metadata', ARGV[3])
return redis.call('HGET', KEYS[1], 'cancel_requested') == '1' and 1 or 0
