-- enqueue_many: admit a batch of jobs in one call, each to its lane now or to
-- schedule (docs/protocol.md, "enqueue_many"). Every item is checked before
-- the first write, so one bad item writes nothing of the call.
-- KEYS[1] pending  emq:{q}:pending (the ungrouped lane; its root names every lane key)
-- KEYS[2] schedule emq:{q}:schedule
-- KEYS[3] wake     emq:{q}:wake
-- KEYS[4] beat     emq:{q}:beat, marked once when the batch's earliest run-at is
--                  earlier than the schedule's head
-- ARGV[1] base     emq:{q}: (row keys are base .. 'job:' .. id)
-- ARGV[2] wake_cap most wake markers kept, 1..10000
-- ARGV[3] wake     0: push no wake marker; 1: one when this call admitted a job
--                  to its lane; 2: one in any case (the last call of a batch
--                  whose earlier calls may have admitted some)
-- ARGV[4] first    the index of this call's first item in the caller's batch
--                  (0..2^53), so an error names the item as the caller knows it
-- ARGV[5] items    JSON array of at most 1000 items, each an array of six
--                  strings: job_id (JOB-namespaced), payload (JSON text),
--                  group ('' for none), priority (-100..100), mode ('' now,
--                  'at' value is a run-at ms, 'in' value is a delay ms on the
--                  SERVER clock), value (0..2^53; '0' when mode is '')
-- Returns: one code per item, in order: 1 enqueued, 2 scheduled, 0 duplicate
--   (its row exists, or an earlier item of the batch had the same id;
--   nothing changes for it).
-- Errors: EMQKEY a key that is not the queue's key named above, or a base root
--         that is not their root; EMQKIND an id that is not JOB-namespaced;
--         EMQARG a malformed argument or item (a payload that is not JSON
--         included). The message of an item's error starts with
--         items[<index>]:. Nothing changes.
-- @include args
-- @include now
-- @include signal
-- @include base
-- @include rejoin
-- @include lease
-- @include admission
local bad_key = check_keys({{KEYS[1], 'pending'}, {KEYS[2], 'schedule'}, {KEYS[3], 'wake'},
  {KEYS[4], 'beat'}}, ARGV[1])
if bad_key then return bad_key end
local n, bad_arg = ints({{ARGV[2], 'wake_cap', 1, 10000}, {ARGV[3], 'wake', 0, 2},
  {ARGV[4], 'first', 0, MAX_MS}})
if bad_arg then return bad_arg end
local ok, items = pcall(cjson.decode, ARGV[5])
if not ok or type(items) ~= 'table' or #items > 1000 then
  return redis.error_reply('EMQARG items must be a JSON array of at most 1000 items')
end

-- An error reply about one item: its code, then items[<index>]: and the rule.
local function at_item(i, reply)
  local code, rule = string.match(reply.err, '^(%S+) (.*)$')
  return redis.error_reply(code .. ' items[' .. (n[3] + i - 1) .. ']: ' .. rule)
end

local checked = {}
for i, item in ipairs(items) do
  if type(item) ~= 'table' or #item ~= 6 then
    return at_item(i, redis.error_reply('EMQARG must be an array of six strings'))
  end
  for j = 1, 6 do
    if type(item[j]) ~= 'string' then
      return at_item(i, redis.error_reply('EMQARG must be an array of six strings'))
    end
  end
  local id, payload, group, mode = item[1], item[2], item[3], item[5]
  local _, bad = text_arg(id, 'job_id')
  if not bad and string.sub(id, 1, 3) ~= 'JOB' then
    bad = redis.error_reply('EMQKIND job id must be JOB-namespaced, got ' .. id)
  end
  if not bad then
    _, bad = group_arg(group)
  end
  local priority, value
  if not bad then
    priority, bad = int_arg(item[4], 'priority', -100, 100)
  end
  if not bad and mode ~= '' and mode ~= 'at' and mode ~= 'in' then
    bad = redis.error_reply("EMQARG mode must be '', at or in, got " .. mode)
  end
  if not bad then
    value, bad = int_arg(item[6], 'value', 0, MAX_MS)
  end
  if not bad then
    _, bad = json_arg(payload, 'payload')
  end
  if bad then
    return at_item(i, bad)
  end
  checked[i] = {id, payload, group, priority, mode, value}
end

local now = now_ms()
-- The schedule's head before the batch: the beat is marked once, when the
-- batch brings an earlier run-at (park marks it per job).
local head = false
for _, item in ipairs(checked) do
  if item[5] ~= '' then
    head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2] or false
    break
  end
end
local out, admitted, earliest = {}, 0, nil
for i, item in ipairs(checked) do
  local id, payload, group, priority, mode, value = unpack(item)
  local row = ARGV[1] .. 'job:' .. id
  if admission(row, id) == 0 then
    out[i] = 0
  else
    local fields = new_row(payload, now, group, priority)
    if mode == '' then
      rejoin(row, KEYS[1], id, group, priority, fields)
      admitted = admitted + 1
      out[i] = 1
    else
      local score = mode == 'at' and value or math.min(now + value, MAX_MS)
      park_at(row, KEYS[2], id, score, fields)
      if earliest == nil or score < earliest then
        earliest = score
      end
      out[i] = 2
    end
  end
end
if n[2] == 2 or (n[2] == 1 and admitted > 0) then
  signal(KEYS[3], 1, n[1])
end
if earliest and (not head or earliest < tonumber(head)) then
  signal(KEYS[4], 1, 1)
end
return out
