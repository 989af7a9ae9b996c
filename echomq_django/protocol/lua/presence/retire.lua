-- retire: a stopping runechomq process withdraws its announcement.
-- KEYS[1] workers  emq:{~}:workers
-- KEYS[2] worker   emq:{~}:worker:<id>
-- ARGV[1] worker_id host:pid
-- Returns: 1.
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return 1
