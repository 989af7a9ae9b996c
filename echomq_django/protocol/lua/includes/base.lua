-- Every key a script touches is a key of one queue (or of the shared root
-- emq:{~}:), under one root emq:{<tag>}: so it stays in the tag's hash slot.
-- The declared keys are checked before anything else: a caller that passes
-- the pending key where the wake key belongs, or another queue's key, gets
-- EMQKEY and nothing is written (docs/protocol.md, "Error codes").

-- queue_root(key): the root of a queue key ('emq:{q}:' of 'emq:{q}:pending'),
-- or nil when the key has none. Keys derived inside a script (a job's row,
-- a lane's set) are built on the root of a checked key, or on a checked base.
local function queue_root(key)
  return string.match(key, '^emq:{[^{}]+}:')
end

-- check_keys(spec, base): spec lists every declared key as {key, suffix}; each
-- key must be root .. suffix, root being the root of the first key. base, when
-- given (ARGV base, or a fixed root such as 'emq:{~}:'), must be that root
-- exactly: a prefix such as 'emq:' or 'emq:{q' drops or cuts the hash tag, and
-- 'emq:{q}:p' names no row. Returns an EMQKEY error reply, or nil.
local function check_keys(spec, base)
  local first = spec[1][1]
  local root = queue_root(first)
  if base ~= nil and base ~= root then
    return redis.error_reply('EMQKEY base root ' .. tostring(base) .. ' is not the queue root of '
      .. tostring(first))
  end
  if root == nil then
    return redis.error_reply('EMQKEY key ' .. tostring(first) .. ' is not a queue key (emq:{<queue>}:'
      .. spec[1][2] .. ')')
  end
  for _, entry in ipairs(spec) do
    if entry[1] ~= root .. entry[2] then
      return redis.error_reply('EMQKEY key ' .. tostring(entry[1]) .. ' must be ' .. root
        .. entry[2])
    end
  end
  return nil
end
