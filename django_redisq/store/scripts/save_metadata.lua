-- save_metadata: store a task's metadata (Django's TaskContext.save_metadata,
-- BaseTaskBackend.save_metadata, and a worker's save at the end of an attempt) in
-- its task hash, replacing what was there. A task that is gone gets nothing: a
-- lone field would be a key without the task's TTL (nothing grows without bound).
-- A worker's save proves it still holds the task first (its guard names it), so a
-- worker that was reaped cannot overwrite the metadata of the copy running elsewhere.
--
-- KEYS[1] -> P:t:<id>       (HASH) the task
-- KEYS[2] -> P:status:<id>  (STRING) its guard, read only when ARGV[2] is given
-- ARGV[1] -> metadata       JSON object
-- ARGV[2] -> 'running:<worker>' the guard the saver must hold, or '' (any caller)
--
-- Returns: 1 saved; 0 nothing written: no such task (or its key is not a hash), or
--   ARGV[2] given and the guard says otherwise (the lease was lost)
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' then return 0 end
if ARGV[2] ~= '' then
  if redis.call('TYPE', KEYS[2])['ok'] ~= 'string' or redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
end
redis.call('HSET', KEYS[1], 'metadata', ARGV[1])
return 1
