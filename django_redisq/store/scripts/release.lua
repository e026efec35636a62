-- release: a stopping worker hands back tasks it fetched but never started,
-- undoing the claim (delivery count, worker id, guard), so they run next
-- elsewhere as if never taken. With no ids given, it hands back everything
-- left in its processing list and leaves the heartbeat set (clean exit).
-- Worker ids are unique per process, so only the process that claimed a task
-- can undo its claim: a restart under the same name never does. A task with a
-- cancel request (lib/cancel.lua) is dead-lettered with reason 'cancelled'
-- instead of handed back (its claim undone or released all the same).
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:pending              (LIST)
-- KEYS[3] -> P:workers              (ZSET)
-- KEYS[4] -> P:alive                (HASH)
-- KEYS[5] -> P:dead                 (ZSET), where cancelled tasks go
-- KEYS[6] -> P:cancels              (HASH, task id -> '<Redis ms>|<who>')
-- KEYS[7] -> P:prioritized          (ZSET) and KEYS[8] -> P:prioseq (STRING): a task of a priority
--                                   other than 0 goes back to the front of its priority (lib/ready.lua)
-- KEYS[9] -> P:slots, KEYS[10] -> P:blocked (lib/limits.lua): a slot the task held is freed and one task waiting for it made ready
-- ARGV[1] -> P:          the queue's key prefix
-- ARGV[2] -> worker id
-- ARGV[3..] -> ids never started (undo their claim); a marker named (lib/ready.lua: a wake-up a
--              BLMOVE moved, not a task) only leaves the list; none = release all and deregister
--              or ARGV[3] = '' and then pairs: id, its delivery count as the worker's claim of it said: an id
--              whose count differs was claimed again since (a fenced worker that fetched it anew) and is left
--              alone, so a late hand-back never takes back a newer claim of the same task
--              or ARGV[3] = '+' and then ids that ran and could not be settled: handed back with their claim
--              kept (the delivery counted), so a task that can never be settled ends as too_many_deliveries
--
-- Returns: number of tasks handed back or cancelled
--! include shape.lua
--! include handback.lua
local bad = wrong_shape({'list', 'list', 'zset', 'hash', 'zset', 'hash', 'zset'})
if bad then return bad end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, w = ARGV[1], ARGV[2]
local requests = redis.call('EXISTS', KEYS[6]) == 1
local q = {pending = KEYS[2], prioritized = KEYS[7], seq = KEYS[8], slots = KEYS[9], blocked = KEYS[10]}
local n = 0
local function give_back(id, undo)
  local tkey = prefix .. 't:' .. id
  local skey = prefix .. 'status:' .. id
  local is_hash = redis.call('TYPE', tkey)['ok'] == 'hash'
  local ours = redis.call('TYPE', skey)['ok'] == 'string' and redis.call('GET', skey) == 'running:' .. w
  if ours then
    redis.call('DEL', skey)
    if undo and is_hash then
      local d = tonumber(redis.call('HGET', tkey, 'deliveries')) or 1
      redis.call('HSET', tkey, 'deliveries', math.max(0, d - 1))
      if d <= 1 then redis.call('HDEL', tkey, 'started_at') end
      local workers = redis.call('HGET', tkey, 'workers') or ''
      local cut = string.find(workers, ',[^,]*$')
      if cut then workers = string.sub(workers, 1, cut - 1) else workers = '' end
      redis.call('HSET', tkey, 'workers', workers)
    end
  end
  hand_back(prefix, q, KEYS[5], KEYS[6], requests, id, now)
  n = n + 1
end
local function claimed_as(id, want)
  local tkey = prefix .. 't:' .. id
  -- a task key of another type cannot say: its claim is undone as without a count
  return redis.call('TYPE', tkey)['ok'] ~= 'hash' or redis.call('HGET', tkey, 'deliveries') == want
end
if #ARGV >= 4 and ARGV[3] == '' then
  for i = 4, #ARGV - 1, 2 do
    local id = ARGV[i]
    if claimed_as(id, ARGV[i + 1]) and redis.call('LREM', KEYS[1], 1, id) == 1 and id ~= MARKER then give_back(id, true) end
  end
elseif #ARGV >= 4 and ARGV[3] == '+' then
  for i = 4, #ARGV do
    if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 and ARGV[i] ~= MARKER then give_back(ARGV[i], false) end
  end
elseif #ARGV >= 3 then
  for i = 3, #ARGV do
    if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 and ARGV[i] ~= MARKER then give_back(ARGV[i], true) end
  end
else
  while true do
    local id = redis.call('RPOP', KEYS[1])
    if not id then break end
    if id ~= MARKER then give_back(id, false) end  -- a marker is a wake-up a BLMOVE moved, not a task
  end
  redis.call('ZREM', KEYS[3], w)
  redis.call('HDEL', KEYS[4], w)
  redis.call('DEL', prefix .. 'worker:' .. w)
end
return n
