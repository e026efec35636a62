-- ack: tasks succeeded. For each: prove ownership, record the result, arm the
-- idempotency guard with 'success', count it. Many tasks per call, so a busy
-- worker settles a batch in one round trip.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- ARGV[1] -> P:                the queue's key prefix (task hashes P:t:<id>, guards P:status:<id>,
--                              idempotency keys, counters)
-- ARGV[2] -> result TTL in ms (how long a finished task hash is kept)
-- ARGV[3] -> success TTL in ms (how long the guard and the idempotency key say 'done')
-- ARGV[4..] -> pairs: id, result JSON
--
-- Returns: the ids whose lease was lost (not in this worker's processing list: they
--   were reaped and redelivered). For those the result and the 'success' guard are
--   still written, so the redelivered copy is acked without running again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, result_ttl, success_ttl = ARGV[1], ARGV[2], ARGV[3]
local lost = {}
local acked = 0
for i = 4, #ARGV, 2 do
  local id, result = ARGV[i], ARGV[i + 1]
  local tkey = prefix .. 't:' .. id
  redis.call('SET', prefix .. 'status:' .. id, 'success', 'PX', success_ttl)
  if redis.call('LREM', KEYS[1], 1, id) == 0 then
    redis.call('HSET', tkey, 'result', result)
    lost[#lost + 1] = id
  else
    redis.call('HSET', tkey, 'state', 'finished', 'result', result, 'finished_at', now)
    redis.call('PEXPIRE', tkey, result_ttl)
    local idem = redis.call('HGET', tkey, 'idem')
    if idem and idem ~= '' then
      redis.call('PEXPIRE', prefix .. 'idem:' .. idem, success_ttl)
    end
    acked = acked + 1
  end
end
if acked > 0 then
  redis.call('INCRBY', prefix .. 'processed', acked)
  local mkey = prefix .. 'processed:' .. math.floor(now / 60000)
  if redis.call('INCRBY', mkey, acked) == acked then redis.call('PEXPIRE', mkey, 7200000) end
end
return lost
