-- admission(row, id): the gate enqueue and schedule share. Returns an EMQKIND
-- error reply when the id is not JOB-namespaced, 0 when its row exists (a
-- duplicate: nothing changes), or nil when the job may be admitted.
local function admission(row, id)
  if string.sub(id, 1, 3) ~= 'JOB' then
    return redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. id)
  end
  if redis.call('EXISTS', row) == 1 then
    return 0
  end
  return nil
end
