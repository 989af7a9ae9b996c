-- settle(row, active, claims, id, token, keep_ms, op): the start every script
-- that ends a lease shares (op is 'ack', 'retry', 'snooze', 'dead' or
-- 'release'). Returns err, now, cancelled, replay, attempts:
--   err     an EMQSTALE error reply: the token does not hold the lease and did
--           not end it either (nothing changed; return it);
--   replay  the outcome this very token recorded when this same op ended the
--           lease: the call is a repeat whose first reply was lost (a dropped
--           connection, a client retry). Nothing changes; answer with it
--           (idempotent finish). Another op by a spent token is EMQSTALE;
--   now     otherwise, the server clock; the lease is over (the job left
--           active and lost its token);
--   cancelled  true when a cancel requested while it ran has ended the job
--           cancelled, kept keep_ms, whatever the caller's outcome would be;
--   attempts   the attempt this lease ran (the row's count; a number).
-- The caller records its own outcome with settled(). Needs: now, fence,
-- lanes, lease, cancelled.
-- @include now
-- @include fence
-- @include lanes
-- @include lease
-- @include cancelled
local function settle(row, active, claims, id, token, keep_ms, op)
  local found = redis.call('HMGET', row, 'state', 'token', 'settled_token', 'settled', 'group',
    'cancel_requested', 'attempts')
  if found[1] ~= 'active' or found[2] ~= token then
    local prefix = op .. ':'
    if found[3] == token and found[4] and string.sub(found[4], 1, #prefix) == prefix then
      return nil, now_ms(), false, string.sub(found[4], #prefix + 1)
    end
    return stale(found[1]), nil, false, nil
  end
  local now = now_ms()
  end_lease(row, active, claims, id, token, found[5] or UNGROUPED)
  if end_if_cancelled(row, now, keep_ms, found[6] or false) then
    redis.call('HSET', row, 'settled_token', token, 'settled', op .. ':cancelled')
    return nil, now, true, nil, tonumber(found[7] or '0')
  end
  return nil, now, false, nil, tonumber(found[7] or '0')
end

-- settled_fields(token, op, outcome): the row's fields that record how this
-- token ended the lease, so a repeat of the same call answers the same (see
-- settle); for the caller's own HSET of the outcome (one write, not two).
local function settled_fields(token, op, outcome)
  return {'settled_token', token, 'settled', op .. ':' .. outcome}
end

-- settled(row, token, op, outcome): record them on their own.
local function settled(row, token, op, outcome)
  redis.call('HSET', row, unpack(settled_fields(token, op, outcome)))
end
