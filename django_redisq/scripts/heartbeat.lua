-- heartbeat: a worker says it is alive for one queue, publishes what it is,
-- and renews the guards of the tasks it holds so they outlive long tasks.
--
-- KEYS[1] -> P:workers              (ZSET, worker id -> Redis ms)
-- KEYS[2] -> P:processing:<worker>  (LIST)
-- ARGV[1] -> P:           the queue's key prefix
-- ARGV[2] -> worker id
-- ARGV[3] -> lease in ms  (guard lifetime, also the lifetime of the info key)
-- ARGV[4] -> info JSON    (host, pid, queues, concurrency, started_at)
--
-- Returns: Redis time in ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, w = ARGV[1], ARGV[2]
redis.call('ZADD', KEYS[1], now, w)
redis.call('SET', prefix .. 'worker:' .. w, ARGV[4], 'PX', ARGV[3])
local mine = 'running:' .. w
for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local skey = prefix .. 'status:' .. id
  if redis.call('GET', skey) == mine then redis.call('PEXPIRE', skey, ARGV[3]) end
end
return now
