-- wf_index: a new workflow joins the list the admin shows (newest first); the oldest beyond the cap leave it.
-- The list is an index only: a workflow's own keys (W:*) live and expire as before, whether listed or not.
--
-- KEYS[1] -> <KEY_PREFIX>:{workflows}:index (ZSET: workflow id -> created, Redis µs: a finer
--            unit than elsewhere, so workflows created in one millisecond keep their order)
--
-- ARGV[1] -> the workflow's id
-- ARGV[2] -> how many entries to keep (the newest)
--
-- Returns: the index's size after the add and the trim
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
if n > cap then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1)
  n = cap
end
return n
