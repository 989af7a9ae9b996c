-- admin/search: which of a window of a set's jobs match the admin's filters;
-- writes nothing (docs/admin.md, "Search and filters"). The caller reads the
-- window (at most 1000 ids, by rank) and passes it here; each row is read
-- once (one HMGET: its group and its payload), and the scan stops at the
-- most-th match, so a call costs at most one HMGET per id passed.
-- KEYS[1] pending  emq:{q}:pending, not read: it anchors the base check and the
--                  slot, whichever set the ids were read from
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] ids      JSON array of job ids, at most 1000, in the set's order
-- ARGV[3] function text the job's dotted path (the payload's "job") must
--                  contain, case-sensitive; '' matches any
-- ARGV[4] lane     the job's group, exactly; '' matches any
-- ARGV[5] text     text the payload (JSON text, arguments included) must
--                  contain, case-sensitive; '' matches any
-- ARGV[6] most     stop after this many matches, 1..1000
-- Returns: {examined, index...}: how many ids were looked at (all of them,
--   or up to and including the most-th match), then the 1-based index in ids
--   of each match, in order. A missing row never matches.
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root
--         that is not their root; EMQARG ids not a JSON array, more than 1000
--         ids, or most not in 1..1000 (nothing is read).
-- @include args
-- @include base
-- @include payload
local bad_key = check_keys({{KEYS[1], 'pending'}}, ARGV[1])
if bad_key then return bad_key end
local most, bad_most = int_arg(ARGV[6], 'most', 1, 1000)
if bad_most then return bad_most end
local ok, ids = pcall(cjson.decode, ARGV[2])
if not ok or type(ids) ~= 'table' then
  return redis.error_reply('EMQARG ids must be a JSON array')
end
if #ids > 1000 then
  return redis.error_reply('EMQARG at most 1000 ids per call, got ' .. #ids)
end
local fn, lane, text = ARGV[3], ARGV[4], ARGV[5]
local names = {'group', 'state'}
for _, name in ipairs(PAYLOAD_FIELDS) do
  names[#names + 1] = name
end
local out = {0}
local found = 0
for i, id in ipairs(ids) do
  out[1] = i
  local read = redis.call('HMGET', ARGV[1] .. 'job:' .. id, unpack(names))
  local match = read[2] ~= false
  if match and lane ~= '' then
    match = read[1] == lane
  end
  if match and (fn ~= '' or text ~= '') then
    local payload = join_payload(read, 3)
    if not payload then
      match = false
    else
      if fn ~= '' then
        local path = string.match(payload, '"job"%s*:%s*"([^"]*)"')
        match = path ~= nil and string.find(path, fn, 1, true) ~= nil
      end
      if match and text ~= '' then
        match = string.find(payload, text, 1, true) ~= nil
      end
    end
  end
  if match then
    found = found + 1
    out[#out + 1] = i
    if found >= most then break end
  end
end
return out
