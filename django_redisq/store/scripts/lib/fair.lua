-- lib/fair.lua: a fair queue (QUEUE_OPTIONS[q]["FAIR"]) serves its tasks round-robin across
-- their fairness key (`--! include fair.lua`; brings ready.lua). Keys, all derived from the
-- queue's prefix (so in its slot):
--   P:fair:<key>  ZSET  the ready ids of one fairness key, scored as P:prioritized is
--                       ((100 - priority) * BAND + n, n from P:prioseq): priorities order
--                       within a key, FIFO within a priority
--   P:fair        LIST  the ring: each key whose ZSET is not empty, once
--   P:fairn       STRING how many ids the ZSETs hold in all (the queue's pending count)
-- A key joins the ring's tail when its ZSET gets its first id; a take rotates the ring
-- (LMOVE head to tail), pops that key's best id and, when the ZSET is then empty, drops
-- the key again (RPOP: it is the tail). Each take is O(log n) in one key's backlog and
-- O(1) in the number of keys: no scan. A worker blocked in BLMOVE is woken by a marker
-- in P:pending, as for a prioritized task (lib/ready.lua).
--! include ready.lua

-- fair_ready(prefix, q, key, id, prio): queue id under fairness key `key`, at the back of its priority
local function fair_ready(prefix, q, key, id, prio)
  local zkey, ring = prefix .. 'fair:' .. key, prefix .. 'fair'
  want(zkey, 'zset')
  want(ring, 'list')
  local fresh = redis.call('EXISTS', zkey) == 0
  redis.call('ZADD', zkey, (100 - prio) * BAND + redis.call('INCR', q.seq) % BAND, id)
  if fresh then redis.call('RPUSH', ring, key) end
  want(prefix .. 'fairn', 'string')
  redis.call('INCR', prefix .. 'fairn')
  local len = redis.call('LLEN', q.pending)
  if len == 0 or (len < MARKERS_MAX and redis.call('LINDEX', q.pending, -1) == MARKER) then
    redis.call('LPUSH', q.pending, MARKER)
  end
end

-- fair_take(prefix): the next id round-robin across the keys, or nil when none is queued
local function fair_take(prefix)
  local ring = prefix .. 'fair'
  if redis.call('TYPE', ring)['ok'] ~= 'list' then return nil end
  for _ = 1, 3 do  -- a key whose ZSET is gone (not ours to keep) is dropped and the next one asked
    local key = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
    if not key then return nil end
    local zkey = prefix .. 'fair:' .. key
    local got = redis.call('TYPE', zkey)['ok'] == 'zset' and redis.call('ZPOPMIN', zkey) or {}
    if redis.call('EXISTS', zkey) == 0 then redis.call('RPOP', ring) end
    if got[1] then
      if redis.call('DECR', prefix .. 'fairn') < 0 then redis.call('SET', prefix .. 'fairn', 0) end
      return got[1]
    end
  end
  return nil
end
