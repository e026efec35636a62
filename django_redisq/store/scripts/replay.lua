-- replay: move dead letters back to pending. The failure and delivery counts
-- restart at zero (a full set of retries); the history of errors and workers is
-- kept, and so is the idempotency key (re-taken if it was freed meanwhile).
--
-- KEYS[1] -> P:dead     (ZSET)
-- KEYS[2] -> P:pending  (LIST)
-- KEYS[3] -> P:prioritized (ZSET) and KEYS[4] -> P:prioseq (STRING): a task keeps its priority
--            (lib/ready.lua)
-- ARGV[1] -> P:         the queue's key prefix (task hashes, idempotency keys)
-- ARGV[2..] -> ids to replay; ids not in the dead-letter queue are skipped, and so are
--   dead letters that cannot run (no message, task data not a hash) or that are being
--   moved to another queue (state 'moving', see move_out.lua): those stay dead
--
-- Returns: number of tasks replayed
--! include idem.lua
--! include ready.lua
local prefix = ARGV[1]
want(KEYS[1], 'zset')
want(KEYS[2], 'list')
want(KEYS[3], 'zset')
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local tkey = prefix .. 't:' .. id
  if redis.call('ZSCORE', KEYS[1], id) and redis.call('TYPE', tkey)['ok'] == 'hash' then
    local f = redis.call('HMGET', tkey, 'msg', 'state', 'idem', 'replayed')
    if f[1] and f[2] ~= 'moving' then
      redis.call('ZREM', KEYS[1], id)
      redis.call('HSET', tkey, 'state', 'pending', 'failures', 0, 'deliveries', 0, 'replayed', (tonumber(f[4]) or 0) + 1)
      redis.call('HDEL', tkey, 'died_at', 'reason', 'finished_at')
      ready(KEYS[2], KEYS[3], KEYS[4], id, stored_prio(tkey), false)
      idem_take(prefix, f[3], id)  -- pending again: it holds its key with no TTL
      n = n + 1
    end
  end
end
return n
