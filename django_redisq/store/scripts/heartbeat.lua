-- heartbeat: a worker says it is alive for one queue, publishes what it is,
-- and renews the guards of the tasks it holds so they outlive long tasks. It
-- also tells the worker whether it was still registered: a worker that finds
-- itself gone was reaped (paused past WORKER_TIMEOUT) and must drop, unstarted,
-- whatever it still holds locally (the fence). And it keeps the start of the
-- worker's unbroken run of heartbeats, which reap.lua uses to refuse reaping
-- by a worker that has just come back from an outage itself. And it records
-- which connection proves the worker's process alive (store/steps/presence.py): a
-- reaper that finds that connection gone from the server reaps the worker at
-- once instead of after WORKER_TIMEOUT.
--
-- KEYS[1] -> P:workers              (ZSET, worker id -> Redis ms of its last heartbeat)
-- KEYS[2] -> P:processing:<worker>  (LIST)
-- KEYS[3] -> P:alive                (HASH, worker id -> Redis ms its unbroken run of heartbeats began)
-- KEYS[4] -> P:presence             (HASH, worker id -> '<server run_id>:<client id>')
-- ARGV[1] -> P:           the queue's key prefix
-- ARGV[2] -> worker id
-- ARGV[3] -> lease in ms  (guard lifetime, also the lifetime of the info key)
-- ARGV[4] -> info JSON    (host, pid, queues, concurrency, started_at)
-- ARGV[5] -> gap in ms    a heartbeat later than this after the previous one starts a new run
-- ARGV[6] -> presence     '<server run_id>:<client id>' of the worker's presence connection to this
--                         server; '' (none: CLIENT refused by an ACL) leaves the worker to the timeout
--
-- Returns: {Redis time in ms, 1 if the worker was registered before this call else 0}
--! include shape.lua
local bad = wrong_shape({'zset', 'list', 'hash', 'hash'})
if bad then return bad end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, w = ARGV[1], ARGV[2]
local prev = tonumber(redis.call('ZSCORE', KEYS[1], w))
local since = tonumber(redis.call('HGET', KEYS[3], w))
if not prev or not since or now - prev > tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[3], w, now)
end
redis.call('ZADD', KEYS[1], now, w)
if (ARGV[6] or '') ~= '' then redis.call('HSET', KEYS[4], w, ARGV[6]) else redis.call('HDEL', KEYS[4], w) end
redis.call('SET', prefix .. 'worker:' .. w, ARGV[4], 'PX', ARGV[3])
local mine = 'running:' .. w
for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local skey = prefix .. 'status:' .. id
  -- a guard of another type is left to the task's settle step (bury.lua sets it aside)
  if redis.call('TYPE', skey)['ok'] == 'string' and redis.call('GET', skey) == mine then
    redis.call('PEXPIRE', skey, ARGV[3])
  end
end
if prev then return {now, 1} end
return {now, 0}
