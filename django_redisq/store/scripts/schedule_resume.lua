-- schedule_resume: end the pause of a periodic schedule. Ticks from the pause up
-- to now are never run: the pause's window is kept in the marker (paused_from,
-- resumed_at) and fire.lua counts a tick inside it as paused, even one claimed
-- later (when no worker ran during the pause). The next tick after now runs as usual.
--
-- KEYS[1] -> P:sched:<name>     (HASH) the schedule's marker (see fire.lua)
-- ARGV[1] -> marker ttl (ms)    the marker expires again, as fire.lua's ARGV[7]
--
-- Returns: {code, paused}
--   1 -> resumed; paused is when the pause began (Redis ms)
--   0 -> it was not paused; nothing changed
--! include types.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local marker = KEYS[1]
want(marker, 'hash')
local paused = redis.call('HGET', marker, 'paused') or ''
if paused == '' then return {0, ''} end
redis.call('HSET', marker, 'paused', '', 'paused_by', '', 'paused_from', paused, 'resumed_at', now)
redis.call('PEXPIRE', marker, tonumber(ARGV[1]))
return {1, paused}
