-- retire: a stopping runechomq process withdraws its announcement.
-- KEYS[1] workers  emq:{~}:workers
-- KEYS[2] worker   emq:{~}:worker:<id>
-- ARGV[1] worker_id host:pid
-- Returns: 1.
-- Errors: EMQKEY a key that is not the shared root's workers or worker:<worker_id>;
--         EMQARG an empty worker_id (nothing changes).
-- @include args
-- @include base
local _, bad_id = text_arg(ARGV[1], 'worker_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'workers'}, {KEYS[2], 'worker:' .. ARGV[1]}}, 'emq:{~}:')
if bad_key then return bad_key end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return 1
