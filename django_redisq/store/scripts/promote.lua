-- promote: move scheduled tasks whose due time has come to pending. Atomic, so
-- any number of workers may run it at once without duplicating a task.
--
-- KEYS[1] -> P:scheduled  (ZSET, score = due time in Redis ms)
-- KEYS[2] -> P:pending    (LIST)
-- KEYS[3] -> P:prioritized (ZSET) and KEYS[4] -> P:prioseq (STRING): where a task of a
--            priority other than 0 goes (lib/ready.lua), at the back of its priority
-- ARGV[1] -> P:           the queue's key prefix
-- ARGV[2] -> batch        most tasks moved by one call
--
-- An id whose task hash is missing or not a hash is still moved to pending (fetch
-- reports it as NOMSG or CORRUPT and the worker dead-letters it), but no hash is
-- created for it.
--
-- Returns: {moved, ms until the next due task (-1 = none scheduled)}
--! include types.lua
--! include ready.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
want(KEYS[1], 'zset')
want(KEYS[2], 'list')
want(KEYS[3], 'zset')
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  local tkey = prefix .. 't:' .. id
  local prio = stored_prio(tkey)
  ready(KEYS[2], KEYS[3], KEYS[4], id, prio, false)
  if redis.call('TYPE', tkey)['ok'] == 'hash' then redis.call('HSET', tkey, 'state', 'pending') end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if nxt[2] then wait = math.max(0, tonumber(nxt[2]) - now) end
return {#due, wait}
