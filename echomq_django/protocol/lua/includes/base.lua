-- check_base(base, key): the base root passed in ARGV must be the prefix of a
-- declared key, so row keys derived from it stay in the queue's hash slot.
-- Being a prefix is not enough: '' or 'emq:' or 'emq:{q' are prefixes of
-- every key of queue q but drop or cut its hash tag, and 'emq:{q}:p' keeps
-- the tag but names no row. So the base must also be exactly a root: one
-- complete hash tag followed by ':' and nothing after it.
local function check_base(base, key)
  if string.sub(key, 1, #base) ~= base or not string.find(base, '^[^{}]*{[^{}]+}:$') then
    return redis.error_reply('EMQKEY base root ' .. base .. ' is not the queue root of ' .. key)
  end
  return nil
end
