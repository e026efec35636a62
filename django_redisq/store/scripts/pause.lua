-- pause: pause a queue. From this call on, fetch.lua takes nothing from it, on
-- every worker (and hands back an id a BLMOVE already moved); workers read the
-- key at least every quarter second and start none of the queue's fetched
-- tasks (worker/pausing.py). Enqueues, promotions and retries go on as usual: the
-- tasks wait in pending. The key has no TTL: a pause lasts until resumed (one
-- key per queue, so it cannot grow).
--
-- KEYS[1] -> P:paused           (STRING) '<Redis ms>|<who>' while the queue is paused
-- ARGV[1] -> who                who paused it (shown by the admin and `redisq queue`)
--
-- Returns: {code, value}
--   1 -> paused now; value is this call's '<Redis ms>|<who>'
--   0 -> it was paused already; value is the key as it was; nothing changed
--! include types.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
want(KEYS[1], 'string')
local was = redis.call('GET', KEYS[1])
if was then return {0, was} end
local value = tostring(now) .. '|' .. ARGV[1]
redis.call('SET', KEYS[1], value)
return {1, value}
