-- enqueue_again: settle a plain enqueue whose outcome is not known. The common enqueue (a generated id,
-- no idempotency key, no delay, priority 0, no limits) is two plain commands sent back to back, HSET of
-- the task hash then LPUSH of its id (store/broker/plain.py); when their connection fails, or a reply
-- is an error (a pending key of the wrong type), either may or may not have run. This step makes the
-- outcome certain, for each task:
--   * no hash: neither ran (the hash is written first): it is stored and queued as enqueue.lua would;
--   * a hash still 'pending' and never delivered: its id is pushed (again): if the first push ran, the
--     copy is absorbed where a redelivered copy always is (fetch.lua: the guard of the copy that runs,
--     or the hash's state once it has finished), so the task runs once;
--   * any other state: a worker has taken it since, so it was queued: nothing to do.
--
-- KEYS[1] -> P:pending    (LIST)
-- KEYS[2] -> P:scheduled  (ZSET), KEYS[3] -> P:prioritized (ZSET), KEYS[4] -> P:prioseq (STRING):
--            as in enqueue.lua (lib/store.lua writes a task there only if it was delayed or ranked)
-- ARGV[1] -> P:           the queue's key prefix
-- ARGV[2] -> n            number of tasks that follow, 7 ARGV each, as in enqueue.lua
--
-- Returns: {now}: the Redis time in ms (the enqueued_at of the tasks stored here)
--! include store.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local prefix = ARGV[1]
local q = {pending = KEYS[1], scheduled = KEYS[2], prioritized = KEYS[3], seq = KEYS[4]}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 7
  local id = ARGV[b]
  local tkey = prefix .. 't:' .. id
  local kind = redis.call('TYPE', tkey)['ok']
  if kind ~= 'hash' then
    store_task(prefix, q, now, id, ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), ARGV[b + 4], tonumber(ARGV[b + 5]),
      ARGV[b + 6])
  else
    local f = redis.call('HMGET', tkey, 'state', 'deliveries')
    if f[1] == 'pending' and (tonumber(f[2]) or 0) == 0 then ready(q.pending, q.prioritized, q.seq, id, 0, false) end
  end
end
return {now}
