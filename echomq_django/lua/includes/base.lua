-- check_base(base, key): the base root passed in ARGV must be the prefix of a
-- declared key, so row keys derived from it stay in the queue's hash slot.
local function check_base(base, key)
  if string.sub(key, 1, #base) ~= base then
    return redis.error_reply('EMQKEY base root ' .. base .. ' is not the prefix of ' .. key)
  end
  return nil
end
