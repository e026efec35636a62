-- lib/limits.lua: fleet-wide limits on starting tasks (`--! include limits.lua`; brings ready.lua).
--
-- Concurrency: at most N tasks of one kind run at once, whichever workers run them.
-- A kind is a task (the hash's 'maxr', stored at enqueue from @task(max_running=N);
-- its slots are P:slots:<task path>) or the whole queue (QUEUE_OPTIONS MAX_RUNNING,
-- passed by the worker; slots P:slots). A slot is the task id in that ZSET (score:
-- when it was taken), held from the claim (fetch.lua) to the settle (ack, retry, bury),
-- or until a stopping worker hands the task back (release) or the reaper gives back a
-- dead worker's tasks (reap): each of those frees it and makes one task waiting for
-- it ready again. The task hash's 'slot' says which it holds ('t', 'q' or 'tq').
-- A task over the limit waits in P:blocked:<task path> (or P:blocked), a LIST,
-- not in a worker and not as an attempt. A slot whose holder's guard no longer
-- says running (a holder lost some other way) is swept when the limit is reached.
--
-- Rate: a task starts at most every period / count (@task(rate_limit="10/s"): one per
-- 100 ms), on the Redis clock, kept in P:rate:<task path> (or P:rate for the queue's
-- RATE_LIMIT): the earliest time the next start is allowed (a STRING, ms). A task
-- that comes too early is scheduled for the next free slot, which it reserves (the
-- hash's 'rl'): once due it starts without asking again, so a backlog is spread over
-- the future in one pass, with no retrying.
--
-- Per key: a task with a limit key (@task(limit_key=...) / using(limit_key=...), the
-- hash's 'lk') counts its own max_running and rate_limit per key: its slots, blocked
-- list and rate key are those of '<task path>#<key>' (limit_path), all derived from
-- the queue's prefix, so in its slot. P:keyload (ZSET, member '<path>#<key>', score
-- running + waiting) names the keys that hold a slot or wait for one, kept exact at
-- every change (touch), so `redisq stats` and the admin read the busiest with one
-- ZREVRANGE; a key with neither leaves it.
--! include ready.lua

-- limit_path(path, lk): the name a task's own limits count under: its path, or '<path>#<key>'
local function limit_path(path, lk)
  if lk and lk ~= '' then return path .. '#' .. lk end
  return path
end

-- touch(prefix, lpath): P:keyload's score of a per-key limit is its running + waiting again
local function touch(prefix, lpath)
  if not lpath or not string.find(lpath, '#', 1, true) then return end
  local load = prefix .. 'keyload'
  local n = redis.call('ZCARD', prefix .. 'slots:' .. lpath)
  if redis.call('TYPE', prefix .. 'blocked:' .. lpath)['ok'] == 'list' then n = n + redis.call('LLEN', prefix .. 'blocked:' .. lpath) end
  if redis.call('TYPE', load)['ok'] ~= 'zset' then redis.call('DEL', load) end
  if n > 0 then redis.call('ZADD', load, n, lpath) else redis.call('ZREM', load, lpath) end
end

-- limiter(spec): count, period in ms of a 'count|period' spec, or nil ('' or bad: no limit)
local function limiter(spec)
  if not spec or spec == '' then return nil end
  local c, p = string.match(spec, '^(%d+)|(%d+)$')
  c, p = tonumber(c), tonumber(p)
  if not c or not p or c < 1 or p < 1 then return nil end
  return c, p
end

-- max_of(value): a positive whole concurrency limit, or nil
local function max_of(value)
  local n = tonumber(value)
  if not n or n < 1 or n ~= math.floor(n) then return nil end
  return n
end

-- wake(q, blocked): one task waiting for a slot (the longest waiting) is ready again,
-- at the front of its priority
local function wake(prefix, q, blocked, lpath)
  if redis.call('TYPE', blocked)['ok'] ~= 'list' then return end
  local id = redis.call('RPOP', blocked)
  if not id then return end
  touch(prefix, lpath)
  local tkey = prefix .. 't:' .. id
  ready(q.pending, q.prioritized, q.seq, id, stored_prio(tkey), true)
  if redis.call('TYPE', tkey)['ok'] == 'hash' then redis.call('HSET', tkey, 'state', 'pending') end
end

-- free_slots(prefix, q, id, path, held): give back the slots task id holds ('slot' field
-- value `held`) and wake one waiter of each; q also names q.slots and q.blocked
local function free_slots(prefix, q, id, path, held)
  if not held or held == '' then return end
  local tkey = prefix .. 't:' .. id
  if string.find(held, 't', 1, true) and path and path ~= '' then
    if redis.call('TYPE', tkey)['ok'] == 'hash' then path = limit_path(path, redis.call('HGET', tkey, 'lk')) end
    local skey = prefix .. 'slots:' .. path
    if redis.call('TYPE', skey)['ok'] == 'zset' and redis.call('ZREM', skey, id) == 1 then
      touch(prefix, path)
      wake(prefix, q, prefix .. 'blocked:' .. path, path)
    end
  end
  if string.find(held, 'q', 1, true) then
    if redis.call('TYPE', q.slots)['ok'] == 'zset' and redis.call('ZREM', q.slots, id) == 1 then
      wake(prefix, q, q.blocked)
    end
  end
  if redis.call('TYPE', tkey)['ok'] == 'hash' then redis.call('HDEL', tkey, 'slot') end
end

-- full(prefix, skey, limit): whether limit slots are taken, after sweeping holders that
-- no longer run (their guard is not 'running:<worker>')
local function full(prefix, skey, limit, lpath)
  local kind = redis.call('TYPE', skey)['ok']
  if kind ~= 'zset' then
    if kind ~= 'none' then redis.call('DEL', skey) end  -- not ours: nothing holds a slot through it
    return false
  end
  if redis.call('ZCARD', skey) < limit then return false end
  for _, holder in ipairs(redis.call('ZRANGE', skey, 0, -1)) do
    local g = prefix .. 'status:' .. holder
    local ok = redis.call('TYPE', g)['ok'] == 'string' and string.sub(redis.call('GET', g), 1, 8) == 'running:'
    if not ok then redis.call('ZREM', skey, holder); touch(prefix, lpath) end
  end
  return redis.call('ZCARD', skey) >= limit
end

-- next_start(key, now): the earliest start the rate key allows (ms)
local function next_start(key, now)
  if redis.call('TYPE', key)['ok'] ~= 'string' then return now end
  return math.max(now, tonumber(redis.call('GET', key)) or now)
end

-- take_rate(key, at, count, period): a start at `at` uses the next slot of the rate key
local function take_rate(key, at, count, period, now)
  if redis.call('TYPE', key)['ok'] ~= 'string' then redis.call('DEL', key) end
  local nxt = math.max(next_start(key, now), at) + period / count
  redis.call('SET', key, string.format('%.3f', nxt), 'PX', math.ceil(nxt - now) + period)
end

-- admit(prefix, q, now, id, tkey, path, maxr, rate, reserved, qmax, qrate): whether task id
-- (path: limit_path's name, per key when the task has a limit key)
-- may start now. If not, it has been moved (to q.scheduled for its reserved rate slot,
-- or to a blocked list) and the reason is returned: 'rate' or 'slot'; nil: admitted,
-- its slots taken and its rate slots used. The caller took it out of processing.
local function admit(prefix, q, now, id, tkey, path, maxr, rate, reserved, qmax, qrate)
  local tc, tp = limiter(rate)
  local qc, qp = limiter(qrate)
  local tm, qm = max_of(maxr), max_of(qmax)
  if not tc and not qc and not tm and not qm then return nil end
  local rkey, qrkey = prefix .. 'rate:' .. path, q.rate
  local booked = tonumber(reserved)
  if (tc or qc) and not (booked and booked <= now + 1) then
    local at = now
    if tc then at = math.max(at, next_start(rkey, now)) end
    if qc then at = math.max(at, next_start(qrkey, now)) end
    if at > now then  -- too early: book the next free slot and wait for it, scheduled
      if tc then take_rate(rkey, at, tc, tp, now) end
      if qc then take_rate(qrkey, at, qc, qp, now) end
      redis.call('ZADD', q.scheduled, at, id)
      redis.call('HSET', tkey, 'state', 'scheduled', 'rl', string.format('%.0f', at))
      return 'rate'
    end
  end
  local tslots = prefix .. 'slots:' .. path
  local wait
  if tm and full(prefix, tslots, tm, path) then wait = prefix .. 'blocked:' .. path
  elseif qm and full(prefix, q.slots, qm) then wait = q.blocked end
  if wait then
    local kind = redis.call('TYPE', wait)['ok']
    if kind ~= 'list' and kind ~= 'none' then redis.call('DEL', wait) end  -- not ours: nothing waits in it
    redis.call('LPUSH', wait, id)
    redis.call('HSET', tkey, 'state', 'pending')
    redis.call('HDEL', tkey, 'rl')  -- it asks the rate limit again once a slot frees
    if wait ~= q.blocked then touch(prefix, path) end
    return 'slot'
  end
  if not booked or booked > now + 1 then  -- a start now uses a rate slot (a booked one was used when booked)
    if tc then take_rate(rkey, now, tc, tp, now) end
    if qc then take_rate(qrkey, now, qc, qp, now) end
  end
  local held = ''
  if tm then
    redis.call('ZADD', tslots, now, id)
    redis.call('HSET', q.limits, string.match(path, '^[^#]*'), tm)  -- per task, not per key: bounded by the tasks
    held = 't'
    touch(prefix, path)
    if redis.call('ZCARD', tslots) < tm then wake(prefix, q, prefix .. 'blocked:' .. path, path) end  -- a raised limit fills up
  end
  if qm then
    redis.call('ZADD', q.slots, now, id)
    held = held .. 'q'
    if redis.call('ZCARD', q.slots) < qm then wake(prefix, q, q.blocked) end
  end
  if held ~= '' then redis.call('HSET', tkey, 'slot', held) end
  if booked then redis.call('HDEL', tkey, 'rl') end
  return nil
end
