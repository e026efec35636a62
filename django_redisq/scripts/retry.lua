-- retry: an attempt failed and attempts are left. Prove ownership, record the
-- error, release the guard and schedule the task after the backoff delay.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:scheduled            (ZSET)
-- KEYS[3] -> P:t:<id>               (HASH)
-- KEYS[4] -> P:status:<id>          (STRING guard)
-- ARGV[1] -> P:             the queue's key prefix (counters)
-- ARGV[2] -> id
-- ARGV[3] -> delay in ms    (computed by backoff.py; the due time is Redis TIME + delay)
-- ARGV[4] -> error JSON     {"exc": dotted class path, "msg": text, "tb": traceback, "at": ms}
-- ARGV[5] -> worker id      (the guard is released only if this worker holds it)
--
-- Returns:
--    1 -> scheduled for a retry
--   -1 -> LEASE_LOST: not in this worker's processing list; nothing changed
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
if redis.call('LREM', KEYS[1], 1, ARGV[2]) == 0 then return -1 end
local errs = redis.call('HGET', KEYS[3], 'errors')
if errs and errs ~= '' then errs = string.sub(errs, 1, -2) .. ',' .. ARGV[4] .. ']' else errs = '[' .. ARGV[4] .. ']' end
redis.call('HSET', KEYS[3], 'state', 'scheduled', 'errors', errs,
  'failures', (tonumber(redis.call('HGET', KEYS[3], 'failures')) or 0) + 1)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
if redis.call('GET', KEYS[4]) == 'running:' .. ARGV[5] then redis.call('DEL', KEYS[4]) end
redis.call('INCR', prefix .. 'failed')
local mkey = prefix .. 'failed:' .. math.floor(now / 60000)
if redis.call('INCR', mkey) == 1 then redis.call('PEXPIRE', mkey, 7200000) end
return 1
