-- retry: an attempt failed and attempts are left. Prove ownership, record the
-- error, release the guard and schedule the task after the backoff delay. A task
-- with a cancel request (lib/cancel.lua) is never retried: it is dead-lettered
-- with reason 'cancelled' instead (the attempt's error, then TaskCancelled).
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:scheduled            (ZSET)
-- KEYS[3] -> P:t:<id>               (HASH)
-- KEYS[4] -> P:status:<id>          (STRING guard)
-- KEYS[5] -> P:dead                 (ZSET), for a task whose hash turned out corrupt, or cancelled
-- KEYS[6] -> P:cancels              (HASH, task id -> '<Redis ms>|<who>'): the id's request is deleted
-- KEYS[7] -> P:pending, KEYS[8] -> P:prioritized, KEYS[9] -> P:prioseq, KEYS[10] -> P:slots,
-- KEYS[11] -> P:blocked  (lib/limits.lua): a slot the task held is freed and one task waiting for it made ready
-- ARGV[1] -> P:             the queue's key prefix (counters: P:failed, every failed attempt that reached
--                           this script; P:retried, those scheduled for another attempt)
-- ARGV[2] -> id
-- ARGV[3] -> delay in ms    (computed by core/backoff.py; the due time is Redis TIME + delay)
-- ARGV[4] -> error JSON     {"exc": dotted class path, "msg": text, "tb": traceback, "at": ms};
--                           "at" is replaced by Redis time (lib/errors.lua keeps the history)
-- ARGV[5] -> worker id      (the guard is released only if this worker holds it)
-- ARGV[6] -> ms a corrupt task key set aside is kept (the dead-letter retention)
--
-- Keys of the wrong type are set aside (lib/types.lua) before anything is written.
--
-- Returns:
--    1 -> scheduled for a retry
--    2 -> the task key was not a hash: set aside, and the id dead-lettered ('corrupt')
--    3 -> a cancel was requested: dead-lettered ('cancelled') instead of retried
--   -1 -> LEASE_LOST: not in this worker's processing list; nothing changed (but keys of the
--         wrong type set aside)
--! include cancel.lua
--! include limits.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, id = ARGV[1], ARGV[2]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
want(KEYS[5], 'zset')
local kind = redis.call('TYPE', KEYS[3])['ok']
local guard = want(KEYS[4], 'string')
local request = want(KEYS[6], 'hash') == 'hash' and redis.call('HGET', KEYS[6], id)
if redis.call('LREM', KEYS[1], 1, id) == 0 then return -1 end
if request then redis.call('HDEL', KEYS[6], id) end
if guard == 'string' and redis.call('GET', KEYS[4]) == 'running:' .. ARGV[5] then redis.call('DEL', KEYS[4]) end
count(prefix, 'failed', 1, now)
if kind ~= 'hash' and kind ~= 'none' then
  bury_corrupt(prefix, KEYS[5], id, now, ARGV[6])
  return 2
end
local f = redis.call('HMGET', KEYS[3], 'errors', 'errors_len', 'errors_dropped', 'failures', 'slot', 'task')
if f[5] then
  free_slots(prefix, {pending = KEYS[7], prioritized = KEYS[8], seq = KEYS[9], slots = KEYS[10], blocked = KEYS[11]}, id, f[6], f[5])
end
local errs, lens, dropped = errors_append(f[1], f[2], f[3], ARGV[4], now)
redis.call('HSET', KEYS[3], 'state', 'scheduled', 'errors', errs, 'errors_len', lens, 'failures', (tonumber(f[4]) or 0) + 1)
if dropped > 0 then redis.call('HSET', KEYS[3], 'errors_dropped', dropped) end
if request then
  bury_cancelled(prefix, KEYS[5], id, now, cancel_who(request))
  return 3
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
incr(prefix .. 'retried', 1)
return 1
