-- wf_resume: a failed step was replayed from the dead letters (ops/operations.py, after the
-- replay): take it out of the failed steps, and once none is left the workflow runs again and
-- its keys no longer expire. If this never runs (a crash right after the replay), wf_done.lua
-- does the same when the replayed step succeeds; reads show the workflow running meanwhile.
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
-- ARGV[1] -> the replayed step (its index)
--
-- Returns: 'resumed' (this call made the workflow run again), else its status ('' if gone)
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if redis.call('SREM', KEYS[7], ARGV[1]) == 1 and status == 'failed' and redis.call('SCARD', KEYS[7]) == 0 then
  redis.call('HSET', KEYS[1], 'status', 'running')
  redis.call('HDEL', KEYS[1], 'failed_step', 'error', 'finished_at')
  for j = 1, 7 do redis.call('PERSIST', KEYS[j]) end
  return 'resumed'
end
return status
