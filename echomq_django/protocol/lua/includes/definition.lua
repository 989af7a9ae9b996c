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
