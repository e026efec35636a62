-- move_in: receive dead letters replayed from another queue (its keys are in
-- another cluster slot, so the move is two steps: this script stores a copy
-- here, then purge.lua deletes the original; a crash between them leaves the
-- task in both, never in neither). Like replay.lua, the failure count restarts
-- at zero and the error history is kept.
--
-- KEYS[1] -> P:pending   (LIST) of the target queue
-- ARGV[1] -> P:          the target queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> n           number of tasks that follow, 7 ARGV each:
--   id, message JSON (its queue already rewritten), task path, errors JSON,
--   worker ids (comma-joined), enqueued_at (Redis ms), source queue
--
-- Returns: an array of n integers, one per task:
--   1 -> stored and pending here
--   0 -> not stored: a task with this id is already here (an earlier, interrupted move)
local prefix = ARGV[1]
local out = {}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 7
  local id = ARGV[b]
  local tkey = prefix .. 't:' .. id
  if redis.call('EXISTS', tkey) == 1 then
    out[#out + 1] = 0
  else
    redis.call('HSET', tkey, 'msg', ARGV[b + 1], 'task', ARGV[b + 2], 'state', 'pending', 'errors', ARGV[b + 3],
      'workers', ARGV[b + 4], 'enqueued_at', ARGV[b + 5], 'deliveries', 0, 'failures', 0, 'replayed', 1,
      'replayed_from', ARGV[b + 6])
    redis.call('LPUSH', KEYS[1], id)
    out[#out + 1] = 1
  end
end
return out
