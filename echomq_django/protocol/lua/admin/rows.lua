-- admin/rows: read one page of rows for the admin's set browser; writes nothing.
-- Each value comes back cut to at most `cut` bytes, so a 512 KB payload or a
-- long traceback never crosses the wire for a list; the cut falls on a UTF-8
-- character boundary (a partial character would not decode). The job's dotted
-- path and the last line of the last error are read from the whole values
-- here for the same reason.
-- KEYS[1] pending  emq:{q}:pending, not read: it anchors the base check and the
--                  slot, whichever set the ids were read from
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] cut      most bytes returned per value
-- ARGV[3] ids      JSON array of job ids, at most 500
-- ARGV[4] fields   JSON array of row field names to read (HMGET order; 'payload'
--                  reads the whole payload, its chunks joined: includes/payload.lua)
-- Returns: one array per id, in order: the fields' values (nil when absent;
--          every value of a missing row is nil), then the payload's "job"
--          path (nil when absent or not found), then the last line of
--          last_error that is not blank, cut (a Python traceback's
--          "ExceptionClass: message"; nil when there is no error).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root that
--         is not their root (nothing changes);
--         EMQARG a malformed argument: cut not in 1..1000000, ids or fields
--         not JSON arrays, more than 500 ids.
-- @include args
-- @include base
-- @include payload
local bad_key = check_keys({{KEYS[1], 'pending'}}, ARGV[1])
if bad_key then return bad_key end
local cut, bad_cut = int_arg(ARGV[2], 'cut', 1, 1000000)
if bad_cut then return bad_cut end

-- The first `cut` bytes of text, without the start of a character the cut
-- would split: while the first byte left out is a UTF-8 continuation byte
-- (0x80-0xBF), the cut moves back one byte.
local function cut_utf8(text)
  if #text <= cut then return text end
  local n = cut
  while n > 0 do
    local b = string.byte(text, n + 1)
    if b < 0x80 or b > 0xBF then break end
    n = n - 1
  end
  return string.sub(text, 1, n)
end

-- The last line of text that is not blank, cut; false when there is none.
-- Plain searches from the start, so a long traceback costs one pass.
local function last_line(text)
  local stop = #text
  while stop > 0 do
    local b = string.byte(text, stop)
    if b ~= 32 and (b < 9 or b > 13) then break end
    stop = stop - 1
  end
  if stop == 0 then return false end
  local start = 1
  while true do
    local nl = string.find(text, '\n', start, true)
    if not nl or nl > stop then break end
    start = nl + 1
  end
  return cut_utf8(string.sub(text, start, stop))
end

local ok_ids, ids = pcall(cjson.decode, ARGV[3])
local ok_fields, fields = pcall(cjson.decode, ARGV[4])
if not ok_ids or type(ids) ~= 'table' or not ok_fields or type(fields) ~= 'table'
    or #fields == 0 then
  return redis.error_reply('EMQARG ids and fields must be JSON arrays (fields not empty)')
end
if #ids > 500 then
  return redis.error_reply('EMQARG at most 500 ids per call, got ' .. #ids)
end
-- One HMGET per row: the fields asked for, then the payload's fields, then
-- last_error (the payload and the error are read whole, then cut).
local names = {unpack(fields)}
for _, name in ipairs(PAYLOAD_FIELDS) do
  names[#names + 1] = name
end
names[#names + 1] = 'last_error'
local out = {}
for i, id in ipairs(ids) do
  local row = ARGV[1] .. 'job:' .. id
  local read = redis.call('HMGET', row, unpack(names))
  local payload = join_payload(read, #fields + 1)
  local err = read[#names]
  local values = {}
  for j = 1, #fields do
    -- 'payload' is the whole payload; its own field may hold only a chunk.
    local value = fields[j] == 'payload' and payload or read[j]
    values[j] = value and cut_utf8(value)
  end
  local path = payload and string.match(payload, '"job"%s*:%s*"([^"]*)"') or false
  values[#fields + 1] = path or false
  values[#fields + 2] = err and last_line(err) or false
  out[i] = values
end
return out
