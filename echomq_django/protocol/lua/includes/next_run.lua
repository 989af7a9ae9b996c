-- set_next_run(registry, beat, name, score, flag): score a schedule's next run
-- on the registry (ZADD, with flag 'XX' to move only an existing member, or
-- nil), and mark the metronome's beat when the new run is earlier than the
-- instant it plans to wake at. Needs: beat.
-- @include beat
local function set_next_run(registry, beat, name, score, flag)
  if flag then
    redis.call('ZADD', registry, flag, score, name)
  else
    redis.call('ZADD', registry, score, name)
  end
  mark_beat(beat, score)
end
