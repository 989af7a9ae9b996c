-- stale(state): the EMQSTALE error reply for a token that does not hold the
-- lease of a job in this state (false: the row does not exist).
local function stale(state)
  if state == false or state == nil then
    return redis.error_reply('EMQSTALE job row does not exist')
  end
  return redis.error_reply('EMQSTALE token does not hold the lease (state ' .. tostring(state) .. ')')
end

-- fence(row, token): the job must be active and held by this fencing token.
-- Returns an error reply for the caller to return, or nil when the token holds.
local function fence(row, token)
  local found = redis.call('HMGET', row, 'state', 'token')
  if found[1] ~= 'active' or found[2] ~= token then
    return stale(found[1])
  end
  return nil
end
