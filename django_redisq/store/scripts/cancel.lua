-- cancel: cancel tasks by id, each in the one way its state allows, never lost half-way.
--   pending / scheduled -> taken out of pending (LREM) or scheduled (ZREM) and dead-lettered at
--                          once: state dead, reason 'cancelled', a TaskCancelled error naming who
--                          asked, counted in dead_count; it keeps its idempotency key, as bury.lua's
--                          dead letters do. Then the dead set is trimmed as bury.lua trims it.
--   running             -> in a processing list (the worker its hash names last, else any worker
--                          registered on the queue: an id BLMOVE moved is not claimed yet): a request
--                          P:cancels[id] = '<Redis ms>|<who>' (the first one is kept). Its worker
--                          polls the hash, stops the task and buries it with reason 'cancelled';
--                          whichever script settles the task deletes the request (lib/cancel.lua).
--   finished / dead     -> nothing changes (a dead letter being moved to another queue is dead).
--   no task hash        -> nothing changes (a key of another type: its worker buries it as corrupt).
-- Removing a pending task walks pending from its tail (the next to run) to the id: O(depth),
-- an operator's action, never on the hot path. A call walks about ARGV[5] entries at most,
-- except that its first pending id is always removed (plus one walk of the whole list at
-- worst), so every call progresses; ids it does not reach answer -1, for the caller to send again.
--
-- KEYS[1] -> P:pending    (LIST)
-- KEYS[2] -> P:scheduled  (ZSET)
-- KEYS[3] -> P:dead       (ZSET, score = died at, Redis ms)
-- KEYS[4] -> P:cancels    (HASH, task id -> '<Redis ms>|<who>')
-- KEYS[5] -> P:workers    (ZSET), whose processing lists P:processing:<worker> are searched
-- KEYS[6] -> P:prioritized (ZSET): where a pending task of a priority other than 0 waits (O(log n))
-- KEYS[7] -> P:blocked     (LIST): where a pending task waits for a slot of its queue's MAX_RUNNING;
--                          one waiting for its task's max_running is in P:blocked:<task path> (lib/limits.lua),
--                          or P:blocked:<task path>#<limit key> (P:keyload then counts it out)
--                          A pending task of a FAIR queue waits in P:fair:<fairness key> (lib/fair.lua):
--                          ZREM, and its key leaves the ring P:fair (LREM: O(keys), an operator's action)
-- ARGV[1] -> P:           the queue's key prefix (task hashes, processing lists, counters)
-- ARGV[2] -> who          who asks ('admin:<username>', 'cli', 'api'), recorded in the error
-- ARGV[3] -> retention in ms (dead letters older than this are trimmed; 0 = keep)
-- ARGV[4] -> max dead letters kept (0 = no limit)
-- ARGV[5] -> scan budget: pending entries this call may walk
-- ARGV[6..] -> task ids
--
-- Keys of the wrong type are set aside (lib/types.lua) and treated as missing.
--
-- Returns: one code per id, in order:
--   1 -> CANCELLED: was pending or scheduled, now a dead letter
--   2 -> REQUESTED: running; its worker will stop it (also when it was requested already)
--   3 -> FINISHED:  already finished or dead; nothing changed
--   0 -> MISSING:   no such task (or its data is not a hash); nothing changed
--  -1 -> NOT REACHED: the scan budget ran out before this id (and every later one answers -1)
--! include cancel.lua
--! include limits.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, who, budget = ARGV[1], ARGV[2], tonumber(ARGV[5])
local spent = 0  -- pending entries walked so far
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
want(KEYS[3], 'zset')
want(KEYS[4], 'hash')
want(KEYS[5], 'zset')
local registered  -- the queue's workers, read once when first needed

-- held(id, last): the id is in a processing list (the worker named last first)
local function held(id, last)
  local tried = {}
  local function has(w)
    if w == '' or tried[w] then return false end
    tried[w] = true
    local plist = prefix .. 'processing:' .. w
    return redis.call('TYPE', plist)['ok'] == 'list' and redis.call('LPOS', plist, id) ~= false
  end
  if has(last) then return true end
  registered = registered or redis.call('ZRANGE', KEYS[5], 0, -1)
  for _, w in ipairs(registered) do
    if has(w) then return true end
  end
  return false
end

-- unqueue(id): take id out of pending, walking from the tail. true: removed; false: not
-- there; nil: farther than this call's budget lets it walk (sent again in the next call)
local function unqueue(id)
  local len, left = redis.call('LLEN', KEYS[1]), budget - spent
  if left > 0 then
    local pos = redis.call('LPOS', KEYS[1], id, 'RANK', -1, 'MAXLEN', left)
    if pos then
      spent = spent + 2 * (len - pos)  -- LPOS and LREM each walk that far
      redis.call('LREM', KEYS[1], -1, id)
      return true
    end
    if len <= left then
      spent = spent + len
      return false
    end
  end
  if spent > 0 then return nil end
  spent = budget  -- the first of a call, beyond the budget: one plain walk, so every call progresses
  return redis.call('LREM', KEYS[1], -1, id) == 1
end

-- waiting(id, ...): take id out of the first of these blocked lists that holds it
local function waiting(id, ...)
  for _, key in ipairs({...}) do
    if redis.call('TYPE', key)['ok'] == 'list' and redis.call('LREM', key, 1, id) == 1 then return true end
  end
  return false
end

-- unfair(key, id): take id out of its fairness key's ZSET (lib/fair.lua), the key out of the ring if emptied
local function unfair(key, id)
  local zkey = prefix .. 'fair:' .. key
  if redis.call('TYPE', zkey)['ok'] ~= 'zset' or redis.call('ZREM', zkey, id) == 0 then return false end
  if redis.call('EXISTS', zkey) == 0 and redis.call('TYPE', prefix .. 'fair')['ok'] == 'list' then
    redis.call('LREM', prefix .. 'fair', 1, key)
  end
  if redis.call('TYPE', prefix .. 'fairn')['ok'] == 'string' then redis.call('DECR', prefix .. 'fairn') end
  return true
end

local function bury(id)
  bury_cancelled(prefix, KEYS[3], id, now, who)
  redis.call('HDEL', KEYS[4], id)  -- a request left over from an earlier run
  return 1
end

local out = {}
local cancelled = 0
local reached = true
for i = 6, #ARGV do
  local id = ARGV[i]
  local tkey = prefix .. 't:' .. id
  local code = 0
  if not reached then
    code = -1
  elseif redis.call('TYPE', tkey)['ok'] == 'hash' then
    local f = redis.call('HMGET', tkey, 'state', 'workers', 'task', 'lk', 'fk')
    local state = f[1]
    local queued = false
    if state == 'finished' or state == 'dead' or state == 'moving' or redis.call('ZSCORE', KEYS[3], id) then
      code = 3
    elseif redis.call('ZREM', KEYS[2], id) == 1 then
      queued = true
    elseif redis.call('TYPE', KEYS[6])['ok'] == 'zset' and redis.call('ZREM', KEYS[6], id) == 1 then
      queued = true
    elseif state == 'pending' and waiting(id, prefix .. 'blocked:' .. limit_path(f[3] or '', f[4]), KEYS[7]) then
      touch(prefix, limit_path(f[3] or '', f[4]))
      queued = true
    elseif state == 'pending' and f[5] and unfair(f[5], id) then
      queued = true
    elseif state == 'pending' then
      queued = unqueue(id)
      if queued == nil then reached = false; code = -1 end
    end
    if queued then
      code = bury(id)
    elseif code == 0 and held(id, string.match(f[2] or '', '([^,]*)$')) then
      redis.call('HSETNX', KEYS[4], id, now .. '|' .. who)
      code = 2
    end
  end
  if code == 1 then cancelled = cancelled + 1 end
  out[#out + 1] = code
end
if cancelled > 0 then trim_dead(prefix, KEYS[3], now, ARGV[3], ARGV[4]) end
return out
