-- ack: a task succeeded. Prove ownership, record the result, arm the
-- idempotency guard with 'success', count it.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:t:<id>               (HASH)
-- KEYS[3] -> P:status:<id>          (STRING guard)
-- ARGV[1] -> P:                the queue's key prefix (counters, idempotency key)
-- ARGV[2] -> id
-- ARGV[3] -> result JSON
-- ARGV[4] -> result TTL in ms (how long the finished task hash is kept)
-- ARGV[5] -> success TTL in ms (how long the guard and the idempotency key say 'done')
--
-- Returns:
--    1 -> acked: the task is finished
--   -1 -> LEASE_LOST: the id was not in this worker's processing list (it was
--         reaped and redelivered); the result and the 'success' guard are still
--         written, so the redelivered copy is acked without running again
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
redis.call('SET', KEYS[3], 'success', 'PX', ARGV[5])
if redis.call('LREM', KEYS[1], 1, ARGV[2]) == 0 then
  redis.call('HSET', KEYS[2], 'result', ARGV[3])
  return -1
end
redis.call('HSET', KEYS[2], 'state', 'finished', 'result', ARGV[3], 'finished_at', now)
redis.call('PEXPIRE', KEYS[2], ARGV[4])
local idem = redis.call('HGET', KEYS[2], 'idem')
if idem and idem ~= '' then
  redis.call('PEXPIRE', prefix .. 'idem:' .. idem, ARGV[5])
end
redis.call('INCR', prefix .. 'processed')
local mkey = prefix .. 'processed:' .. math.floor(now / 60000)
if redis.call('INCR', mkey) == 1 then redis.call('PEXPIRE', mkey, 7200000) end
return 1
