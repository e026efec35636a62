-- move_in: second step of replaying dead letters into another queue (see
-- move_out.lua): store the copies here and make them pending. Like replay.lua,
-- the failure count restarts at zero and the error history is kept. The copy
-- takes its idempotency key in this queue if the key is free here.
--
-- KEYS[1] -> P:pending   (LIST) of the target queue
-- KEYS[2] -> P:prioritized (ZSET) and KEYS[3] -> P:prioseq (STRING) of the target queue (lib/ready.lua)
-- ARGV[1] -> P:          the target queue's key prefix; task keys are ARGV[1] .. 't:' .. id
-- ARGV[2] -> n           number of tasks that follow, 11 ARGV each:
--   id, message JSON (its queue already rewritten), task path, errors JSON, errors_len,
--   errors_dropped, worker ids (comma-joined), enqueued_at (Redis ms), source queue,
--   idempotency key ('' = none), priority ('' = 0)
--
-- Returns: an array of n integers, one per task:
--   1 -> stored and pending here
--   0 -> not stored: a task with this id is already here (an earlier, interrupted move)
--! include idem.lua
--! include ready.lua
local prefix = ARGV[1]
want(KEYS[1], 'list')
want(KEYS[2], 'zset')
local out = {}
for i = 0, tonumber(ARGV[2]) - 1 do
  local b = 3 + i * 11
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
    local prio = stored_prio(tkey)  -- '' or a bad value: 0
    if ARGV[b + 10] ~= '' then
      redis.call('HSET', tkey, 'prio', ARGV[b + 10])
      prio = stored_prio(tkey)
    end
    ready(KEYS[1], KEYS[2], KEYS[3], id, prio, false)
    out[#out + 1] = 1
  end
end
return out
