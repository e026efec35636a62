-- fetch: take up to n ids from pending into this worker's processing list and
-- claim each one's idempotency guard (SET NX PX) before it may run.
--
-- KEYS[1] -> P:pending              (LIST)
-- KEYS[2] -> P:processing:<worker>  (LIST)
-- KEYS[3] -> P:scheduled            (ZSET), where a task another worker still holds is put back
-- ARGV[1] -> P:            the queue's key prefix
-- ARGV[2] -> n             how many ids to take from pending (may be 0)
-- ARGV[3] -> lease in ms   lifetime of the guard; the worker's heartbeat renews it
-- ARGV[4] -> worker id
-- ARGV[5] -> result TTL in ms, applied to a task found already successful
-- ARGV[6] -> an id that BLMOVE already put in KEYS[2], claimed first ('' = none)
--
-- Returns: a flat array, 9 entries per id: id, code, message, deliveries, failures,
--   worker ids (comma-joined), enqueued_at, started_at (Redis ms), task path
--   (message and later are '' / 0 unless RUN)
--   code 1 RUN   -> claimed: run it, then ack, retry or bury it
--   code 2 DONE  -> already successful, or finished or dead: removed from processing, do not run
--   code 3 BUSY  -> another worker's guard is still held: moved to scheduled for 1 s later
--   code 4 NOMSG -> no task data for this id: left in processing for the worker to bury
--   code 5 CORRUPT -> task data of the wrong type or with non-numeric counters: left for burial
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, worker, lease = ARGV[1], ARGV[4], ARGV[3]
local ids = {}
-- the moved id must still be ours: a worker that stalled past WORKER_TIMEOUT after its
-- BLMOVE may have been reaped meanwhile (LPOS is O(1) here: BLMOVE put it at the head)
if ARGV[6] ~= '' and redis.call('LPOS', KEYS[2], ARGV[6]) then ids[1] = ARGV[6] end
for _ = 1, tonumber(ARGV[2]) do
  local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not id then break end
  ids[#ids + 1] = id
end
local out = {}
local function skip(id, code)
  out[#out + 1] = id; out[#out + 1] = code; out[#out + 1] = ''; out[#out + 1] = 0
  out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = ''
end
for _, id in ipairs(ids) do
  local tkey = prefix .. 't:' .. id
  local f = redis.pcall('HMGET', tkey, 'msg', 'state', 'deliveries', 'failures', 'workers', 'enqueued_at', 'started_at', 'task')
  if f.err or (f[3] and not tonumber(f[3])) or (f[4] and not tonumber(f[4])) then
    skip(id, 5)  -- checked before any write, so a bad hash cannot abort this script half-way
  elseif not f[1] then
    skip(id, 4)
  elseif f[2] == 'finished' or f[2] == 'dead' then
    redis.call('LREM', KEYS[2], 1, id)
    skip(id, 2)
  else
    local skey = prefix .. 'status:' .. id
    if redis.call('SET', skey, 'running:' .. worker, 'NX', 'PX', lease) then
      local d = (tonumber(f[3]) or 0) + 1
      redis.call('HSET', tkey, 'deliveries', d)
      local workers = f[5]
      if workers and workers ~= '' then workers = workers .. ',' .. worker else workers = worker end
      redis.call('HSET', tkey, 'state', 'running', 'last_attempted_at', now, 'workers', workers)
      local started = tonumber(f[7]) or now
      if not f[7] then redis.call('HSET', tkey, 'started_at', now) end
      out[#out + 1] = id; out[#out + 1] = 1; out[#out + 1] = f[1]; out[#out + 1] = d
      out[#out + 1] = tonumber(f[4]) or 0; out[#out + 1] = workers; out[#out + 1] = tonumber(f[6]) or 0; out[#out + 1] = started
      out[#out + 1] = f[8] or ''
    elseif redis.call('GET', skey) == 'success' then
      redis.call('LREM', KEYS[2], 1, id)
      redis.call('HSET', tkey, 'state', 'finished')
      redis.call('HSETNX', tkey, 'finished_at', now)
      redis.call('PEXPIRE', tkey, ARGV[5])
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
