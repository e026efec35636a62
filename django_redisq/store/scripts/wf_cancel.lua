-- wf_cancel: cancel a workflow. From now on wf_done.lua releases nothing; the caller then
-- cancels the steps already queued (a worker that released a step just before re-reads the
-- status after queueing it and cancels it itself, so no step queued around this instant runs).
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
-- ARGV[1] -> who cancels (text)
-- ARGV[2] -> TTL in ms of the keys from now (RESULT_TTL)
--
-- Returns: the status before ('' if there is no such workflow); 'succeeded' and 'cancelled'
--          are left as they are
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if status == 'succeeded' or status == 'cancelled' then return status end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'cancelled_by', ARGV[1],
  'finished_at', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
for j = 1, 7 do redis.call('PEXPIRE', KEYS[j], ARGV[2]) end
return status
