-- check_definition(keys, argv): the keys of register and upsert are the
-- queue's (repeat, repeat_record of the name, beat: EMQKEY) and the arguments
-- (see write_definition, ARGV[10] the first run) are a schedule's (EMQARG).
-- Returns an error reply, or nil. Needs: args, base.
-- @include args
-- @include base
local function check_definition(keys, argv)
  local _, bad = name_arg(argv[1])
  if bad then return bad end
  bad = check_keys({{keys[1], 'repeat'}, {keys[2], 'repeat:' .. argv[1]}, {keys[3], 'beat'}})
  if bad then return bad end
  local every_ms
  every_ms, bad = opt_int_arg(argv[4], 'every_ms', 1, MAX_MS)
  if bad then return bad end
  if (every_ms == nil) == (argv[5] == '') then
    return redis.error_reply('EMQARG exactly one of every_ms and cron must be given')
  end
  if argv[6] == '' then
    return redis.error_reply('EMQARG tz must be a zone name')
  end
  for _, json in ipairs({{2, 'definition'}, {3, 'timing'}, {7, 'template'}}) do
    _, bad = json_arg(argv[json[1]], json[2], true)
    if bad then return bad end
  end
  if argv[8] ~= 'coalesce' and argv[8] ~= 'skip' then
    return redis.error_reply('EMQARG missed must be coalesce or skip, got ' .. tostring(argv[8]))
  end
  _, bad = opt_int_arg(argv[9], 'start_at_ms', 0, MAX_MS)
  if bad then return bad end
  _, bad = int_arg(argv[10], 'first_run_ms', 0, MAX_MS)
  return bad
end

-- write_definition(record, argv, fresh, now): write a recurring schedule's
-- definition (ARGV[1..9] of register and upsert: name, definition, timing,
-- every_ms, cron, tz, template, missed, start_at_ms) onto its record and bump
-- its version; a fresh record also gets created_at_ms. The registry member is
-- the caller's business.
local function write_definition(record, argv, fresh, now)
  if fresh then
    redis.call('HSET', record, 'created_at_ms', now)
  end
  redis.call('HSET', record, 'name', argv[1], 'definition', argv[2], 'timing', argv[3],
    'every_ms', argv[4], 'cron', argv[5], 'tz', argv[6], 'template', argv[7],
    'missed', argv[8], 'start_at_ms', argv[9], 'updated_at_ms', now)
  redis.call('HINCRBY', record, 'version', 1)
end
