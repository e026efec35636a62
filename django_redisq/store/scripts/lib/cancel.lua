-- lib/cancel.lua: cancelled tasks (`--! include cancel.lua`; brings dead.lua along).
--
-- A running task cannot be taken from its worker, so cancel.lua records a request
-- in P:cancels (HASH: task id -> '<Redis ms>|<who>'); the worker polls it, stops
-- the task and buries it (bury.lua, reason 'cancelled'). Whichever script settles
-- the task deletes its request: ack, bury, retry (which buries a requested task
-- instead of retrying it), reap and release (which bury it instead of handing it
-- back). So the hash holds at most one entry per task in a processing list.
--! include dead.lua
local CANCELLED_EXC = 'django_redisq.exceptions.TaskCancelled'
local CANCELLED = 'cancelled'

-- cancel_who(entry): who asked, from a P:cancels value '<ms>|<who>' (the whole value if it has no '|')
local function cancel_who(entry)
  return string.match(entry, '^%d*|(.*)$') or entry
end

-- bury_cancelled(prefix, dead, id, now, who): dead-letter task id with reason 'cancelled' and a
-- TaskCancelled error naming who asked (appended to its errors; failures unchanged). Its key
-- P:t:<id> must be a hash (the caller checked); the caller has taken the id out of its list,
-- and deletes its request and releases its guard. Like bury.lua, the dead letter keeps its
-- idempotency key (freed when the dead letter is trimmed or purged); replay runs it after all.
local function bury_cancelled(prefix, dead, id, now, who)
  local tkey = prefix .. 't:' .. id
  local msg = 'cancelled by ' .. who
  local raw = cjson.encode({exc = CANCELLED_EXC, msg = msg, tb = CANCELLED_EXC .. ': ' .. msg, at = now})
  local f = redis.call('HMGET', tkey, 'errors', 'errors_len', 'errors_dropped')
  local errs, lens, dropped = errors_append(f[1], f[2], f[3], raw, now)
  redis.call('HSET', tkey, 'state', 'dead', 'errors', errs, 'errors_len', lens, 'died_at', now, 'reason', CANCELLED,
    'error', msg, 'exc', CANCELLED_EXC)
  if dropped > 0 then redis.call('HSET', tkey, 'errors_dropped', dropped) end
  redis.call('PERSIST', tkey)
  redis.call('ZADD', dead, now, id)
  count(prefix, 'dead_count', 1, now)
end
