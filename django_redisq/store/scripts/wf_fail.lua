-- wf_fail: a step failed for good (run by its worker BEFORE the step's burial). Fails the
-- workflow: no step waiting for it is ever released (wf_done.lua releases a step only when
-- every parent is done), and the keys now expire with the dead letters, so that a replay
-- of the step (which un-fails the workflow in wf_done.lua when it succeeds) still finds them.
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
-- ARGV[1] -> the step (its index)
-- ARGV[2] -> the error, as text naming the failed step and its exception
-- ARGV[3] -> TTL in ms of the keys while the workflow stays failed
--
-- Returns: {status, on_error spec ('' = none), 1 if this call failed the workflow else 0}
--   status 'gone', 'cancelled', 'succeeded' (nothing changed) or 'failed'. The on_error spec is
--   returned on every call that finds the workflow failed: its queueing is idempotent by id,
--   so a crash before it is repaired by the redelivered step, and it still runs once.
local meta, failed = KEYS[1], KEYS[7]
local status = redis.call('HGET', meta, 'status')
if not status then return {'gone', '', 0} end
if status == 'cancelled' or status == 'succeeded' then return {status, '', 0} end
redis.call('SADD', failed, ARGV[1])
local first = 0
if status ~= 'failed' then
  local t = redis.call('TIME')
  redis.call('HSET', meta, 'status', 'failed', 'failed_step', ARGV[1], 'error', ARGV[2],
    'finished_at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  for j = 1, 7 do redis.call('PEXPIRE', KEYS[j], ARGV[3]) end
  first = 1
end
return {'failed', redis.call('HGET', meta, 'on_error') or '', first}
