-- lib/store.lua: store one new task and queue it, shared by enqueue.lua and fire.lua
-- (`--! include store.lua`; brings idem.lua, types.lua and ready.lua along). The pending LIST
-- and the scheduled ZSET need no check first: each write's reply says when the key is of
-- another type, and it is then set aside and written again (wrote, lib/types.lua).
--! include idem.lua
--! include ready.lua

-- store_task(prefix, q, now, id, msg, path, delay, idem, prio, limits) ->
--   ''     stored: pending (delay 0) or scheduled at now + delay ms
--   <id>   not stored: the idempotency key idem is held by task <id>
--   '!'    not stored: a task with this id already exists
--   q: {pending = KEY, scheduled = KEY, prioritized = KEY, seq = KEY}; prio: -100..100, 0 the default;
--   limits: '' or '<max_running>|<rate count>|<rate period ms>' (either part may be empty; lib/limits.lua)
local function store_task(prefix, q, now, id, msg, path, delay, idem, prio, limits)
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
  local state = 'pending'
  if delay > 0 then state = 'scheduled' end
  redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', state, 'enqueued_at', now,
    'deliveries', 0, 'failures', 0, 'idem', idem)
  if prio ~= 0 then redis.call('HSET', tkey, 'prio', prio) end  -- the default costs no field
  if limits and limits ~= '' then
    local maxr, rate = string.match(limits, '^([^|]*)|(.*)$')
    if maxr and maxr ~= '' then redis.call('HSET', tkey, 'maxr', maxr) end
    if rate and rate ~= '' then redis.call('HSET', tkey, 'rate', rate) end
  end
  if delay > 0 then
    wrote('ZADD', q.scheduled, now + delay, id)
  else
    ready(q.pending, q.prioritized, q.seq, id, prio, false)
  end
  return ''
end
