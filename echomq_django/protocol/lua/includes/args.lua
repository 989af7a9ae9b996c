-- Argument checks every script runs before its first write, so a client other
-- than ours that sends garbage gets an EMQARG error and nothing changes.
-- Each returns the checked value, or nil and an error reply to return.

-- int_arg(value, name, low, high): an integer in low..high, written in decimal
-- digits with an optional leading '-' and nothing else. tonumber alone would
-- also take '0x10', ' 5', '1e3' and '5.0', which no client of ours sends.
local function int_arg(value, name, low, high)
  local n = type(value) == 'string' and string.find(value, '^-?%d+$') and tonumber(value)
  -- A Lua number holds integers exactly up to 2^53: 2^53 + 1 reads as 2^53,
  -- so a reading of 2^53 or more is taken only when its digits say 2^53.
  if n and n >= 9007199254740992
      and string.gsub(value, '^0+', '') ~= '9007199254740992' then
    n = nil
  end
  if not n or n < low or n > high then
    return nil, redis.error_reply(string.format(
      'EMQARG %s must be an integer in %d..%d (decimal digits), got %s', name, low, high,
      tostring(value)))
  end
  return n, nil
end

-- text_arg(value, name): a non-empty string.
local function text_arg(value, name)
  if value == nil or value == '' then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be a non-empty string')
  end
  return value, nil
end

-- json_arg(value, name, object): JSON text the server can read (with object,
-- a JSON object), as the protocol says of payloads, results and definitions.
-- The server's cjson also reads NaN, Infinity and hex numbers (its
-- decode_invalid_numbers is on, and turning it off would change the Lua state
-- every script on the server shares); our clients never send them
-- (rules.check_payload_text, rules.json_text). It refuses an escaped lone
-- surrogate ("\ud800"), which JSON's grammar allows and Python reads and
-- writes, so a text it refuses is read again with every \uD800-\uDFFF escape
-- as \u0000: that changes no other token, and an escaped backslash followed
-- by 'ud800' stays valid text too.
local function json_arg(value, name, object)
  local ok, decoded = pcall(cjson.decode, value)
  if not ok and type(value) == 'string' then
    local plain = string.gsub(value, '\\u[dD][89a-fA-F]%x%x', '\\u0000')
    local again, read = pcall(cjson.decode, plain)
    if again then
      ok, decoded = true, read
    end
  end
  if not ok then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be JSON text: ' .. tostring(decoded))
  end
  if object and type(decoded) ~= 'table' then
    return nil, redis.error_reply('EMQARG ' .. name .. ' must be a JSON object')
  end
  return value, nil
end

-- name_arg(value): a recurring schedule's name: not empty, no whitespace (the
-- Python rule, rules.check_schedule_name, also keeps it to 200 printable
-- characters).
local function name_arg(value)
  if value == nil or value == '' or string.find(value, '%s') then
    return nil, redis.error_reply('EMQARG name must be a non-empty string without whitespace, '
      .. 'got ' .. tostring(value))
  end
  return value, nil
end

-- opt_int_arg(value, name, low, high): '' (none) or an integer in low..high.
local function opt_int_arg(value, name, low, high)
  if value == '' then
    return nil, nil
  end
  return int_arg(value, name, low, high)
end

-- group_arg(value): a group (lane) name, '' for none: at most 200 bytes,
-- no whitespace and no braces (it sits inside key names).
local function group_arg(value)
  if value == nil or #value > 200 or string.find(value, '[%s{}]') then
    return nil, redis.error_reply('EMQARG group must be at most 200 characters without '
      .. 'whitespace or braces, got ' .. tostring(value))
  end
  return value, nil
end

-- job_fields(group, priority): the row fields that place a job in its lane:
-- 'group' when it has one, 'priority' when it is not 0.
local function job_fields(group, priority)
  local fields = {}
  if group ~= '' then
    fields[#fields + 1] = 'group'
    fields[#fields + 1] = group
  end
  if priority ~= 0 then
    fields[#fields + 1] = 'priority'
    fields[#fields + 1] = priority
  end
  return fields
end

-- ints(spec): int_arg over several {value, name, low, high}; returns the
-- numbers in order, or nil and the first error reply.
local function ints(spec)
  local out = {}
  for i, s in ipairs(spec) do
    local n, err = int_arg(s[1], s[2], s[3], s[4])
    if err then
      return nil, err
    end
    out[i] = n
  end
  return out, nil
end

-- The largest ms value: 2^53, the largest integer a Lua number holds exactly.
local MAX_MS = 9007199254740992
