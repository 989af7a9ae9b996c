-- The metronome's plan (docs/protocol.md, "Metronome"): the one rule for when
-- a script wakes the metronome.
--   <root>beat_at  STRING, server ms: the instant a metronome will next wake
--                  at, stored by the horizon it read (plan_beat); it expires
--                  PLAN_GRACE_MS after that instant, so the plan of a
--                  metronome that died lapses instead of silencing the beat.
--   <root>beat     LIST of one marker: a metronome's listener BLPOPs it.
-- A script that creates an instant the metronome must act at (a run-at, a
-- lease deadline, a next run) calls mark_beat: one marker only when the
-- instant is earlier than the plan, or when there is no plan. A later instant
-- is found by the beat the plan already has, so the metronome is woken when
-- its next instant moves earlier, never once per job.
-- Needs: signal, base.
-- @include signal
-- @include base

-- How long past its instant a plan stands (ms): a living metronome stores a
-- new one within a beat of waking.
local PLAN_GRACE_MS = 1000

-- plan_beat(beat_at, now, plan): store the instant (server ms) the metronome
-- that just read the horizon will wake at.
local function plan_beat(beat_at, now, plan)
  redis.call('SET', beat_at, plan, 'PX', math.max(plan - now, 0) + PLAN_GRACE_MS)
end

-- mark_beat(beat, at): wake a metronome (one marker on beat, the list of the
-- queue whose root names beat_at too) when `at` (server ms) is earlier than
-- the stored plan, or when no plan is stored.
local function mark_beat(beat, at)
  local plan = redis.call('GET', queue_root(beat) .. 'beat_at')
  if not plan or at < tonumber(plan) then
    signal(beat, 1, 1)
  end
end
