-- lib/store.lua: store one new task and queue it, shared by enqueue.lua and fire.lua
-- (`--! include store.lua`; brings idem.lua and types.lua along). The caller has
-- checked the types of its pending LIST and scheduled ZSET keys.
--! include idem.lua

-- store_task(prefix, pending, scheduled, now, id, msg, path, delay, idem) ->
--   ''     stored: pending (delay 0) or scheduled at now + delay ms
--   <id>   not stored: the idempotency key idem is held by task <id>
--   '!'    not stored: a task with this id already exists
local function store_task(prefix, pending, scheduled, now, id, msg, path, delay, idem)
  local tkey = prefix .. 't:' .. id
  local holder = false
  local ikey
  if idem ~= '' then
    ikey = prefix .. 'idem:' .. idem
    holder = idem_holder(prefix, ikey)
  end
  local kind = redis.call('TYPE', tkey)['ok']
  if kind ~= 'hash' and kind ~= 'none' then
    set_aside(tkey)  -- not ours: no earlier try writes anything but a hash
    kind = 'none'
  end
  if holder and holder ~= id then return holder end
  if kind == 'hash' then return '!' end
  if ikey then redis.call('SET', ikey, id) end
  if delay > 0 then
    redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', 'scheduled', 'enqueued_at', now,
      'deliveries', 0, 'failures', 0, 'idem', idem)
    redis.call('ZADD', scheduled, now + delay, id)
  else
    redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', 'pending', 'enqueued_at', now,
      'deliveries', 0, 'failures', 0, 'idem', idem)
    redis.call('LPUSH', pending, id)
  end
  return ''
end
