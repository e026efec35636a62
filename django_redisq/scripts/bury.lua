-- bury: move a task to the dead-letter queue with the reason, after its last
-- attempt failed or because it could not be run at all (bad message, unknown
-- task, corrupt data). Prove ownership first. Trims the dead-letter queue by
-- age and size. Nothing here can fail after the LREM: a task is never dropped.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:dead                 (ZSET, score = died at, Redis ms)
-- KEYS[3] -> P:t:<id>               (HASH; a key of another type is renamed to P:t:<id>:corrupt)
-- KEYS[4] -> P:status:<id>          (STRING guard)
-- ARGV[1] -> P:              the queue's key prefix (counters, idempotency key, trimmed hashes)
-- ARGV[2] -> id
-- ARGV[3] -> error JSON      {"exc", "msg", "tb", "at"}, appended to the task's errors
-- ARGV[4] -> reason          why it is dead: 'failed', 'bad_message', 'unknown_task', ...
-- ARGV[5] -> retention in ms (dead letters older than this are deleted; 0 = keep)
-- ARGV[6] -> max dead letters kept (the oldest beyond it are deleted; 0 = no limit)
-- ARGV[7] -> worker id       (the guard is released only if this worker holds it)
-- ARGV[8] -> 1 if this counts as a failed attempt (the task ran and raised), else 0
-- ARGV[9] -> the error message (the error JSON's "msg")
-- ARGV[10] -> the exception's dotted class path (the error JSON's "exc")
--
-- Returns:
--    n >= 0 -> buried; n older dead letters were trimmed
--   -1      -> LEASE_LOST: not in this worker's processing list; nothing changed
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, id = ARGV[1], ARGV[2]
local ktype = redis.call('TYPE', KEYS[3])['ok']
if ktype ~= 'hash' and ktype ~= 'none' then
  redis.call('RENAME', KEYS[3], KEYS[3] .. ':corrupt')  -- kept for inspection, same slot
end
if redis.call('LREM', KEYS[1], 1, id) == 0 then return -1 end
local f = redis.call('HMGET', KEYS[3], 'errors', 'failures')
local errs = f[1]
if errs and string.sub(errs, 1, 1) == '[' and string.sub(errs, -1) == ']' and errs ~= '[]' then
  errs = string.sub(errs, 1, -2) .. ',' .. ARGV[3] .. ']'
else
  errs = '[' .. ARGV[3] .. ']'
end
local failures = tonumber(f[2]) or 0
if ARGV[8] == '1' then failures = failures + 1 end
redis.call('HSET', KEYS[3], 'state', 'dead', 'errors', errs, 'died_at', now, 'reason', ARGV[4],
  'error', ARGV[9], 'exc', ARGV[10], 'failures', failures)
redis.call('PERSIST', KEYS[3])
redis.call('ZADD', KEYS[2], now, id)
if redis.call('GET', KEYS[4]) == 'running:' .. ARGV[7] then redis.call('DEL', KEYS[4]) end
local idem = redis.call('HGET', KEYS[3], 'idem')
if idem and idem ~= '' and redis.call('GET', prefix .. 'idem:' .. idem) == id then
  redis.call('DEL', prefix .. 'idem:' .. idem)
end
redis.call('INCR', prefix .. 'dead_count')
local mkey = prefix .. 'dead_count:' .. math.floor(now / 60000)
if redis.call('INCR', mkey) == 1 then redis.call('PEXPIRE', mkey, 7200000) end
-- retention: bounded batches, so the cost per bury stays O(log n)
local trimmed = 0
local retention, maxn = tonumber(ARGV[5]), tonumber(ARGV[6])
if retention > 0 then
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - retention, 'LIMIT', 0, 100)
  for _, old_id in ipairs(old) do
    redis.call('ZREM', KEYS[2], old_id)
    redis.call('DEL', prefix .. 't:' .. old_id)
    trimmed = trimmed + 1
  end
end
if maxn > 0 then
  local excess = redis.call('ZCARD', KEYS[2]) - maxn
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', KEYS[2], math.min(excess, 100))
    for i = 1, #popped, 2 do
      redis.call('DEL', prefix .. 't:' .. popped[i])
      trimmed = trimmed + 1
    end
  end
end
return trimmed
