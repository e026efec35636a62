-- reap: give back the tasks of workers whose heartbeat stopped. Each dead
-- worker's processing list goes back to the front of pending (they run next),
-- its guards are released, and it is removed from the heartbeat set.
--
-- KEYS[1] -> P:workers  (ZSET, worker id -> last heartbeat in Redis ms)
-- KEYS[2] -> P:pending  (LIST)
-- ARGV[1] -> P:         the queue's key prefix (processing lists, task hashes, guards)
-- ARGV[2] -> dead after in ms: a worker silent for longer is dead
-- ARGV[3] -> most workers reaped by one call
--
-- Returns: {tasks given back, reaped worker id, ...}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, tonumber(ARGV[3]))
local out = {0}
for _, w in ipairs(dead) do
  local plist = prefix .. 'processing:' .. w
  while true do
    local id = redis.call('LMOVE', plist, KEYS[2], 'RIGHT', 'RIGHT')
    if not id then break end
    redis.call('HSET', prefix .. 't:' .. id, 'state', 'pending')
    local skey = prefix .. 'status:' .. id
    if redis.call('GET', skey) == 'running:' .. w then redis.call('DEL', skey) end
    out[1] = out[1] + 1
  end
  redis.call('ZREM', KEYS[1], w)
  redis.call('DEL', prefix .. 'worker:' .. w)
  out[#out + 1] = w
end
return out
