-- purge: delete dead letters for good, with everything that belongs to them: the
-- task hash, a copy set aside as corrupt, and the idempotency key they hold.
--
-- KEYS[1] -> P:dead  (ZSET)
-- ARGV[1] -> P:      the queue's key prefix
-- ARGV[2..] -> ids to delete; ids not in the dead-letter queue are skipped
--
-- Returns: number of dead letters deleted
--! include dead.lua
local prefix = ARGV[1]
want(KEYS[1], 'zset')
local n = 0
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    forget(prefix, ARGV[i])
    n = n + 1
  end
end
return n
