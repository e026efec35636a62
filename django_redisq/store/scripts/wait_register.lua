-- wait_register: a durable task waits for an event on this topic (django_redisq/durable/): its
-- waiter goes into the topic's waiters, which every publish counts (topic_publish.lua) and, when
-- there are any, matches against (events/publish.py, then wait_wake.lua in the task's slot).
-- Waiters past their due time are dropped here, so the hash holds only live waits.
--
-- KEYS[1] -> T:waiters  (HASH '<queue>|<id>|<step>' -> JSON {"match": {...}, "due": Redis ms})
-- ARGV[1] -> the waiter's field
-- ARGV[2] -> its JSON
-- ARGV[3] -> at most this many expired waiters are dropped per call
--
-- Returns: how many waiters the topic has now
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DEL', KEYS[1]) end
local scan = redis.call('HSCAN', KEYS[1], 0, 'COUNT', tonumber(ARGV[3]))[2]
for i = 1, #scan, 2 do
  local ok, w = pcall(cjson.decode, scan[i + 1])
  if not ok or type(w) ~= 'table' or (tonumber(w.due) or 0) < now then redis.call('HDEL', KEYS[1], scan[i]) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HLEN', KEYS[1])
