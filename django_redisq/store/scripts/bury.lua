-- bury: move a task to the dead-letter queue with the reason, after its last
-- attempt failed or because it could not be run at all (bad message, unknown
-- task, corrupt data). Prove ownership first. Trims the dead-letter queue by
-- age and size. Every key is type-checked (lib/types.lua) before the LREM, so
-- nothing after it can fail: a task is never dropped. A dead letter keeps its
-- idempotency key; trimming frees it along with the task. A cancel request for
-- the task is deleted: this is how a worker settles a task it stopped because it
-- was cancelled (reason 'cancelled', error TaskCancelled; see lib/cancel.lua).
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:dead                 (ZSET, score = died at, Redis ms)
-- KEYS[3] -> P:t:<id>               (HASH; a key of another type is set aside to P:t:<id>:corrupt,
--                                   kept for the retention, deleted with the dead letter)
-- KEYS[4] -> P:status:<id>          (STRING guard)
-- KEYS[5] -> P:cancels              (HASH, task id -> cancel request): the id's request is deleted
-- KEYS[6] -> P:pending, KEYS[7] -> P:prioritized, KEYS[8] -> P:prioseq, KEYS[9] -> P:slots,
-- KEYS[10] -> P:blocked  (lib/limits.lua): a slot the task held is freed and one task waiting for it made ready
-- ARGV[1] -> P:              the queue's key prefix (counters: P:dead_count, and P:failed_final when
--                            ARGV[8] is 1; idempotency key, trimmed hashes)
-- ARGV[2] -> id
-- ARGV[3] -> error JSON      {"exc", "msg", "tb", "at"}, appended to the task's errors ("at" := Redis time)
-- ARGV[4] -> reason          why it is dead: 'failed', 'bad_message', 'unknown_task', 'cancelled', ...
-- ARGV[5] -> retention in ms (dead letters older than this are deleted; 0 = keep)
-- ARGV[6] -> max dead letters kept (the oldest beyond it are deleted; 0 = no limit)
-- ARGV[7] -> worker id       (the guard is released only if this worker holds it)
-- ARGV[8] -> 1 if this counts as a failed attempt (the task ran and raised), else 0
-- ARGV[9] -> the error message (the error JSON's "msg")
-- ARGV[10] -> the exception's dotted class path (the error JSON's "exc")
--
-- Returns:
--    n >= 0 -> buried; n older dead letters were trimmed
--   -1      -> LEASE_LOST: not in this worker's processing list; nothing changed (but keys of
--              the wrong type set aside)
--! include dead.lua
--! include limits.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, id = ARGV[1], ARGV[2]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
local kind = redis.call('TYPE', KEYS[3])['ok']
local guard = want(KEYS[4], 'string')
local cancels = want(KEYS[5], 'hash')
if redis.call('LREM', KEYS[1], 1, id) == 0 then return -1 end
if cancels == 'hash' then redis.call('HDEL', KEYS[5], id) end
if kind ~= 'hash' and kind ~= 'none' then set_aside(KEYS[3], ARGV[5]) end  -- kept for inspection
local f = redis.call('HMGET', KEYS[3], 'errors', 'errors_len', 'errors_dropped', 'failures', 'slot', 'task')
if f[5] then
  free_slots(prefix, {pending = KEYS[6], prioritized = KEYS[7], seq = KEYS[8], slots = KEYS[9], blocked = KEYS[10]}, id, f[6], f[5])
end
local errs, lens, dropped = errors_append(f[1], f[2], f[3], ARGV[3], now)
local failures = tonumber(f[4]) or 0
if ARGV[8] == '1' then failures = failures + 1 end
redis.call('HSET', KEYS[3], 'state', 'dead', 'errors', errs, 'errors_len', lens, 'died_at', now, 'reason', ARGV[4],
  'error', ARGV[9], 'exc', ARGV[10], 'failures', failures)
if dropped > 0 then redis.call('HSET', KEYS[3], 'errors_dropped', dropped) end
redis.call('PERSIST', KEYS[3])
redis.call('ZADD', KEYS[2], now, id)
if guard == 'string' and redis.call('GET', KEYS[4]) == 'running:' .. ARGV[7] then redis.call('DEL', KEYS[4]) end
count(prefix, 'dead_count', 1, now)
if ARGV[8] == '1' then incr(prefix .. 'failed_final', 1) end  -- a failed last attempt: failed = failed + failed_final
return trim_dead(prefix, KEYS[2], now, ARGV[5], ARGV[6])  -- bounded batches: O(log n) per bury
