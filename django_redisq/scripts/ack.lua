-- ack: tasks succeeded. For each: prove ownership, record the result, arm the
-- idempotency guard with 'success', start the idempotency key's countdown,
-- count it. Many tasks per call, so a busy worker settles a batch in one round trip.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:dead                 (ZSET), for a task whose hash turned out corrupt
-- KEYS[3] -> P:cancels              (HASH, task id -> cancel request): the batch's requests are
--                                   deleted, lost leases included (their 'success' guard means no
--                                   copy runs again); one TYPE per call, one HDEL only if it exists
-- ARGV[1] -> P:                the queue's key prefix (task hashes P:t:<id>, guards P:status:<id>,
--                              idempotency keys, counters)
-- ARGV[2] -> result TTL in ms (how long a finished task hash is kept)
-- ARGV[3] -> success TTL in ms (how long the guard and the idempotency key say 'done')
-- ARGV[4] -> ms a corrupt task key set aside is kept (the dead-letter retention)
-- ARGV[5..] -> pairs: id, result JSON
--
-- Returns: the ids whose lease was lost (not in this worker's processing list: they
--   were reaped and redelivered). For those the 'success' guard is still written, so
--   the redelivered copy is acked without running again, and so is the result if
--   the task hash still exists (a purged task is not brought back as a bare result).
-- A held task whose key is not a hash is set aside and dead-lettered ('corrupt'), result kept.
--! include dead.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, result_ttl, success_ttl, corrupt_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
local cancels = want(KEYS[3], 'hash')
local lost = {}
local acked = 0

for i = 5, #ARGV, 2 do
  local id, result = ARGV[i], ARGV[i + 1]
  local tkey = prefix .. 't:' .. id
  local kind = redis.call('TYPE', tkey)['ok']
  redis.call('SET', prefix .. 'status:' .. id, 'success', 'PX', success_ttl)  -- SET replaces a key of any type
  local owned = redis.call('LREM', KEYS[1], 1, id) == 1
  if not owned then
    -- whoever holds it now settles it: only note the result where the task still is
    if kind == 'hash' then
      redis.call('HSET', tkey, 'result', result)
      idem_expire(prefix, redis.call('HGET', tkey, 'idem'), id, success_ttl)
    end
    lost[#lost + 1] = id
  elseif kind ~= 'hash' and kind ~= 'none' then
    redis.call('HSET', bury_corrupt(prefix, KEYS[2], id, now, corrupt_ttl), 'result', result)
  else
    redis.call('HSET', tkey, 'state', 'finished', 'result', result, 'finished_at', now)
    redis.call('PEXPIRE', tkey, result_ttl)
    if kind == 'hash' then idem_expire(prefix, redis.call('HGET', tkey, 'idem'), id, success_ttl) end
    acked = acked + 1
  end
end
count(prefix, 'processed', acked, now)
if cancels == 'hash' then
  local ids = {}
  for i = 5, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
  for lo = 1, #ids, 1000 do redis.call('HDEL', KEYS[3], unpack(ids, lo, math.min(lo + 999, #ids))) end
end
return lost
