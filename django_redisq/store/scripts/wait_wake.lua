-- wait_wake: an event matched a durable task's wait (events/publish.py after the publish): record
-- the event as the wait's result and make the task ready at once if it is scheduled. A task not
-- yet suspended (its worker between the wait and the settle) keeps the record, and suspend.lua
-- makes it ready. A wait past its due time, already woken, or of a task gone takes nothing: the
-- first matching event wins, and a late one cannot undo a timeout.
--
-- KEYS[1] -> P:t:<id>        (HASH) the task
-- KEYS[2] -> P:scheduled     (ZSET)
-- KEYS[3] -> P:pending, KEYS[4] -> P:prioritized, KEYS[5] -> P:prioseq  (lib/ready.lua)
-- ARGV[1] -> id
-- ARGV[2] -> 'step:<name>'   the wait's record (step_record.lua)
-- ARGV[3] -> the event's payload JSON: the step's result
-- ARGV[4] -> the event's entry id
--
-- Returns: 1 woken (made ready); 2 recorded (its settle will make it ready); 0 nothing (gone,
--   not waiting, past its due time)
--! include ready.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
local raw = redis.call('HGET', KEYS[1], ARGV[2])
if not raw then return 0 end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= 'table' or rec.st ~= 'waiting' or (tonumber(rec.due) or 0) <= now then return 0 end
rec.st, rec.v, rec.ev, rec.took = 'done', ARGV[3], ARGV[4], now - (tonumber(rec.at) or now)
redis.call('HSET', KEYS[1], ARGV[2], cjson.encode(rec))
want(KEYS[2], 'zset')
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  ready(KEYS[3], KEYS[4], KEYS[5], ARGV[1], stored_prio(KEYS[1]), false)
  redis.call('HSET', KEYS[1], 'state', 'pending')
  return 1
end
return 2
