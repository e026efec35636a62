-- enqueue: store tasks and make them pending (or scheduled when delayed).
--
-- KEYS[1] -> P:pending    (LIST)
-- KEYS[2] -> P:scheduled  (ZSET, score = due time in Redis ms)
-- KEYS[3] -> P:prioritized (ZSET) and KEYS[4] -> P:prioseq (STRING): tasks of a priority
--            other than 0 (lib/ready.lua)
-- ARGV[1] -> P:           the queue's key prefix; task keys are ARGV[1] .. 't:' .. id,
--                         idempotency keys ARGV[1] .. 'idem:' .. key
-- ARGV[2] -> n            number of tasks that follow, 7 ARGV each:
--   id, message JSON, task path, delay in ms (0 = run now), idempotency key ('' = none),
--   priority (-100..100, higher runs first; 0 the default), the task's own fleet-wide limits
--   ('' = none, else '<max_running>|<count>|<period ms>', see lib/limits.lua)
--
-- An idempotency key P:idem:<key> names the task holding it. It is held while it
-- exists with a TTL (the holder succeeded: ack.lua started the countdown, even if
-- the holder's result has expired since), or while the holder's task hash exists
-- (pending, scheduled, running or dead). A key with neither is stale and is taken.
-- Keys of the wrong type are set aside (lib/types.lua) and treated as missing; the pending LIST and
-- the scheduled ZSET are checked by their write's reply, not a TYPE first (lib/ready.lua, lib/store.lua).
--
-- Returns: {now, code_1, ..., code_n}: the Redis time in ms stored as every task's
-- enqueued_at, then one string per task:
--   ''        -> stored and queued
--   <id>      -> not stored: the idempotency key is held by task <id>
--   '!'       -> not stored: a task with this id already exists (our own earlier try)
--! include store.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local q = {pending = KEYS[1], scheduled = KEYS[2], prioritized = KEYS[3], seq = KEYS[4]}
local out = {now}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 7
  out[#out + 1] = store_task(prefix, q, now, ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), ARGV[b + 4],
    tonumber(ARGV[b + 5]), ARGV[b + 6])
end
return out
