-- finish: record the outcomes of several leases of one queue, then claim the
-- next jobs, in one call (docs/protocol.md, "finish"). Each outcome runs the
-- rule of its single script (includes/outcomes.lua: ack, retry, snooze,
-- dead); the claim runs claim's (includes/claim.lua), after the outcomes have
-- freed their lanes' and the queue's concurrency.
-- KEYS[1] pending  emq:{q}:pending (the ungrouped lane; its root names every lane key)
-- KEYS[2] active   emq:{q}:active
-- KEYS[3] claims   emq:{q}:claims, token -> job id of every held lease
-- KEYS[4] wake     emq:{q}:wake
-- KEYS[5] beat     emq:{q}:beat
-- KEYS[6] paused   emq:{q}:paused
-- KEYS[7] schedule emq:{q}:schedule (retry and snooze park there)
-- KEYS[8] dead     emq:{q}:dead
-- KEYS[9...] job   emq:{q}:job:<id>, the row of each outcome, in order
-- ARGV[1] base     emq:{q}:
-- ARGV[2] consumer a name for the holder of the new leases (non-empty when count > 0)
-- ARGV[3] lease_ms the new leases' length, 1..2^53
-- ARGV[4] wake_cap most wake markers kept, 1..10000
-- ARGV[5] token    the claim's batch token, as claim's (non-empty when count > 0)
-- ARGV[6] count    most jobs to claim, 0..1000 (0: record only)
-- ARGV[7] keep_ms  how long a done or cancelled row is kept, 1..2^53
-- ARGV[8] dead_ttl_ms how long a dead letter is kept, 1..2^53
-- ARGV[9] dead_max    most dead letters kept, 1..2^53
-- ARGV[10] stats_ttl_ms how long a per-minute counter lives, 1..2^53
-- ARGV[11...] outcome six entries per outcome: op, job_id, token, a, b, c,
--                  with op 'ack' (a = result JSON text or '', b = c = ''),
--                  'retry' (a = delay_ms, b = error text, c = the error's
--                  class path or ''), 'snooze' (a = delay_ms, b = c = '') or
--                  'dead' (a = reason, non-empty; b = error text, c = class)
-- Returns: {now_ms, next_ms, {outcome...}, job...}: each outcome, in order,
--   is {at_ms, state} as its single script answers ('done', 'scheduled',
--   'dead', 'cancelled'), or {-1, 'stale', message} when its token does not
--   hold the lease (that outcome changes nothing; the others are recorded);
--   next_ms and the jobs are claim's reply. A repeat of the whole call (its
--   reply lost) answers the same: each outcome replays, and the batch token
--   answers the leases it already holds.
-- Errors: EMQKEY a key that is not the queue's key named above, or a row key
--         that is not its outcome's job; EMQARG a malformed argument or
--         outcome (nothing changes: every outcome is checked before any is
--         recorded).
-- @include args
-- @include now
-- @include base
-- @include outcomes
-- @include claim
local FIXED_ARGV, FIXED_KEYS, PER = 10, 8, 6
local spec = {{KEYS[1], 'pending'}, {KEYS[2], 'active'}, {KEYS[3], 'claims'},
  {KEYS[4], 'wake'}, {KEYS[5], 'beat'}, {KEYS[6], 'paused'}, {KEYS[7], 'schedule'},
  {KEYS[8], 'dead'}}
local outcomes = (#ARGV - FIXED_ARGV) / PER
if #ARGV < FIXED_ARGV or outcomes ~= math.floor(outcomes) then
  return redis.error_reply('EMQARG outcomes must be six entries each after the ' .. FIXED_ARGV
    .. ' fixed arguments, got ' .. (#ARGV - FIXED_ARGV))
end
if #KEYS ~= FIXED_KEYS + outcomes then
  return redis.error_reply('EMQARG one row key per outcome: ' .. outcomes .. ' outcomes, '
    .. (#KEYS - FIXED_KEYS) .. ' row keys')
end
for i = 1, outcomes do
  local id = ARGV[FIXED_ARGV + (i - 1) * PER + 2]
  local _, bad_id = text_arg(id, 'outcome ' .. i .. ' job_id')
  if bad_id then return bad_id end
  spec[#spec + 1] = {KEYS[FIXED_KEYS + i], 'job:' .. id}
end
local bad_key = check_keys(spec, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[3], 'lease_ms', 1, MAX_MS}, {ARGV[4], 'wake_cap', 1, 10000},
  {ARGV[6], 'count', 0, 1000}, {ARGV[7], 'keep_ms', 1, MAX_MS},
  {ARGV[8], 'dead_ttl_ms', 1, MAX_MS}, {ARGV[9], 'dead_max', 1, MAX_MS},
  {ARGV[10], 'stats_ttl_ms', 1, MAX_MS}})
if bad_arg then return bad_arg end
if n[3] > 0 then
  local _, bad_consumer = text_arg(ARGV[2], 'consumer')
  if bad_consumer then return bad_consumer end
  local _, bad_token = text_arg(ARGV[5], 'token')
  if bad_token then return bad_token end
end

-- Check every outcome before recording any.
local delays = {}
for i = 1, outcomes do
  local at = FIXED_ARGV + (i - 1) * PER
  local op, a = ARGV[at + 1], ARGV[at + 4]
  local label = 'outcome ' .. i
  local _, bad_token_i = text_arg(ARGV[at + 3], label .. ' token')
  if bad_token_i then return bad_token_i end
  if op == 'ack' then
    if a ~= '' then
      local _, bad_result = json_arg(a, label .. ' result')
      if bad_result then return bad_result end
    end
  elseif op == 'retry' or op == 'snooze' then
    local delay, bad_delay = int_arg(a, label .. ' delay_ms', 0, MAX_MS)
    if bad_delay then return bad_delay end
    delays[i] = delay
  elseif op == 'dead' then
    local _, bad_reason = text_arg(a, label .. ' reason')
    if bad_reason then return bad_reason end
  else
    return redis.error_reply('EMQARG ' .. label .. ' op must be ack, retry, snooze or dead, got '
      .. tostring(op))
  end
end

local base = ARGV[1]
local k = {active = KEYS[2], claims = KEYS[3], wake = KEYS[4], beat = KEYS[5],
  paused = KEYS[6], schedule = KEYS[7], dead = KEYS[8]}
local keep = {keep_ms = n[4], dead_ttl_ms = n[5], dead_max = n[6], stats_ttl_ms = n[7]}
local recorded = {}
-- The outcomes' active-set and claims-index removals and their counters go
-- as one call each after the last (includes/lease.lua, includes/stats.lua),
-- before the claim reads the active set. An error part way (a row that is
-- not a hash) still sends those of the outcomes recorded before it, then
-- fails the call, as recording them one by one would leave them.
defer_lease_ends()
defer_counts()
local recorded_all, failure = pcall(function()
  for i = 1, outcomes do
    local at = FIXED_ARGV + (i - 1) * PER
    local op, id, token, a, b, c = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4],
      ARGV[at + 5], ARGV[at + 6]
    local err, at_ms, state
    if op == 'ack' then
      err, at_ms, state = finish_ack(k, base, id, token, a, keep)
    elseif op == 'retry' then
      err, at_ms, state = finish_retry(k, base, id, token, delays[i], b, c, keep)
    elseif op == 'snooze' then
      err, at_ms, state = finish_snooze(k, base, id, token, delays[i], keep)
    else
      err, at_ms, state = finish_dead(k, base, id, token, a, b, c, keep)
    end
    if err then
      recorded[i] = {-1, 'stale', err.err}
    else
      recorded[i] = {at_ms, state}
    end
  end
end)
flush_lease_ends(k.active, k.claims)
flush_counts()
if not recorded_all then
  error(failure, 0)
end

local now = now_ms()
local out = {now, -1, recorded}
if n[3] > 0 then
  claim_jobs(k, base, ARGV[2], n[1], n[2], ARGV[5], n[3], now, out)
end
return out
