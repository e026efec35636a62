-- purge: delete dead letters for good.
--
-- KEYS[1] -> P:dead  (ZSET)
-- ARGV[1] -> P:      the queue's key prefix
-- ARGV[2..] -> ids to delete; ids not in the dead-letter queue are skipped
--
-- Returns: number of dead letters deleted
local prefix = ARGV[1]
local n = 0
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('DEL', prefix .. 't:' .. ARGV[i])
    n = n + 1
  end
end
return n
