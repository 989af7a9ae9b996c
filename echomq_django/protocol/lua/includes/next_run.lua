-- set_next_run(registry, beat, name, score, flag): score a schedule's next run
-- on the registry (ZADD, with flag 'XX' to move only an existing member, or
-- nil), and mark the metronome's beat when the new run is earlier than the
-- registry's head before the write, which the metronome may be sleeping
-- towards. Needs: signal.
-- @include signal
local function set_next_run(registry, beat, name, score, flag)
  local head = redis.call('ZRANGE', registry, 0, 0, 'WITHSCORES')
  if flag then
    redis.call('ZADD', registry, flag, score, name)
  else
    redis.call('ZADD', registry, score, name)
  end
  if head[2] == nil or score < tonumber(head[2]) then
    signal(beat, 1, 1)
  end
end
