-- dead_batch(base, dead, batch, cutoff, wake_cap): the start of one batch of
-- the admin's bulk dead-letter actions: the oldest letters that died at or
-- before cutoff (server ms; '' = now), at most batch (1..1000) of them, taken
-- off the dead set. Returns err, letters, taken, cutoff: err is an EMQARG
-- error reply to return (nothing changed); letters are the ids whose
-- row is still dead (a member whose row expired, or whose id was enqueued
-- again, is only dropped); taken counts every member taken off. The caller
-- has checked dead and base (check_keys). Needs: args, now.
-- @include args
-- @include now
local function dead_batch(base, dead, batch, cutoff)
  local most, bad_batch = int_arg(batch, 'batch', 1, 1000)
  if bad_batch then
    return bad_batch, nil, nil, nil
  end
  local until_ms = now_ms()
  if cutoff ~= '' then
    local given, bad_cutoff = int_arg(cutoff, 'cutoff_ms', 0, MAX_MS)
    if bad_cutoff then
      return bad_cutoff, nil, nil, nil
    end
    until_ms = given
  end
  local ids = redis.call('ZRANGE', dead, '-inf', until_ms, 'BYSCORE', 'LIMIT', 0, most)
  local letters = {}
  for _, id in ipairs(ids) do
    redis.call('ZREM', dead, id)
    if redis.call('HGET', base .. 'job:' .. id, 'state') == 'dead' then
      letters[#letters + 1] = id
    end
  end
  return nil, letters, #ids, until_ms
end
