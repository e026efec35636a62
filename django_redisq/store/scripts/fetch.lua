-- fetch: take up to n ids from pending into this worker's processing list and
-- claim each one's idempotency guard (SET NX PX) before it may run.
--
-- KEYS[1] -> P:pending              (LIST)
-- KEYS[2] -> P:processing:<worker>  (LIST)
-- KEYS[3] -> P:scheduled            (ZSET), where a task another worker still holds is put back
-- KEYS[4] -> P:workers              (ZSET): the worker must be registered (the fence)
-- KEYS[5] -> P:cancels              (HASH): the cancel request of an id found DONE is deleted
--                                   (it will not run); touched only then, and only if a hash
-- KEYS[6] -> P:paused               (STRING): while it exists the queue is paused and nothing is taken
-- KEYS[7] -> P:prioritized          (ZSET): ready tasks of a priority other than 0 (lib/ready.lua)
-- KEYS[8] -> P:prioseq              (STRING): their FIFO counter (untouched here but for hand-backs)
-- KEYS[9] -> P:slots, KEYS[10] -> P:blocked, KEYS[11] -> P:rate, KEYS[12] -> P:limits: the queue's
--            fleet-wide limits (lib/limits.lua); a task's own are the derived P:slots:<path>,
--            P:blocked:<path> and P:rate:<path>, in the same slot by construction
-- ARGV[1] -> P:            the queue's key prefix
-- ARGV[2] -> n             how many ids to take from pending (may be 0)
-- ARGV[3] -> lease in ms   lifetime of the guard; the worker's heartbeat renews it
-- ARGV[4] -> worker id
-- ARGV[5] -> result TTL in ms, applied to a task found already successful
-- ARGV[6] -> an id that BLMOVE already put in KEYS[2], claimed first ('' = none); when it is a
--            marker (lib/ready.lua), or a higher priority waits in KEYS[7], one more is taken in its
--            stead (the moved default-priority id goes back to be the next of its priority)
-- ARGV[7] -> success TTL in ms, applied to the task's idempotency key when found already successful
-- ARGV[8] -> the queue's MAX_RUNNING (0 = none); ARGV[9] -> its RATE_LIMIT as 'count|period ms' ('' = none)
-- ARGV[10] -> '1' when the queue is FAIR (lib/fair.lua: P:fair, P:fair:<key>, P:fairn, derived from
--             ARGV[1]); '' or missing: those keys are never touched
--
-- Returns: {-1} FENCED: the worker is not registered (it was reaped while paused); nothing
--   was taken, and ids a late BLMOVE put in its processing list went back to pending.
--   {-2} PAUSED: the queue is paused; nothing was taken, and the id ARGV[6] names went back
--   to the head of pending (the end taken next), so it keeps its place.
--   Otherwise a flat array, 11 entries per id: id, code, message, deliveries, failures,
--   worker ids (comma-joined), enqueued_at (as stored), started_at (Redis ms, or as
--   stored), task path, saved metadata (JSON as stored, '' if none), plain ('1': no
--   idempotency key, no limit's slot, no limit, fairness, debounce or throttle key, so
--   ack.lua may write its hash without reading it first; else '') (message and later are '' / 0 unless RUN); the caller validates
--   the stored fields it parses.
--   code 1 RUN   -> claimed: run it, then ack, retry or bury it
--   code 2 DONE  -> already successful, or finished or dead: removed from processing, do not run
--   code 3 BUSY  -> another worker's guard is still held: moved to scheduled for 1 s later
--   code 4 NOMSG -> no task data for this id: left in processing for the worker to bury
--   code 5 CORRUPT -> a key of the wrong type, or non-numeric counters: left for burial
--   code 6 LIMITED -> over a fleet-wide limit (lib/limits.lua): taken out of processing, unclaimed and
--                     not counted as a delivery; it waits for a slot (blocked) or its rate slot (scheduled)
-- Ids are taken in priority order: KEYS[7] while its best is above priority 0, then
-- KEYS[1] (priority 0, FIFO), then KEYS[7]'s priorities below 0; a FAIR queue takes from its
-- ring (lib/fair.lua) after KEYS[1] (where hand-backs, retries and delayed tasks come back).
--! include shape.lua
--! include limits.lua
--! include fair.lua
local bad = wrong_shape({'list', 'list', 'zset', 'zset'})
if bad then return bad end
local pt = redis.call('TYPE', KEYS[7])['ok']
if pt ~= 'zset' and pt ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[7] .. ' is a ' .. pt .. ', expected a zset (written by another program?)')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, worker, lease = ARGV[1], ARGV[4], ARGV[3]
if not redis.call('ZSCORE', KEYS[4], worker) then
  -- reaped: nothing in our list is ours any more; hand back what a BLMOVE put there since
  while true do
    local id = redis.call('RPOP', KEYS[2])
    if not id then break end
    if id ~= MARKER then ready(KEYS[1], KEYS[7], KEYS[8], id, stored_prio(prefix .. 't:' .. id), true) end
  end
  return {-1}
end
if redis.call('EXISTS', KEYS[6]) == 1 then
  if ARGV[6] ~= '' and redis.call('LREM', KEYS[2], 1, ARGV[6]) > 0 and ARGV[6] ~= MARKER then
    ready(KEYS[1], KEYS[7], KEYS[8], ARGV[6], 0, true)
  end
  return {-2}
end
local ids = {}
local q = {pending = KEYS[1], scheduled = KEYS[3], prioritized = KEYS[7], seq = KEYS[8], slots = KEYS[9],
  blocked = KEYS[10], rate = KEYS[11], limits = KEYS[12]}
local count = tonumber(ARGV[2])
local ranked = redis.call('ZCARD', KEYS[7]) > 0  -- false: a queue of default priorities only
local function best()  -- the first prioritized id and its score, or nil
  if not ranked then return nil end
  local z = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
  if not z[1] then ranked = false; return nil end
  return z[1], tonumber(z[2])
end
local function take_ranked(id)
  redis.call('ZREM', KEYS[7], id)
  redis.call('LPUSH', KEYS[2], id)
  ids[#ids + 1] = id
end
-- the moved id must still be ours: a worker that stalled past WORKER_TIMEOUT after its
-- BLMOVE may have been reaped meanwhile (LPOS is O(1) here: BLMOVE put it at the head)
if ARGV[6] == MARKER then
  redis.call('LREM', KEYS[2], 1, MARKER)
  count = count + 1
elseif ARGV[6] ~= '' and redis.call('LPOS', KEYS[2], ARGV[6]) then
  local bid, bscore = best()
  if bid and bscore < 100 * BAND then
    redis.call('LREM', KEYS[2], 1, ARGV[6])
    ready(KEYS[1], KEYS[7], KEYS[8], ARGV[6], 0, true)
    count = count + 1
  else
    ids[1] = ARGV[6]
  end
end
-- take_one(fair): the next id by priority, one at a time: a prioritized one above 0, else the LIST's next
-- (markers dropped), else (fair) the next key's in the ring (lib/fair.lua), else a prioritized one below 0;
-- each an O(1) or O(log n) step. false when none is left.
local function take_one(fair)
  local bid, bscore = best()
  if bid and bscore < 100 * BAND then
    take_ranked(bid)
    return true
  end
  local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  while id == MARKER do  -- a wake-up, not a task
    redis.call('LPOP', KEYS[2])
    id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  end
  if not id and fair then
    id = fair_take(prefix)
    if id then redis.call('LPUSH', KEYS[2], id) end
  end
  if id then
    ids[#ids + 1] = id
  elseif bid then
    take_ranked(bid)
  else
    return false
  end
  return true
end
-- a FAIR queue: one id at a time (take_one), the ring of keys after the shared LIST
if ARGV[10] == '1' and count > 0 then
  for _ = 1, count do
    if not take_one(true) then break end
  end
  count = 0
end
-- a queue of default priorities only (the common case) moves its next `count` ids in three commands,
-- not an LMOVE each: the same ids, in the same order, to the same places as LMOVE RIGHT LEFT one by one
-- (the tail first; each pushed onto the processing list's head). Markers there (the LIST then holds
-- nothing else, lib/ready.lua) are dropped, as the loop below drops them.
if not ranked and count > 0 then
  local bulk = math.min(count, 1000)  -- one LPUSH; a larger batch takes the rest one by one below
  local got = redis.call('LRANGE', KEYS[1], -bulk, -1)
  if #got > 0 then
    local moved = {}
    for i = #got, 1, -1 do
      if got[i] ~= MARKER then moved[#moved + 1] = got[i]; ids[#ids + 1] = got[i] end
    end
    -- the push before the trim: over maxmemory Redis refuses the LPUSH before anything is written, and
    -- the script ends with nothing moved; LTRIM, which only frees memory, it would let through
    if #moved > 0 then redis.call('LPUSH', KEYS[2], unpack(moved)) end
    redis.call('LTRIM', KEYS[1], 0, -#got - 1)
  end
  count = count - bulk
  if #got < bulk then count = 0 end  -- the LIST is empty
end
for _ = 1, count do
  if not take_one(false) then break end
end
local out = {}
local function done(id)  -- a task that will not run needs no cancel request (one BLMOVE moved before it finished)
  if redis.call('TYPE', KEYS[5])['ok'] == 'hash' then redis.call('HDEL', KEYS[5], id) end
end
local function skip(id, code)
  out[#out + 1] = id; out[#out + 1] = code; out[#out + 1] = ''; out[#out + 1] = 0
  out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = ''
  out[#out + 1] = ''; out[#out + 1] = ''
end
for _, id in ipairs(ids) do
  local tkey = prefix .. 't:' .. id
  local skey = prefix .. 'status:' .. id
  local f = redis.pcall('HMGET', tkey, 'msg', 'state', 'deliveries', 'failures', 'workers', 'enqueued_at', 'started_at', 'task', 'idem', 'metadata',
    'maxr', 'rate', 'rl', 'slot', 'lk', 'fk', 'dk')
  -- every key of this id is checked before any write to it, so a bad one cannot abort the script: the
  -- hash by HMGET's reply here; the guard by SET NX's (it writes nothing to a key that exists, whatever
  -- its type) and, when that key exists, by GET's reply (below), not by a TYPE first
  if f.err or (f[3] and not tonumber(f[3])) or (f[4] and not tonumber(f[4])) then
    skip(id, 5)
  elseif not f[1] then
    skip(id, 4)
  elseif f[2] == 'finished' or f[2] == 'dead' then
    redis.call('LREM', KEYS[2], 1, id)
    done(id)
    skip(id, 2)
  else
    local claimed = redis.call('SET', skey, 'running:' .. worker, 'NX', 'PX', lease)
    local guard = not claimed and redis.pcall('GET', skey)
    if guard and type(guard) == 'table' and guard.err then
      skip(id, 5)  -- the guard is not a string: written by another program
    elseif claimed and admit(prefix, q, now, id, tkey, limit_path(f[8] or '', f[15]), f[11], f[12], f[13], ARGV[8], ARGV[9]) then
      redis.call('DEL', skey)  -- over a limit: it waits in Redis, not in this worker
      redis.call('LREM', KEYS[2], 1, id)
      skip(id, 6)
    elseif claimed then
      local d = (tonumber(f[3]) or 0) + 1
      local workers = f[5]
      if workers and workers ~= '' then workers = workers .. ',' .. worker else workers = worker end
      local started = f[7] or now
      if f[7] then  -- one HSET either way
        redis.call('HSET', tkey, 'deliveries', d, 'state', 'running', 'last_attempted_at', now, 'workers', workers)
      else
        redis.call('HSET', tkey, 'deliveries', d, 'state', 'running', 'last_attempted_at', now, 'workers', workers, 'started_at', now)
      end
      out[#out + 1] = id; out[#out + 1] = 1; out[#out + 1] = f[1]; out[#out + 1] = d
      out[#out + 1] = tonumber(f[4]) or 0; out[#out + 1] = workers; out[#out + 1] = f[6] or ''; out[#out + 1] = started
      out[#out + 1] = f[8] or ''; out[#out + 1] = f[10] or ''
      -- plain: no idempotency key, no slot held before, none taken now (admit takes one only for a max_running),
      -- no limit, fairness, debounce or throttle key
      local plain = (f[9] or '') == '' and not f[14] and not max_of(f[11]) and not max_of(ARGV[8])
        and not f[15] and not f[16] and not f[17]
      if plain then out[#out + 1] = '1' else out[#out + 1] = '' end
    elseif guard == 'success' then
      -- a copy that already ran (a late ack of a reaped worker): finish it without running
      redis.call('LREM', KEYS[2], 1, id)
      redis.call('HSET', tkey, 'state', 'finished')
      redis.call('HSETNX', tkey, 'finished_at', now)
      redis.call('PEXPIRE', tkey, ARGV[5])
      local idem = f[9]
      if idem and idem ~= '' then
        local ikey = prefix .. 'idem:' .. idem
        if redis.call('TYPE', ikey)['ok'] == 'string' and redis.call('GET', ikey) == id then
          redis.call('PEXPIRE', ikey, ARGV[7])
        end
      end
      done(id)
      skip(id, 2)
    else
      redis.call('LREM', KEYS[2], 1, id)
      redis.call('ZADD', KEYS[3], now + 1000, id)
      redis.call('HSET', tkey, 'state', 'scheduled')
      skip(id, 3)
    end
  end
end
return out
