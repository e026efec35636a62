-- lib/dead.lua: dead-letter helpers shared by ack, retry, bury, cancel and purge
-- (`--! include dead.lua`; brings types.lua, idem.lua and errors.lua along).
--! include idem.lua
--! include errors.lua

-- forget(prefix, id): delete a dead letter's data for good: the task hash, a copy set
-- aside as corrupt, and the idempotency key it holds
local function forget(prefix, id)
  local tkey = prefix .. 't:' .. id
  if redis.call('TYPE', tkey)['ok'] == 'hash' then idem_free(prefix, redis.call('HGET', tkey, 'idem'), id) end
  redis.call('DEL', tkey, tkey .. ':corrupt')
end

-- bury_corrupt(prefix, dead, id, now, ttl): the task key P:t:<id> is not a hash. Set it
-- aside (kept ttl ms) and dead-letter the id with reason 'corrupt' in its place, so the
-- task stays visible to operators instead of vanishing. Returns the new hash's key.
local function bury_corrupt(prefix, dead, id, now, ttl)
  local tkey = prefix .. 't:' .. id
  local kind = redis.call('TYPE', tkey)['ok']
  local aside = set_aside(tkey, ttl)
  local msg = 'the task data was a Redis ' .. kind .. ', not a hash; set aside as ' .. aside
  local errs, lens = errors_append(nil, nil, 0, error_object(msg, msg), now)
  redis.call('HSET', tkey, 'state', 'dead', 'reason', 'corrupt', 'died_at', now, 'error', msg, 'exc', '',
    'errors', errs, 'errors_len', lens, 'failures', 0, 'deliveries', 0)
  redis.call('ZADD', dead, now, id)
  count(prefix, 'dead_count', 1, now)
  return tkey
end

-- trim_dead(prefix, dead, now, retention, maxn): delete dead letters older than retention ms
-- and the oldest beyond maxn (0 = no limit for either), with their data. At most 100 of each
-- per call, so the cost stays O(log n) however big the dead set grew. Returns how many went.
local function trim_dead(prefix, dead, now, retention, maxn)
  local trimmed = 0
  retention, maxn = tonumber(retention) or 0, tonumber(maxn) or 0
  if retention > 0 then
    local old = redis.call('ZRANGEBYSCORE', dead, '-inf', now - retention, 'LIMIT', 0, 100)
    for _, old_id in ipairs(old) do
      redis.call('ZREM', dead, old_id)
      forget(prefix, old_id)
      trimmed = trimmed + 1
    end
  end
  if maxn > 0 then
    local excess = redis.call('ZCARD', dead) - maxn
    if excess > 0 then
      local popped = redis.call('ZPOPMIN', dead, math.min(excess, 100))
      for i = 1, #popped, 2 do
        forget(prefix, popped[i])
        trimmed = trimmed + 1
      end
    end
  end
  return trimmed
end
