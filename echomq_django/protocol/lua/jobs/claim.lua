-- claim: lease up to `count` ready jobs to one consumer, lanes served
-- round-robin, within the queue's limits (docs/protocol.md, "claim", "Lanes",
-- "Limits").
-- KEYS[1] pending  emq:{q}:pending (the ungrouped lane; its root names every lane key)
-- KEYS[2] active   emq:{q}:active (score = lease deadline ms)
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5] beat     emq:{q}:beat, wakes the metronome when a lease is the
--                  earliest deadline (so reap runs on time)
-- KEYS[6] paused   emq:{q}:paused, present while the queue is paused
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] consumer a name for the holder (host:pid), non-empty
-- ARGV[3] lease_ms the lease length, 1..2^53
-- ARGV[4] wake_cap most wake markers kept, 1..10000
-- ARGV[5] token    the batch token, chosen by the caller and never reused; the
--                  i-th job claimed is fenced by token .. '.' .. i
--                  (docs/protocol.md, "Fencing tokens")
-- ARGV[6] count    most jobs to claim, 1..1000
-- Returns: {now_ms, next_ms, job...}: next_ms is the first instant a token
--   comes due for a lane or the queue when claiming stopped for want of one
--   (-1 otherwise); each job is {job_id, token, payload, attempts,
--   lease_deadline_ms, snoozes, group}. No jobs when nothing is ready, the
--   queue is paused or at a limit. A repeat with the same batch token whose
--   leases are still held answers those leases again (a claim is idempotent).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument (nothing changes).
-- @include args
-- @include now
-- @include base
-- @include claim
local bad_key = check_keys({{KEYS[1], 'pending'}, {KEYS[2], 'active'}, {KEYS[3], 'claims'},
  {KEYS[4], 'wake'}, {KEYS[5], 'beat'}, {KEYS[6], 'paused'}}, ARGV[1])
if bad_key then return bad_key end
local _, bad_consumer = text_arg(ARGV[2], 'consumer')
if bad_consumer then return bad_consumer end
local _, bad_token = text_arg(ARGV[5], 'token')
if bad_token then return bad_token end
local n, bad_arg = ints({{ARGV[3], 'lease_ms', 1, MAX_MS}, {ARGV[4], 'wake_cap', 1, 10000},
  {ARGV[6], 'count', 1, 1000}})
if bad_arg then return bad_arg end
local out = {now_ms(), -1}
claim_jobs({active = KEYS[2], claims = KEYS[3], wake = KEYS[4], beat = KEYS[5],
  paused = KEYS[6]}, ARGV[1], ARGV[2], n[1], n[2], ARGV[5], n[3], out[1], out)
return out
