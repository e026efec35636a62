-- lib/ready.lua: make a task ready to run, in priority order (`--! include ready.lua`).
--
-- A task of the default priority (0) goes to the pending LIST, as it always has:
-- a queue that never sees another priority costs what it did. Any other priority
-- (-100..100, higher first, stored as the task hash's 'prio') goes to the
-- P:prioritized ZSET, scored (100 - priority) * BAND + n, where n comes from the
-- P:prioseq counter, so tasks of one priority leave in the order they became ready
-- (n = 0 for a task handed back: the front of its priority, as RPUSH is for the LIST).
-- fetch.lua takes from the ZSET while its best score is a priority above 0, then
-- from the LIST, then the priorities below 0.
--
-- A worker blocked in BLMOVE watches the LIST alone. A prioritized task made ready
-- while the LIST holds no id pushes one MARKER there (up to MARKERS_MAX), which wakes one blocked worker
-- (whose fetch.lua drops it and takes from the ZSET). The LIST holds either markers
-- or ids, never both: whatever pushes an id drops the markers first (they sit at the
-- tail, the end taken next), so the LIST's real length is 0 when its tail is a MARKER.

--! include types.lua

local MARKER = '~redisq:wake'  -- a reserved id: ours are URL-safe base64, and no producer should write this one
local MARKERS_MAX = 64  -- wake-ups waiting at once, at most (priority.MARKERS_MAX): a fetch that takes
                        -- a prioritized task straight from the ZSET leaves its marker, so they are capped
local BAND = 17592186044416  -- 2^44: ids of one priority before n wraps; 201 bands * 2^44 < 2^53

-- stored_prio(tkey): the priority in a task hash, 0 when missing, not a hash, or not an
-- integer in -100..100 (another producer's bad field never stops its task from running)
local function stored_prio(tkey)
  if redis.call('TYPE', tkey)['ok'] ~= 'hash' then return 0 end
  local p = tonumber(redis.call('HGET', tkey, 'prio'))
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then return 0 end
  return p
end

-- ready(pending, prioritized, seq, id, prio, front): queue id by its priority; front: at the
-- front of its priority (handed back), else at the back
local function ready(pending, prioritized, seq, id, prio, front)
  if prio ~= 0 then
    want(prioritized, 'zset')  -- here, not in every caller: a queue of default priorities never pays for the check
    local n = 0
    if not front then n = redis.call('INCR', seq) % BAND end
    redis.call('ZADD', prioritized, (100 - prio) * BAND + n, id)
    local len = redis.call('LLEN', pending)
    if len == 0 or (len < MARKERS_MAX and redis.call('LINDEX', pending, -1) == MARKER) then
      redis.call('LPUSH', pending, MARKER)
    end
    return
  end
  if front then  -- at the tail, the end taken next: behind any markers, so they go first
    while redis.call('LINDEX', pending, -1) == MARKER do redis.call('RPOP', pending) end
    redis.call('RPUSH', pending, id)
    return
  end
  local len = wrote('LPUSH', pending, id)  -- its type checked by its reply: the common case pays no TYPE
  -- markers sit at the tail, the id now at the head; there are some only while the LIST held
  -- no id, at most MARKERS_MAX: a LIST longer than that once the id is in has none to drop
  if len > 1 and len <= MARKERS_MAX + 1 then
    while redis.call('LINDEX', pending, -1) == MARKER do redis.call('RPOP', pending) end
  end
end
