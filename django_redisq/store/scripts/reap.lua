-- reap: give back the tasks of workers whose heartbeat stopped. Each dead
-- worker's processing list goes back to the front of pending (they run next),
-- its guards are released, and it is removed from the heartbeat set. The
-- delivery each one counted stays counted: its worker may have died running it.
-- A task with a cancel request (lib/cancel.lua) is dead-lettered with reason
-- 'cancelled' instead of given back: it never runs again.
--
-- Who is dead, one of two ways:
-- * by the clock (no ARGV[6..]): workers whose last heartbeat is older than
--   WORKER_TIMEOUT. A worker reaps so only while its own heartbeats are fresh
--   and have been unbroken for at least WORKER_TIMEOUT: after Redis was paused
--   or unreachable, every heartbeat looks stale, and the first worker back must
--   not reap the others before they had the time to heartbeat again.
-- * by their connection (ARGV[6..], store/steps/presence.py): workers whose presence
--   connection the server no longer has, seen gone long enough by the caller
--   that a live worker would have reconnected and registered a new one. Each
--   is reaped only if its P:presence entry is still the one seen gone (a new
--   entry means it reconnected) and it is still registered. A pause of Redis
--   or of the worker keeps the connection, so neither reaps anyone this way.
-- A worker never reaps itself. The presence entries of workers no longer
-- registered go too (a clean exit leaves one).
--
-- KEYS[1] -> P:workers  (ZSET, worker id -> last heartbeat in Redis ms)
-- KEYS[2] -> P:pending  (LIST)
-- KEYS[3] -> P:alive    (HASH, worker id -> start of its unbroken run of heartbeats)
-- KEYS[4] -> P:dead     (ZSET), where cancelled tasks go
-- KEYS[5] -> P:cancels  (HASH, task id -> '<Redis ms>|<who>')
-- KEYS[6] -> P:prioritized (ZSET) and KEYS[7] -> P:prioseq (STRING): a task of a priority other
--            than 0 goes back to the front of its priority there (lib/ready.lua)
-- KEYS[8] -> P:slots, KEYS[9] -> P:blocked (lib/limits.lua): a slot the task held is freed and one task waiting for it made ready
-- KEYS[10] -> P:presence (HASH, worker id -> '<server run_id>:<client id>')
-- ARGV[1] -> P:         the queue's key prefix (processing lists, task hashes, guards, the counter
--                       P:recovered of tasks given back)
-- ARGV[2] -> dead after in ms: a worker silent for longer is dead
-- ARGV[3] -> most workers reaped by one call
-- ARGV[4] -> the reaping worker's id ('' = an operator's call: no condition on the caller)
-- ARGV[5] -> gap in ms: the reaper's own last heartbeat must be at most this old
-- ARGV[6], ARGV[7], ... -> worker id, the presence entry seen gone: reap these (and only these) by their connection
--
-- Returns: {tasks given back or cancelled, {id, its dead worker, task path, deliveries, ...} of the tasks
--   given back, reaped worker id, ...}; {0, -1} when the reaper may not reap yet
--! include shape.lua
--! include handback.lua
local bad = wrong_shape({'zset', 'list', 'hash', 'zset', 'hash', 'zset'})
if bad then return bad end
local pt = redis.call('TYPE', KEYS[10])['ok']
if pt ~= 'hash' and pt ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. KEYS[10] .. ' is a ' .. pt .. ', expected a hash (written by another program?)')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix, timeout, me = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local by_connection = #ARGV > 5
if me ~= '' then
  local mine = tonumber(redis.call('ZSCORE', KEYS[1], me))
  local since = tonumber(redis.call('HGET', KEYS[3], me))
  if not mine or now - mine > tonumber(ARGV[5]) then return {0, -1} end
  if not by_connection and (not since or now - since < timeout) then return {0, -1} end
end
local requests = redis.call('EXISTS', KEYS[5]) == 1
local q = {pending = KEYS[2], prioritized = KEYS[6], seq = KEYS[7], slots = KEYS[8], blocked = KEYS[9]}
local dead
if by_connection then
  dead = {}
  for i = 6, #ARGV - 1, 2 do
    local w = ARGV[i]
    if redis.call('HGET', KEYS[10], w) == ARGV[i + 1] then
      if redis.call('ZSCORE', KEYS[1], w) then dead[#dead + 1] = w else redis.call('HDEL', KEYS[10], w) end
    end
  end
else
  dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - timeout, 'LIMIT', 0, tonumber(ARGV[3]) + 1)  -- +1: we may be among them
end
local out = {0, {}}
local back = out[2]
local reaped = 0
for _, w in ipairs(dead) do
  local plist = prefix .. 'processing:' .. w
  local pt = redis.call('TYPE', plist)['ok']
  if w ~= me and reaped < tonumber(ARGV[3]) then
    -- a "list" of another type holds no task id: left in place for an operator, its worker deregistered
    while pt == 'list' do
      local id = redis.call('RPOP', plist)
      if not id then break end
      if id ~= MARKER then  -- a marker is a wake-up its worker moved, not a task
        local is_hash, cancelled = hand_back(prefix, q, KEYS[4], KEYS[5], requests, id, now)
        if not cancelled then
          local f = is_hash and redis.call('HMGET', prefix .. 't:' .. id, 'task', 'deliveries') or {}
          back[#back + 1] = id; back[#back + 1] = w; back[#back + 1] = f[1] or ''; back[#back + 1] = f[2] or '0'
        end
        local skey = prefix .. 'status:' .. id
        if redis.call('TYPE', skey)['ok'] == 'string' and redis.call('GET', skey) == 'running:' .. w then redis.call('DEL', skey) end
        out[1] = out[1] + 1
      end
    end
    redis.call('ZREM', KEYS[1], w)
    redis.call('HDEL', KEYS[3], w)
    redis.call('HDEL', KEYS[10], w)
    redis.call('DEL', prefix .. 'worker:' .. w)
    out[#out + 1] = w
    reaped = reaped + 1
  end
end
if #back > 0 then incr(prefix .. 'recovered', #back / 4) end
return out
