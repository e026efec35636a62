-- wf_start: the first steps are queued: a running workflow's keys no longer expire
-- (wf_create.lua gave them a provisional TTL; wf_done/wf_fail/wf_cancel set the final one).
--
-- KEYS[1] -> W:meta (HASH)   KEYS[2] -> W:spec (HASH)   KEYS[3] -> W:deps (HASH)
-- KEYS[4] -> W:done (SET)    KEYS[5] -> W:res (HASH)    KEYS[6] -> W:gate (HASH)   KEYS[7] -> W:failed (SET)
--
-- ARGV[1] -> none: the step takes no arguments
--
-- Returns: the workflow's status, or '' if it is gone
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return '' end
if status == 'running' then
  for j = 1, 7 do redis.call('PERSIST', KEYS[j]) end
end
return status
