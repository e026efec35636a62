-- lib/handback.lua: a task that leaves a worker unsettled goes back to be run again
-- (`--! include handback.lua`; brings limits.lua, ready.lua and cancel.lua). Shared by
-- reap.lua (its worker died) and release.lua (a stopping worker never started it):
-- the slots it held are freed (lib/limits.lua), then it goes to the front of its
-- priority; one with a cancel request is dead-lettered ('cancelled') instead.
--! include limits.lua
--! include cancel.lua

-- hand_back(prefix, q, dead, cancels, requests, id, now) -> whether its task data is a hash, whether it was cancelled;
--   q: {pending, prioritized, seq, slots, blocked}; requests: whether the cancels HASH exists
local function hand_back(prefix, q, dead, cancels, requests, id, now)
  local tkey = prefix .. 't:' .. id
  local is_hash = redis.call('TYPE', tkey)['ok'] == 'hash'
  if is_hash then
    local h = redis.call('HMGET', tkey, 'slot', 'task')
    if h[1] then free_slots(prefix, q, id, h[2], h[1]) end
  end
  local request = requests and redis.call('HGET', cancels, id)
  if request then redis.call('HDEL', cancels, id) end
  if request and is_hash then
    bury_cancelled(prefix, dead, id, now, cancel_who(request))
    return is_hash, true
  end
  ready(q.pending, q.prioritized, q.seq, id, stored_prio(tkey), true)
  if is_hash then redis.call('HSET', tkey, 'state', 'pending') end
  return is_hash, false
end
