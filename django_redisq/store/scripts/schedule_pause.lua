-- schedule_pause: pause a periodic schedule. While it is paused, fire.lua still
-- claims its ticks (so the marker keeps up with the clock) but enqueues nothing:
-- each such tick is counted in paused_ticks. Every scheduler reads the marker in
-- the claim itself, so the pause holds for every worker from this call on. The
-- marker stops expiring while paused: a pause lasts until it is resumed.
--
-- KEYS[1] -> P:sched:<name>     (HASH) the schedule's marker (see fire.lua)
-- ARGV[1] -> by                 who paused it (text shown by the admin and `redisq schedules`)
--
-- Returns: {code, paused}
--   1 -> paused now; paused is this call's Redis time (ms)
--   0 -> it was paused already, since paused (ms); nothing changed
--! include types.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marker = KEYS[1]
want(marker, 'hash')
local paused = redis.call('HGET', marker, 'paused') or ''
if paused ~= '' then return {0, paused} end
redis.call('HSET', marker, 'paused', now, 'paused_by', ARGV[1])
redis.call('PERSIST', marker)
return {1, tostring(now)}
