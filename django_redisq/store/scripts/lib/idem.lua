-- lib/idem.lua: user idempotency keys P:idem:<key> -> id of the task holding it
-- (`--! include idem.lua`; brings types.lua along). The semantics, kept by every script:
--   * enqueue takes a free key (SET, no TTL); while the task is pending, scheduled,
--     running or dead it holds the key with no TTL;
--   * its success (ack.lua, also a late ack from a worker whose lease was lost)
--     starts the countdown: the key lives IDEMPOTENCY_TTL more, whatever RESULT_TTL is;
--   * a replay (replay.lua, move_in.lua) re-takes it with no TTL if it is free;
--   * purging or trimming the dead letter frees it (purge.lua, bury.lua).
-- A key is held while it has a TTL or its holder's task hash exists; else it is stale.
--! include types.lua

-- idem_holder(prefix, ikey): the id holding the key, or false if it is free
local function idem_holder(prefix, ikey)
  if want(ikey, 'string') ~= 'string' then return false end
  local holder = redis.call('GET', ikey)
  if redis.call('EXISTS', prefix .. 't:' .. holder) == 0 and redis.call('PTTL', ikey) < 0 then return false end
  return holder
end

-- idem_take(prefix, idem, id): task id (pending again) holds key idem with no TTL, unless another task holds it
local function idem_take(prefix, idem, id)
  if not idem or idem == '' then return end
  local ikey = prefix .. 'idem:' .. idem
  local holder = idem_holder(prefix, ikey)
  if not holder then redis.call('SET', ikey, id) elseif holder == id then redis.call('PERSIST', ikey) end
end

-- idem_expire(prefix, idem, id, ttl): task id succeeded: its key lives ttl ms more
local function idem_expire(prefix, idem, id, ttl)
  if not idem or idem == '' then return end
  local ikey = prefix .. 'idem:' .. idem
  if want(ikey, 'string') == 'string' and redis.call('GET', ikey) == id then redis.call('PEXPIRE', ikey, ttl) end
end

-- idem_free(prefix, idem, id): task id is gone for good: delete its key if it holds it
local function idem_free(prefix, idem, id)
  if not idem or idem == '' then return end
  local ikey = prefix .. 'idem:' .. idem
  if want(ikey, 'string') == 'string' and redis.call('GET', ikey) == id then redis.call('DEL', ikey) end
end
