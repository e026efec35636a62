-- release: a stopping worker hands back tasks it fetched but never started,
-- undoing the claim (delivery count, worker id, guard), so they run next
-- elsewhere as if never taken. With no ids given, it hands back everything
-- left in its processing list and leaves the heartbeat set (clean exit).
--
-- KEYS[1] -> P:processing:<worker>  (LIST)
-- KEYS[2] -> P:pending              (LIST)
-- KEYS[3] -> P:workers              (ZSET)
-- ARGV[1] -> P:          the queue's key prefix
-- ARGV[2] -> worker id
-- ARGV[3..] -> ids never started (undo their claim); none = release all and deregister
--
-- Returns: number of tasks handed back
local prefix, w = ARGV[1], ARGV[2]
local n = 0
local function give_back(id, undo)
  local tkey = prefix .. 't:' .. id
  redis.call('RPUSH', KEYS[2], id)
  redis.call('HSET', tkey, 'state', 'pending')
  local skey = prefix .. 'status:' .. id
  if redis.call('GET', skey) == 'running:' .. w then
    redis.call('DEL', skey)
    if undo then
      if tonumber(redis.call('HINCRBY', tkey, 'deliveries', -1)) <= 0 then redis.call('HDEL', tkey, 'started_at') end
      local workers = redis.call('HGET', tkey, 'workers') or ''
      local cut = string.find(workers, ',[^,]*$')
      if cut then workers = string.sub(workers, 1, cut - 1) else workers = '' end
      redis.call('HSET', tkey, 'workers', workers)
    end
  end
  n = n + 1
end
if #ARGV >= 3 then
  for i = 3, #ARGV do
    if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then give_back(ARGV[i], true) end
  end
else
  while true do
    local id = redis.call('RPOP', KEYS[1])
    if not id then break end
    give_back(id, false)
  end
  redis.call('ZREM', KEYS[3], w)
  redis.call('DEL', prefix .. 'worker:' .. w)
end
return n
