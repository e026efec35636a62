-- progress: store how far a running task got (django_redisq.report_progress), in
-- its task hash, replacing the last report, with the Redis time it was stored. Only
-- the worker holding the task writes (its guard names it), so a worker that was
-- reaped cannot overwrite the reports of the copy running elsewhere, and a task that
-- is gone gets nothing (a lone field would be a key without the task's TTL).
--
-- KEYS[1] -> P:t:<id>       (HASH) the task
-- KEYS[2] -> P:status:<id>  (STRING) its guard
-- ARGV[1] -> report         JSON object {done, total, message, attempt} (at most a few hundred bytes)
-- ARGV[2] -> 'running:<worker>' the guard the reporting worker must hold
--
-- Returns: 1 stored; 0 nothing written: no such task, or the guard says otherwise
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
if redis.call('TYPE', KEYS[2])['ok'] ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'progress', ARGV[1], 'progress_at', t[1] * 1000 + math.floor(t[2] / 1000))
return 1
