-- signal(key, n, cap): push n wake markers onto a list, keeping at most cap.
-- Blocked consumers (or the metronome) BLPOP the list; a marker nobody takes
-- costs one empty claim later, and the cap keeps a list nobody reads small.
local function signal(key, n, cap)
  local pushes = math.min(n, cap)
  local length = 0
  for _ = 1, pushes do
    length = redis.call('LPUSH', key, '1')
  end
  if length > cap then
    redis.call('LTRIM', key, 0, cap - 1)
  end
end
