-- replay: move dead letters back to pending. The failure and delivery counts
-- restart at zero (a full set of retries); the history of errors and workers is kept.
--
-- KEYS[1] -> P:dead     (ZSET)
-- KEYS[2] -> P:pending  (LIST)
-- ARGV[1] -> P:         the queue's key prefix
-- ARGV[2..] -> ids to replay; ids not in the dead-letter queue are skipped
--
-- Returns: number of tasks replayed
local prefix = ARGV[1]
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    local tkey = prefix .. 't:' .. id
    if redis.call('HEXISTS', tkey, 'msg') == 1 then
      redis.call('HSET', tkey, 'state', 'pending', 'failures', 0, 'deliveries', 0)
      redis.call('HINCRBY', tkey, 'replayed', 1)
      redis.call('HDEL', tkey, 'died_at', 'reason', 'finished_at')
      redis.call('LPUSH', KEYS[2], id)
      n = n + 1
    else
      -- nothing to run: a bad id buried for its own sake; keep it visible
      redis.call('ZADD', KEYS[1], redis.call('HGET', tkey, 'died_at') or 0, id)
    end
  end
end
return n
