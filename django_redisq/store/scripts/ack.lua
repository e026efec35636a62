-- ack: tasks succeeded. For each: prove ownership, record the result (the hash's state 'finished',
-- kept RESULT_TTL: what a redelivered copy finds, fetch.lua), start the idempotency key's countdown,
-- count it, and add the batch's run times to the minute's durations hash (bounded:
-- see store/reads/durations.py). Many tasks per call, so a busy worker settles a batch in one round trip.
-- A task's guard (P:status:<id>, 'running:<worker>' since fetch.lua) is left to lapse with its lease: once the
-- hash says finished it guards nothing. Only a lost lease writes 'success' there (see Returns).
--
-- KEYS[1] -> P:processing:<worker>  (LIST): the acked ids found together at its tail (the oldest fetched,
--                                   usually the batch) leave it in one LTRIM, the others by LREM
-- KEYS[2] -> P:dead                 (ZSET), for a task whose hash turned out corrupt
-- KEYS[3] -> P:cancels              (HASH, task id -> cancel request): the batch's requests are
--                                   deleted, lost leases included (their 'success' guard means no
--                                   copy runs again); one TYPE per call, one HDEL only if it exists
-- KEYS[4] -> P:pending, KEYS[5] -> P:prioritized, KEYS[6] -> P:prioseq, KEYS[7] -> P:slots,
-- KEYS[8] -> P:blocked  (lib/limits.lua): a slot the task held is freed and one task waiting for it made ready
-- ARGV[1] -> P:                the queue's key prefix (task hashes P:t:<id>, guards P:status:<id>,
--                              idempotency keys, counters)
-- ARGV[2] -> result TTL in ms (how long a finished task hash is kept)
-- ARGV[3] -> success TTL in ms (how long a lost lease's guard and the idempotency key say 'done')
-- ARGV[4] -> ms a corrupt task key set aside is kept (the dead-letter retention)
-- ARGV[5] -> most task names one minute's durations hash keeps (later ones count under '~other')
-- ARGV[6] -> ms the durations hash P:durations:<minute> lives (HASH, see store/reads/durations.py)
-- ARGV[7] -> k: how many run-time triples follow
-- ARGV[8..7+3k] -> triples: task name, bucket index, runs (the worker groups its batch)
-- ARGV[8+3k..] -> triples: id, result JSON, '1' when fetch.lua said the task is plain (no idempotency key,
--                 no limit's slot: its hash is written without being read first) else ''
--
-- Returns: the ids whose lease was lost (not in this worker's processing list: they
--   were reaped and redelivered). For those the 'success' guard is written, so
--   the redelivered copy is acked without running again, and so is the result if
--   the task hash still exists (a purged task is not brought back as a bare result).
-- A held task whose key is not a hash is set aside and dead-lettered ('corrupt'), result kept.
--! include dead.lua
--! include limits.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, result_ttl, success_ttl, corrupt_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
local cancels = want(KEYS[3], 'hash')
local q = {pending = KEYS[4], prioritized = KEYS[5], seq = KEYS[6], slots = KEYS[7], blocked = KEYS[8]}
local lost = {}
local acked = 0
local first = 8 + 3 * tonumber(ARGV[7])

-- run times (of lost leases too: the runs happened), in the minute's bounded hash
if first > 8 then
  local dkey = prefix .. 'durations:' .. math.floor(now / 60000)
  want(dkey, 'hash')
  local known = redis.call('HGET', dkey, '~names')  -- nil: the minute's first batch, whose call sets the expiry
  local cap, names = tonumber(ARGV[5]), tonumber(known) or 0
  for i = 8, first - 1, 3 do
    local name, runs = ARGV[i], ARGV[i + 2]
    if redis.call('HEXISTS', dkey, name .. '|n') == 0 then
      if names >= cap then
        name = '~other'
      else
        names = names + 1
        redis.call('HSET', dkey, '~names', names)
      end
    end
    redis.call('HINCRBY', dkey, name .. '|' .. ARGV[i + 1], runs)
    redis.call('HINCRBY', dkey, name .. '|n', runs)
  end
  if not known then redis.call('PEXPIRE', dkey, ARGV[6]) end
end

-- which acked ids this worker still holds: those together at the tail of its list in one LTRIM (the
-- oldest fetched end there, and a batch is mostly them), each other one by its own LREM
local owned, want_n = {}, {}
local n = 0
for i = first, #ARGV, 3 do want_n[ARGV[i]] = (want_n[ARGV[i]] or 0) + 1; n = n + 1 end
if n > 0 then
  local tail = redis.call('LRANGE', KEYS[1], -n, -1)
  local cut = 0
  for j = #tail, 1, -1 do
    local id = tail[j]
    if not want_n[id] or want_n[id] == 0 then break end
    want_n[id] = want_n[id] - 1
    owned[id] = (owned[id] or 0) + 1
    cut = cut + 1
  end
  if cut > 0 then redis.call('LTRIM', KEYS[1], 0, -cut - 1) end
end

for i = first, #ARGV, 3 do
  local id, result, plain = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1'
  local tkey = prefix .. 't:' .. id
  local mine = (owned[id] or 0) > 0
  if mine then
    owned[id] = owned[id] - 1
  else
    mine = redis.call('LREM', KEYS[1], 1, id) == 1
  end
  local h
  if not (mine and plain) then
    -- the hash's fields, and its type by the reply (an error: not a hash), in one read instead of TYPE
    -- then HMGET; every hash a task's life writes has 'msg' or 'task', so neither means it is gone
    h = redis.pcall('HMGET', tkey, 'idem', 'slot', 'task', 'msg')
  end
  if not mine then
    -- whoever holds it now settles it: only note the result where the task still is, and say 'success'
    -- to the copy that may be running or waiting (SET replaces a key of any type)
    redis.call('SET', prefix .. 'status:' .. id, 'success', 'PX', success_ttl)
    if not h.err and (h[3] or h[4] or h[1] or h[2]) then
      redis.call('HSET', tkey, 'result', result)
      idem_expire(prefix, h[1], id, success_ttl)
    end
    lost[#lost + 1] = id
  else
    local bad
    if h then
      bad = h.err ~= nil
      if not bad then redis.call('HSET', tkey, 'state', 'finished', 'result', result, 'finished_at', now) end
    else  -- plain: the write's reply says whether the key is a hash
      local wrote = redis.pcall('HSET', tkey, 'state', 'finished', 'result', result, 'finished_at', now)
      bad = type(wrote) == 'table' and wrote.err ~= nil
    end
    if bad then  -- not a hash: set aside, dead-lettered with its result
      redis.call('HSET', bury_corrupt(prefix, KEYS[2], id, now, corrupt_ttl), 'result', result)
    else
      redis.call('PEXPIRE', tkey, result_ttl)
      if h and (h[3] or h[4] or h[1] or h[2]) then
        idem_expire(prefix, h[1], id, success_ttl)
        if h[2] then free_slots(prefix, q, id, h[3], h[2]) end
      end
      acked = acked + 1
    end
  end
end
count(prefix, 'processed', acked, now)
if cancels == 'hash' then
  local ids = {}
  for i = first, #ARGV, 3 do ids[#ids + 1] = ARGV[i] end
  for lo = 1, #ids, 1000 do redis.call('HDEL', KEYS[3], unpack(ids, lo, math.min(lo + 999, #ids))) end
end
return lost
