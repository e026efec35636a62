-- resume: end the pause of a queue. From this call on fetch.lua takes from it
-- again; workers see it within a quarter second (worker/pausing.py) and fetch.
--
-- KEYS[1] -> P:paused           (STRING) '<Redis ms>|<who>' while the queue is paused
-- ARGV[1] -> (none: nothing is passed)
--
-- Returns: {code, value}
--   1 -> resumed; value is the pause's '<Redis ms>|<who>'
--   0 -> it was not paused; value is ''; nothing changed
--! include types.lua
want(KEYS[1], 'string')
local was = redis.call('GET', KEYS[1])
if not was then return {0, ''} end
redis.call('DEL', KEYS[1])
return {1, was}
