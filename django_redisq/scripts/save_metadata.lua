-- save_metadata: store a task's metadata (Django's TaskContext.save_metadata,
-- BaseTaskBackend.save_metadata) in its task hash, replacing what was there.
-- A task that is gone gets nothing: a lone field would be a key without the
-- task's TTL (nothing grows without bound).
--
-- KEYS[1] -> P:t:<id>   (HASH) the task
-- ARGV[1] -> metadata   JSON object
--
-- Returns: 1 saved; 0 no such task (or its key is not a hash): nothing written
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' then return 0 end
redis.call('HSET', KEYS[1], 'metadata', ARGV[1])
return 1
