-- suspend: a durable task ended its attempt in a sleep or a wait (django_redisq/durable/): not a
-- failure, no retry used. Prove ownership, release the guard and any fleet-wide slot, and
-- schedule the task at the due time its step recorded (step_record.lua, on the Redis clock);
-- a wait already woken (wait_wake.lua ran between the step and this settle) or a due time
-- passed makes it ready at once. The delivery is given back, so a task that sleeps a thousand
-- times never ends as too_many_deliveries. A task with a cancel request is dead-lettered
-- ('cancelled') instead, as retry.lua does.
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:scheduled            (ZSET)
-- KEYS[3] -> P:t:<id>               (HASH)
-- KEYS[4] -> P:status:<id>          (STRING guard)
-- KEYS[5] -> P:dead                 (ZSET), for a task whose hash turned out corrupt, or cancelled
-- KEYS[6] -> P:cancels              (HASH, task id -> '<Redis ms>|<who>')
-- KEYS[7] -> P:pending, KEYS[8] -> P:prioritized, KEYS[9] -> P:prioseq, KEYS[10] -> P:slots,
-- KEYS[11] -> P:blocked  (lib/limits.lua, lib/ready.lua)
-- ARGV[1] -> P:             the queue's key prefix
-- ARGV[2] -> id
-- ARGV[3] -> worker id      (the guard is released only if this worker holds it)
-- ARGV[4] -> 'step:<name>'  the sleep's or wait's record, whose due time and state decide
-- ARGV[5] -> ms a corrupt task key set aside is kept (the dead-letter retention)
--
-- Returns:
--    1 -> scheduled at the step's due time
--    2 -> ready at once (woken, or due)
--    3 -> a cancel was requested: dead-lettered ('cancelled')
--    4 -> the task key was not a hash: set aside, and the id dead-lettered ('corrupt')
--   -1 -> LEASE_LOST: not in this worker's processing list; nothing changed
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
if guard == 'string' and redis.call('GET', KEYS[4]) == 'running:' .. ARGV[3] then redis.call('DEL', KEYS[4]) end
if kind ~= 'hash' then
  bury_corrupt(prefix, KEYS[5], id, now, ARGV[5])
  return 4
end
local f = redis.call('HMGET', KEYS[3], 'slot', 'task', 'deliveries', ARGV[4], 'workers')
if f[1] then
  free_slots(prefix, {pending = KEYS[7], prioritized = KEYS[8], seq = KEYS[9], slots = KEYS[10], blocked = KEYS[11]}, id, f[2], f[1])
end
redis.call('HSET', KEYS[3], 'deliveries', math.max(0, (tonumber(f[3]) or 1) - 1))
-- fetch.lua appended this worker to 'workers'; a worker named there already is not named again, so the
-- field stays as long as the list of distinct workers however often the task sleeps
local workers, me = f[5] or '', ',' .. ARGV[3]
local head = string.sub(workers, 1, #workers - #me)
if #workers > #me and string.sub(workers, -#me) == me and string.find(',' .. head .. ',', me .. ',', 1, true) then
  redis.call('HSET', KEYS[3], 'workers', head)
end
if request then
  bury_cancelled(prefix, KEYS[5], id, now, cancel_who(request))
  return 3
end
local due, woken = now, false
if f[4] then
  local ok, rec = pcall(cjson.decode, f[4])
  if ok and type(rec) == 'table' then due, woken = tonumber(rec.due) or now, rec.k == 'wait' and rec.st ~= 'waiting' end
end
if woken or due <= now then
  ready(KEYS[7], KEYS[8], KEYS[9], id, stored_prio(KEYS[3]), false)
  redis.call('HSET', KEYS[3], 'state', 'pending')
  return 2
end
redis.call('ZADD', KEYS[2], due, id)
redis.call('HSET', KEYS[3], 'state', 'scheduled')
return 1
