-- The payload in a job's row (docs/protocol.md, "The job row"): the only
-- place that writes a payload into a row or reads one back.
-- A hash stays a listpack (a few bytes per field instead of a hashtable's
-- entries) while every value is at most hash-max-listpack-value bytes, 64 on
-- a default-configured Redis or Valkey. So a payload of 65..512 bytes is
-- written in chunks of at most 64 bytes, `payload`, `payload.2`, ...,
-- `payload.9`; a shorter or longer one whole, in `payload` (past 512 bytes
-- the chunks' field names cost more than the listpack saves). A chunk ends on
-- a UTF-8 character boundary (it backs off at most 3 bytes), so each chunk is
-- text on its own and every chunk but the last holds at least 61 bytes: 9
-- names cover 512 bytes. Joined in order, the chunks are the payload's exact
-- bytes (records.decode_row does the same in Python).
local PAYLOAD_CHUNK = 64
local PAYLOAD_SPLIT_MAX = 512
local PAYLOAD_FIELDS = {'payload', 'payload.2', 'payload.3', 'payload.4', 'payload.5',
  'payload.6', 'payload.7', 'payload.8', 'payload.9'}

-- payload_fields(payload, fields): append to the list `fields` the row's
-- field names and values that hold `payload`, for one HSET; returns fields.
local function payload_fields(payload, fields)
  local size = #payload
  if size <= PAYLOAD_CHUNK or size > PAYLOAD_SPLIT_MAX then
    fields[#fields + 1] = 'payload'
    fields[#fields + 1] = payload
    return fields
  end
  local start, chunk = 1, 1
  while start <= size do
    local stop = math.min(start + PAYLOAD_CHUNK - 1, size)
    -- While the next chunk would start inside a character (on a
    -- continuation byte, 0x80-0xBF), end this one a byte earlier.
    local back = 0
    while stop < size and back < 3 do
      local b = string.byte(payload, stop + 1)
      if b < 0x80 or b > 0xBF then
        break
      end
      stop, back = stop - 1, back + 1
    end
    fields[#fields + 1] = PAYLOAD_FIELDS[chunk]
    fields[#fields + 1] = string.sub(payload, start, stop)
    start, chunk = stop + 1, chunk + 1
  end
  return fields
end

-- join_payload(values, first): the payload from the values of an HMGET that
-- asked for PAYLOAD_FIELDS, in order, from index `first` on (a caller that
-- reads other fields in the same HMGET); false when the row has none.
local function join_payload(values, first)
  if not values[first + 1] then
    return values[first]
  end
  local last = first + 1
  while last < first + #PAYLOAD_FIELDS - 1 and values[last + 1] do
    last = last + 1
  end
  return table.concat(values, '', first, last)
end

-- read_payload(row): the payload of the row, its chunks joined; false when
-- the row has none (it does not exist).
local function read_payload(row)
  return join_payload(redis.call('HMGET', row, unpack(PAYLOAD_FIELDS)), 1)
end
