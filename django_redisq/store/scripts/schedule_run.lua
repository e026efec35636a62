-- schedule_run: run a periodic schedule's task once now, outside its ticks (the
-- operator's "run now"). The task gets its own id (not a tick's), and the marker
-- records it as manual_id / manual_at; its last claimed tick is untouched, so
-- the next tick runs as planned (unless allow_overlap=False and this run is
-- still unfinished then: fire.lua skips it). A paused schedule may be run too.
--
-- KEYS[1] -> P:pending          (LIST)
-- KEYS[2] -> P:scheduled        (ZSET, untouched: the task is pending at once)
-- KEYS[3] -> P:sched:<name>     (HASH) the schedule's marker (see fire.lua)
-- KEYS[4] -> P:prioritized      (ZSET) and KEYS[5] -> P:prioseq (STRING) (lib/ready.lua)
-- ARGV[1] -> P:                 the queue's key prefix; the task key is ARGV[1] .. 't:' .. ARGV[2]
-- ARGV[2] -> id                 the new task's id
-- ARGV[3] -> message JSON
-- ARGV[4] -> task path
-- ARGV[5] -> marker ttl (ms)    renewed unless the schedule is paused (a paused marker does not expire)
-- ARGV[6] -> priority           of the task (-100..100; 0 the default)
-- ARGV[7] -> limits             of the task ('' = none; see lib/store.lua)
--
-- Returns: {code, enqueued_at}
--   1 -> enqueued (pending); enqueued_at is the Redis time (ms)
--   0 -> a task with this id exists already; nothing changed
--! include store.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marker = KEYS[3]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
want(marker, 'hash')
want(KEYS[4], 'zset')
local q = {pending = KEYS[1], scheduled = KEYS[2], prioritized = KEYS[4], seq = KEYS[5]}
if store_task(ARGV[1], q, now, ARGV[2], ARGV[3], ARGV[4], 0, '', tonumber(ARGV[6]) or 0, ARGV[7] or '') ~= '' then
  return {0, tostring(now)}
end
redis.call('HSET', marker, 'manual_id', ARGV[2], 'manual_at', now)
if (redis.call('HGET', marker, 'paused') or '') == '' then
  redis.call('PEXPIRE', marker, tonumber(ARGV[5]))
end
return {1, tostring(now)}
