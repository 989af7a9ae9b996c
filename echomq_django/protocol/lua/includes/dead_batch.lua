-- dead_batch(base, dead, batch, cutoff): one batch of the admin's bulk
-- dead-letter actions: the oldest letters that died at or before cutoff
-- (server ms; '' = now), at most batch (1..1000) of them. Returns err, ids,
-- cutoff: err is an EMQKEY or EMQARG error reply to return (nothing read).
-- Needs: now, base.
local function dead_batch(base, dead, batch, cutoff)
  local bad = check_base(base, dead)
  if bad then
    return bad, nil, nil
  end
  local most = tonumber(batch)
  if not most or most < 1 or most > 1000 then
    return redis.error_reply('EMQARG batch must be in 1..1000'), nil, nil
  end
  local until_ms = cutoff == '' and now_ms() or tonumber(cutoff)
  return nil, redis.call('ZRANGE', dead, '-inf', until_ms, 'BYSCORE', 'LIMIT', 0, most), until_ms
end
