-- enqueue: admit a job straight to pending.
-- KEYS[1] job      emq:{q}:job:<id>, the row
-- KEYS[2] pending  emq:{q}:pending
-- KEYS[3] wake     emq:{q}:wake
-- ARGV[1] job_id   must start with JOB
-- ARGV[2] payload  JSON text
-- ARGV[3] wake_cap most wake markers kept, 1..10000
-- ARGV[4] group    the job's lane ('' for none: the queue's pending set)
-- ARGV[5] priority -100..100, higher first within its lane (docs/protocol.md, "Lanes")
-- Returns: 1 enqueued, 0 duplicate (the row exists; nothing changes).
-- Errors: EMQKEY a key that is not the queue's key named above (nothing changes);
--         EMQKIND the id is not JOB-namespaced; EMQARG a malformed argument (a
--         payload that is not JSON included; nothing changes).
-- @include args
-- @include now
-- @include signal
-- @include rejoin
-- @include admission
-- @include base
local _, bad_id = text_arg(ARGV[1], 'job_id')
if bad_id then return bad_id end
local bad_key = check_keys({{KEYS[1], 'job:' .. ARGV[1]}, {KEYS[2], 'pending'}, {KEYS[3], 'wake'}})
if bad_key then return bad_key end
local wake_cap, bad_cap = int_arg(ARGV[3], 'wake_cap', 1, 10000)
if bad_cap then return bad_cap end
local priority, bad_priority = int_arg(ARGV[5], 'priority', -100, 100)
if bad_priority then return bad_priority end
local _, bad_group = group_arg(ARGV[4])
if bad_group then return bad_group end
local _, bad_payload = json_arg(ARGV[2], 'payload')
if bad_payload then return bad_payload end
local refused = admission(KEYS[1], ARGV[1])
if refused then return refused end
rejoin(KEYS[1], KEYS[2], ARGV[1], ARGV[4], priority,
  new_row(ARGV[2], now_ms(), ARGV[4], priority))
signal(KEYS[3], 1, wake_cap)
return 1
