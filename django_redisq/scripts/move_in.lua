-- move_in: second step of replaying dead letters into another queue (see
-- move_out.lua): store the copies here and make them pending. Like replay.lua,
-- the failure count restarts at zero and the error history is kept. The copy
-- takes its idempotency key in this queue if the key is free here.
--
-- KEYS[1] -> P:pending   (LIST) of the target queue
-- ARGV[1] -> P:          the target queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> n           number of tasks that follow, 10 ARGV each:
--   id, message JSON (its queue already rewritten), task path, errors JSON, errors_len,
--   errors_dropped, worker ids (comma-joined), enqueued_at (Redis ms), source queue,
--   idempotency key ('' = none)
--
-- Returns: an array of n integers, one per task:
--   1 -> stored and pending here
--   0 -> not stored: a task with this id is already here (an earlier, interrupted move)
--! include idem.lua
local prefix = ARGV[1]
want(KEYS[1], 'list')
local out = {}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 10
  local id, idem = ARGV[b], ARGV[b + 9]
  local tkey = prefix .. 't:' .. id
  if want(tkey, 'hash') == 'hash' then
    out[#out + 1] = 0
  else
    redis.call('HSET', tkey, 'msg', ARGV[b + 1], 'task', ARGV[b + 2], 'state', 'pending', 'errors', ARGV[b + 3],
      'workers', ARGV[b + 6], 'enqueued_at', ARGV[b + 7], 'deliveries', 0, 'failures', 0, 'replayed', 1,
      'replayed_from', ARGV[b + 8], 'idem', idem)
    if ARGV[b + 4] ~= '' then redis.call('HSET', tkey, 'errors_len', ARGV[b + 4]) end
    if ARGV[b + 5] ~= '' then redis.call('HSET', tkey, 'errors_dropped', ARGV[b + 5]) end
    idem_take(prefix, idem, id)
    redis.call('LPUSH', KEYS[1], id)
    out[#out + 1] = 1
  end
end
return out
