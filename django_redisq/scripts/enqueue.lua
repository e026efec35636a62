-- enqueue: store tasks and make them pending (or scheduled when delayed).
--
-- KEYS[1] -> P:pending    (LIST)
-- KEYS[2] -> P:scheduled  (ZSET, score = due time in Redis ms)
-- ARGV[1] -> P:           the queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> n            number of tasks that follow, 5 ARGV each:
--   id, message JSON, task path, delay in ms (0 = run now), idempotency key ('' = none)
--
-- Returns: an array of n strings, one per task:
--   ''        -> stored and queued
--   <id>      -> not stored: the idempotency key is held by task <id>
--   '!'       -> not stored: a task with this id already exists
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local out = {}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 5
  local id, msg, path, delay, idem = ARGV[b], ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), ARGV[b + 4]
  local tkey = prefix .. 't:' .. id
  local holder = false
  if idem ~= '' then
    local ikey = prefix .. 'idem:' .. idem
    holder = redis.call('GET', ikey)
    if holder and redis.call('EXISTS', prefix .. 't:' .. holder) == 0 then
      holder = false
    end
    if not holder then
      redis.call('SET', ikey, id)
    end
  end
  if holder then
    out[#out + 1] = holder
  elseif redis.call('EXISTS', tkey) == 1 then
    out[#out + 1] = '!'
  else
    if delay > 0 then
      redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', 'scheduled', 'enqueued_at', now,
        'deliveries', 0, 'failures', 0, 'idem', idem)
      redis.call('ZADD', KEYS[2], now + delay, id)
    else
      redis.call('HSET', tkey, 'msg', msg, 'task', path, 'state', 'pending', 'enqueued_at', now,
        'deliveries', 0, 'failures', 0, 'idem', idem)
      redis.call('LPUSH', KEYS[1], id)
    end
    out[#out + 1] = ''
  end
end
return out
