-- lib/store.lua: store one new task and queue it, shared by enqueue.lua and fire.lua
-- (`--! include store.lua`; brings idem.lua, types.lua, ready.lua and fair.lua along). The pending LIST
-- and the scheduled ZSET need no check first: each write's reply says when the key is of
-- another type, and it is then set aside and written again (wrote, lib/types.lua).
--
-- A task's own limits and keys come as one argument (`limits`): '' (none, the common case),
-- '<max_running>|<rate count>|<rate period ms>' (either part may be empty; lib/limits.lua), or
-- a JSON object (core/keyed.py) with any of m (max_running), r (rate 'count|period ms'),
-- lk (limit key), fk (fairness key: the queue is FAIR, lib/fair.lua), d / t (debounce /
-- throttle window in ms, keyed by the call's idempotency key, which then means only that):
--   debounce: P:debounce:<key> (STRING, PX window + 1 h) names the task of the burst; while it
--     is still scheduled, a call replaces its message (the last call's arguments) and moves its
--     due time to now + window, and returns its id; otherwise a new task, due in window ms.
--   throttle: P:throttle:<key> (STRING, PX window) names the run of the current window; a call
--     inside it returns that id; otherwise a new task, and the window starts.
--! include idem.lua
--! include fair.lua

-- own_spec(limits): the table of a task's own limits and keys (see above)
local function own_spec(limits)
  if not limits or limits == '' then return {} end
  if string.sub(limits, 1, 1) == '{' then return cjson.decode(limits) end
  local maxr, rate = string.match(limits, '^([^|]*)|(.*)$')
  return {m = maxr, r = rate}
end

-- window_holder(prefix, q, now, spec, key, msg) -> the id a debounced or throttled call joins,
--   or false (a new task is needed) and the STRING key to point at it
local function window_holder(prefix, q, now, spec, key, msg)
  if spec.d then
    local dkey = prefix .. 'debounce:' .. key
    if want(dkey, 'string') == 'string' then
      local held = redis.call('GET', dkey)
      local hkey = prefix .. 't:' .. held
      if redis.call('TYPE', hkey)['ok'] == 'hash' and redis.call('HGET', hkey, 'state') == 'scheduled'
          and redis.call('ZSCORE', q.scheduled, held) then
        redis.call('HSET', hkey, 'msg', msg)
        redis.call('ZADD', q.scheduled, now + spec.d, held)
        redis.call('PEXPIRE', dkey, spec.d + 3600000)
        return held, dkey
      end
    end
    return false, dkey
  end
  local tkey = prefix .. 'throttle:' .. key
  if want(tkey, 'string') == 'string' then return redis.call('GET', tkey), tkey end
  return false, tkey
end

-- store_task(prefix, q, now, id, msg, path, delay, idem, prio, limits) ->
--   ''     stored: pending (delay 0) or scheduled at now + delay ms
--   <id>   not stored: the idempotency key idem is held by task <id> (or, debounced or
--          throttled, the call joined task <id>)
--   '!'    not stored: a task with this id already exists
--   q: {pending = KEY, scheduled = KEY, prioritized = KEY, seq = KEY}; prio: -100..100, 0 the default;
--   limits: the task's own limits and keys (see above)
local function store_task(prefix, q, now, id, msg, path, delay, idem, prio, limits)
  local tkey = prefix .. 't:' .. id
  local spec = own_spec(limits)
  local holder, ikey, window, wkey = false, nil, nil, idem
  if spec.d or spec.t then
    holder, window = window_holder(prefix, q, now, spec, idem, msg)
    if spec.d then delay = math.max(delay, spec.d) end
    idem = ''
  elseif idem ~= '' then
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
  if window then redis.call('SET', window, id, 'PX', (spec.d or 0) + (spec.t or 3600000)) end
  local state = 'pending'
  if delay > 0 then state = 'scheduled' end
  redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', state, 'enqueued_at', now,
    'deliveries', 0, 'failures', 0, 'idem', idem)
  if prio ~= 0 then redis.call('HSET', tkey, 'prio', prio) end  -- the default costs no field
  if spec.m and spec.m ~= '' then redis.call('HSET', tkey, 'maxr', spec.m) end
  if spec.r and spec.r ~= '' then redis.call('HSET', tkey, 'rate', spec.r) end
  if spec.lk then redis.call('HSET', tkey, 'lk', spec.lk) end
  if spec.fk then redis.call('HSET', tkey, 'fk', spec.fk) end
  if window then redis.call('HSET', tkey, 'dk', wkey) end
  if delay > 0 then
    wrote('ZADD', q.scheduled, now + delay, id)
  elseif spec.fk then
    fair_ready(prefix, q, spec.fk, id, prio)
  else
    ready(q.pending, q.prioritized, q.seq, id, prio, false)
  end
  return ''
end
